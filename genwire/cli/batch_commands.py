"""``genwire batches list|cancel FILE``: the batches a batch-mode run holds (SPEC §14),
read from its journal in the checkpoint directory, their state asked of the provider.
Also the lines ``genwire run --batch`` prints about batch mode. Heavy imports stay inside
the functions: registering these commands costs nothing."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

__all__ = ["batches", "interrupted_hint", "local_provider_notes"]

_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
_OUTPUT = click.option(
    "-o", "output", type=click.Path(dir_okay=False, path_type=Path), help="The run's output (default: pipeline.output)."
)


def _journal_dir(container: Any, output: Path | None) -> Path:
    from genwire.engine.checkpoint import checkpoint_dir
    from genwire.engine.run import output_path

    return checkpoint_dir(output_path(container, output))


def interrupted_hint(file: Path, directory: Path) -> str | None:
    """What to say when a batch-mode run stops with batches still open, else None."""
    from genwire.engine.batch_journal import open_batch_ids

    open_batches = open_batch_ids(directory)
    if not open_batches:
        return None
    return (
        f"{len(open_batches)} batches are still running at the provider (they are not cancelled): rerun the same "
        f"command to collect them, or cancel them with `genwire batches cancel {file}`"
    )


def local_provider_notes(container: Any) -> list[str]:
    """``--batch`` says which providers it leaves online: the local provider never batches."""
    from genwire.config.schema import LocalProviderConfig

    used = {
        provider
        for t in container.plan().targets
        if t.name in container.config.models
        for provider in container.config.models[t.name].providers
    }
    return [
        f"provider {name} is local: its models run on this machine and never batch"
        for name in sorted(used)
        if isinstance(container.config.providers[name], LocalProviderConfig)
    ]


async def _states(container: Any, directory: Path, cancel: bool) -> list[dict[str, Any]]:
    from genwire.engine.batch_journal import journal_batches
    from genwire.errors import ModelError
    from genwire.providers.batch.collector import control_request
    from genwire.providers.batch.format import TERMINAL

    rows: list[dict[str, Any]] = []
    async with container:
        for batch_id, known in journal_batches(directory).items():
            row: dict[str, Any] = {
                "id": batch_id,
                "provider": known["provider"],
                "status": known["status"] or "unknown",
                "requests": known["requests"],
                "completed": None,
                "failed": None,
            }
            try:
                client = container.client(known["provider"])
                state = json.loads(await control_request(client, "GET", f"/batches/{batch_id}"))
                if cancel and state.get("status") not in TERMINAL:
                    state = json.loads(await control_request(client, "POST", f"/batches/{batch_id}/cancel", body={}))
                    row["cancelled"] = True
                counts = state.get("request_counts") or {}
                row.update(
                    status=state.get("status", row["status"]),
                    requests=counts.get("total", row["requests"]),
                    completed=counts.get("completed"),
                    failed=counts.get("failed"),
                )
            except (ModelError, KeyError, ValueError, AttributeError) as exc:
                row["error"] = exc.message if isinstance(exc, ModelError) else f"unreadable answer: {exc}"
            rows.append(row)
    return rows


def _show(rows: list[dict[str, Any]], directory: Path, as_json: bool, verb: str) -> None:
    from rich.console import Console
    from rich.table import Table

    if as_json:
        click.echo(json.dumps({"ok": True, "checkpoint": str(directory), "batches": rows}))
        return
    console = Console(highlight=False)
    if not rows:
        console.print(f"no batches recorded in {directory}", markup=False)
        return
    table = Table(title=f"Batches of {directory} {verb}", title_justify="left")
    for head in ("id", "provider", "status", "completed", "failed", "requests", "note"):
        table.add_column(head, overflow="fold")
    for r in rows:
        note = r.get("error") or ("cancel asked" if r.get("cancelled") else "")
        cells = [r["id"], r["provider"], r["status"], r["completed"], r["failed"], r["requests"], note]
        table.add_row(*["–" if c is None else str(c) for c in cells])
    console.print(table)


def _command(file: Path, output: Path | None, as_json: bool, cancel: bool) -> None:
    import asyncio

    from genwire.app import boot
    from genwire.errors import ConfigError, GenwireError, PluginError, RunSetupError, WiringError

    try:
        container = boot(file)
        directory = _journal_dir(container, output)
        rows = asyncio.run(_states(container, directory, cancel))
    except GenwireError as exc:  # one message, no traceback; 2 for an invalid config
        if as_json:
            click.echo(json.dumps({"ok": False, "error": str(exc)}))
        click.echo("error: " + str(exc), err=True)
        sys.exit(2 if isinstance(exc, ConfigError | WiringError | PluginError | RunSetupError) else 1)
    _show(rows, directory, as_json, "(cancel asked of every open one)" if cancel else "")
    if any("error" in r for r in rows):
        sys.exit(1)


@click.group()
def batches() -> None:
    """The Batch API batches a `genwire run --batch` holds (from its checkpoint)."""


@batches.command("list")
@_FILE
@_OUTPUT
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def list_batches(file: Path, output: Path | None, as_json: bool) -> None:
    """Show each batch of FILE's run: status and completed/failed/total requests."""
    _command(file, output, as_json, cancel=False)


@batches.command("cancel")
@_FILE
@_OUTPUT
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def cancel_batches(file: Path, output: Path | None, as_json: bool) -> None:
    """Cancel every open batch of FILE's run (a rerun resubmits what they did not answer)."""
    _command(file, output, as_json, cancel=True)
