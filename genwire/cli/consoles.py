"""The command line's consoles, made on first use: ``out`` (stdout) and ``err`` (stderr),
shared by every command module and ``cli.render``, so none imports another for them."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

__all__ = ["LazyConsole", "err", "out"]


class LazyConsole:
    """A rich console made on first use: importing rich costs ~0.1 s that ``--help`` and
    ``validate`` do not need."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def get(self) -> Console:
        if self._console is None:
            from rich.console import Console

            options = dict(self._options)
            if options.pop("wide_when_piped", False):
                # Piped output (CI logs, `| less`) gets a wide table instead of rich's 80 columns.
                options["width"] = None if sys.stdout.isatty() else 160
            self._console = Console(**options)
        return self._console

    def print(self, *objects: Any, **options: Any) -> None:
        self.get().print(*objects, **options)


out = LazyConsole(highlight=False, soft_wrap=False, wide_when_piped=True)
err = LazyConsole(stderr=True, highlight=False, soft_wrap=True)
