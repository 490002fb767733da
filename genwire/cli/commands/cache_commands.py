"""``genwire cache info`` and ``genwire cache clear``: the response cache (SPEC §12) of a
config, whether or not it is enabled."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from genwire.cli.consoles import out
from genwire.cli.errors import handle_errors
from genwire.cli.exits import write_json

__all__ = ["cache"]


_CACHE_FILE = click.argument(
    "file", type=click.Path(dir_okay=False, path_type=Path), default=Path("genwire.yaml"), required=False
)


def _response_cache(file: Path) -> Any:
    """The response cache of ``file``'s config (SPEC §12), whether or not it is enabled."""
    from genwire.config.loader import load_config
    from genwire.providers.response_cache import ResponseCache, cache_dir

    directory = cache_dir(load_config(file))
    assert directory is not None  # a config file always has a directory to sit beside
    return ResponseCache(directory)


@click.group()
def cache() -> None:
    """The response cache: answers a rerun takes instead of asking the model again."""


@cache.command("info")
@_CACHE_FILE
@click.option("--json", "as_json", is_flag=True, help="Print the figures as one JSON object.")
@handle_errors
def cache_info(file: Path, as_json: bool) -> None:
    """Entries, size, hits and age of FILE's response cache (default ./genwire.yaml)."""
    from genwire.cli.render import cache_table

    store = _response_cache(file)
    try:
        info = store.info()
    finally:
        store.close()
    if as_json:
        write_json(info.as_dict())
    else:
        out.print(cache_table(info))


@cache.command("clear")
@_CACHE_FILE
@handle_errors
def cache_clear(file: Path) -> None:
    """Delete every entry of FILE's response cache (default ./genwire.yaml)."""
    store = _response_cache(file)
    try:
        removed = store.clear()
    finally:
        store.close()
    out.print(f"removed {removed:,} cached answers from {store.directory}", markup=False)
