"""Numbers on the command line are finite: ``nan`` passes every range check (each
comparison with it is false) and would turn a cap off; ``inf`` is no cap at all."""

from __future__ import annotations

import math
from typing import Any

import click

__all__ = ["FiniteFloatRange"]


class FiniteFloatRange(click.FloatRange):
    """``click.FloatRange`` that refuses ``nan`` and ``inf`` (exit 2, naming the option)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = click.FLOAT.convert(value, param, ctx)
        if not math.isfinite(number):  # before the range: nan passes every comparison
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return super().convert(number, param, ctx)
