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

from genwire.cli.exits import write_json
from genwire.errors import plural

__all__ = ["batches", "interrupted_hint", "local_provider_notes"]

_FILE = click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
_OUTPUT = click.option(
    "-o", "output", type=click.Path(dir_okay=False, path_type=Path), help="The run's output (default: pipeline.output)."
)


def _journal_dir(container: Any, output: Path | None) -> Path:
    from genwire.engine.records.checkpoint import checkpoint_dir
    from genwire.engine.run.conductor import output_path

    return checkpoint_dir(output_path(container, output))


def interrupted_hint(file: Path, directory: Path) -> str | None:
    """What to say when a batch-mode run stops with batches still open, else None."""
    from genwire.engine.records.batch_journal import open_batch_ids

    open_batches = open_batch_ids(directory)
    if not open_batches:
        return None
    one = len(open_batches) == 1
    running = f"{plural(len(open_batches), 'batch', 'batches')} {'is' if one else 'are'}"
    return (
        f"{running} still running at the provider ({'it is' if one else 'they are'} not cancelled): rerun the same "
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
    from genwire.engine.records.batch_journal import JOURNAL_NAME, JournalState, journal_batches, journal_tag
    from genwire.errors import ModelError
    from genwire.providers.batch.control import find_batches

    state = JournalState.read(directory / JOURNAL_NAME)
    for warning in state.damaged:
        click.echo("warning: " + warning, err=True)
    rows: list[dict[str, Any]] = []
    async with container:
        known = journal_batches(directory)
        for batch_id, info in known.items():
            rows.append(await _state(container, batch_id, info["provider"], info["status"], info["requests"], cancel))
        # A damaged line may have named a batch: found again at the provider by the
        # journal's tag (or its input file), never left out unseen.
        for provider in _lost_providers(container, state):
            idless = {f for (p, f), ids in state.files.items() if p == provider and ids is None}
            try:
                async for batch in find_batches(container.client(provider), journal_tag(directory), idless):
                    if batch["id"] not in known:
                        row = await _state(container, batch["id"], provider, None, 0, cancel)
                        row["note"] = "found at the provider (the journal's line of it was damaged)"
                        rows.append(row)
            except ModelError as exc:
                rows.append(_row("(search)", provider, None, 0) | {"error": exc.message})
    return rows


def _lost_providers(container: Any, state: Any) -> list[str]:
    from genwire.config.schema import OpenAIProviderConfig

    names = [n for n, c in container.config.providers.items() if isinstance(c, OpenAIProviderConfig)]
    return [n for n in names if n in state.lost or None in state.lost]


def _row(batch_id: str, provider: str, status: str | None, requests: int) -> dict[str, Any]:
    return {
        "id": batch_id,
        "provider": provider,
        "status": status or "unknown",
        "requests": requests,
        "completed": None,
        "failed": None,
    }


async def _state(
    container: Any, batch_id: str, provider: str, status: str | None, requests: int, cancel: bool
) -> dict[str, Any]:
    """One batch's row, its state asked of the provider (cancelled first with ``cancel``)."""
    from genwire.errors import ModelError
    from genwire.providers.batch.control import control_request
    from genwire.providers.batch.format import TERMINAL

    row = _row(batch_id, provider, status, requests)
    if provider not in container.config.providers:
        row["error"] = (
            f"provider {provider!r} is no longer in the config: its batches cannot be asked for; add the provider "
            "back to see or cancel them"
        )
        return row
    try:
        client = container.client(provider)
        state = json.loads(await control_request(client, "GET", f"/batches/{batch_id}"))
        if not isinstance(state, dict):
            raise ValueError("not a JSON object")
        if cancel and state.get("status") not in TERMINAL:
            state = json.loads(await control_request(client, "POST", f"/batches/{batch_id}/cancel", body={}))
            row["cancelled"] = True
        counts = state.get("request_counts") if isinstance(state, dict) else None
        counts = counts if isinstance(counts, dict) else {}
        row.update(
            status=str(state.get("status", row["status"])),
            requests=counts.get("total", row["requests"]),
            completed=counts.get("completed"),
            failed=counts.get("failed"),
        )
    except ModelError as exc:
        row["error"] = exc.message
    except (ValueError, AttributeError) as exc:
        row["error"] = f"GET /batches/{batch_id} gave an unreadable answer: {exc}"
    return row


def _show(rows: list[dict[str, Any]], directory: Path, as_json: bool, verb: str) -> None:
    from rich.console import Console
    from rich.table import Table

    if as_json:
        ok = not any("error" in r for r in rows)
        write_json({"ok": ok, "checkpoint": str(directory), "batches": rows})
        return
    console = Console(highlight=False)
    if not rows:
        console.print(f"no batches recorded in {directory}", markup=False)
        return
    from genwire.cli.render import cell

    table = Table(title=cell(f"Batches of {directory} {verb}"), title_justify="left")
    for head in ("id", "provider", "status", "completed", "failed", "requests", "note"):
        table.add_column(head, overflow="fold")
    for r in rows:
        note = r.get("error") or ("cancel asked" if r.get("cancelled") else "") or r.get("note", "")
        cells = [r["id"], r["provider"], r["status"], r["completed"], r["failed"], r["requests"], note]
        table.add_row(*["–" if c is None else cell(str(c)) for c in cells])
    console.print(table)


def _refuse_while_running(directory: Path, file: Path) -> None:
    """``cancel`` while a run holds the output would be undone by nothing and would fail
    that run's rows: refused, naming the run, unless ``--force``."""
    from genwire.engine.records.checkpoint import lock_holder
    from genwire.errors import RunSetupError

    holder = lock_holder(directory)
    if holder is not None:
        raise RunSetupError(
            f"a genwire run (PID {holder}) holds this output and is waiting on these batches (checkpoint "
            f"{directory}); cancelling them fails its rows as cancelled. Stop that run first, or cancel anyway "
            f"with `genwire batches cancel {file} --force`"
        )


def _command(file: Path, output: Path | None, as_json: bool, cancel: bool, force: bool = False) -> None:
    import asyncio

    from genwire.app import boot
    from genwire.errors import ConfigError, GenwireError, PluginError, RunSetupError, WiringError

    try:
        container = boot(file)
        directory = _journal_dir(container, output)
        if cancel and not force:
            _refuse_while_running(directory, file)
        rows = asyncio.run(_states(container, directory, cancel))
    except GenwireError as exc:  # one message, no traceback; 2 for an invalid config
        if as_json:
            write_json({"ok": False, "error": str(exc)})
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
@click.option("--force", is_flag=True, help="Cancel even while a run holds the output (its rows fail as cancelled).")
def cancel_batches(file: Path, output: Path | None, as_json: bool, force: bool) -> None:
    """Cancel every open batch of FILE's run. The run that finds them cancelled fails
    their unanswered rows as `cancelled`; the rerun after it submits them again."""
    _command(file, output, as_json, cancel=True, force=force)
