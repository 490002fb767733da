"""``genwire serve FILE`` (SPEC §23): start the managed servers FILE's wired models reach,
print their URLs, and hold them until Ctrl-C (or SIGTERM). Meanwhile ``run``,
``preflight`` and ``estimate`` of a config in the same directory whose server spec is the
same find them in ``.genwire/servers.json`` and use them without a restart: editing a
prompt and running again costs no model load."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from genwire.cli.errors import handle_errors
from genwire.errors import GenwireError


@click.command()
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@handle_errors
def serve(file: Path) -> None:
    """Start FILE's managed servers and hold them until Ctrl-C; runs in the same directory
    with the same server spec use them without a restart."""
    from genwire.app import boot
    from genwire.cli.signals import Interrupted, run_interruptibly

    container = boot(file)
    if container.servers is None or not container.reachable_servers():
        raise GenwireError(f"{file}: no managed server to serve (no wired model reaches one under servers:)")
    try:
        run_interruptibly(_hold(container))
    except Interrupted as exc:
        click.echo(f"stopped (signal {exc}); the servers are down and their ports free", err=True)


async def _hold(container: Any) -> None:
    import asyncio

    from genwire.preflight.servers import start_servers

    async with container:
        checks, _ = await start_servers(container)
        for check in checks:
            label = check.target if check.endpoint is None else check.endpoint
            state = "ok" if check.status == "ok" else f"failed ({check.error_class})"
            click.echo(f"{label}: {state} in {check.latency_s:.1f} s: {check.message}")
        failed = [c for c in checks if c.status == "failed"]
        if failed:
            raise GenwireError(f"{len(failed)} of {len(checks)} servers did not start; none is held")
        fleet = container.servers
        fleet.hold()
        for name in container.reachable_servers():
            urls = ", ".join(fleet.url(name, i) for i in range(fleet.configs[name].replicas))
            click.echo(f"serving {name} at {urls}")
        click.echo("holding the servers until Ctrl-C", err=True)
        sys.stdout.flush()
        while fleet.failure is None:  # until a signal cancels this task, or a server is gone for good
            await asyncio.sleep(1.0)
        raise GenwireError(f"{fleet.failure}; genwire serve stops")
