"""Bounds on what one sandboxed Jinja expression or template may build, as Jinja's sandbox
bounds ``range`` (MAX_RANGE): ``'a' * 10**8`` would take 100 MB and ``10 ** 10 ** 10``
would never end. Each operation that can grow a value faster than its inputs (``*``,
``**``, ``%`` formatting, padding to a width) is checked before it runs; the inputs of
the others are bounded already, so the whole expression is."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from typing import Any

from jinja2.exceptions import SecurityError
from jinja2.sandbox import MAX_RANGE

MAX_SIZE = 10 * MAX_RANGE  # characters or items one operation may build (1,000,000)
MAX_INT_BITS = 10_000  # an integer's size (about 3,000 digits: Python prints no more than 4,300)

# Where a width in a format may be: `%-08.3f` (printf) and `{:>08.3}` (str.format).
_PRINTF_WIDTHS = re.compile(r"%[-#0 +]*(\*|\d*)(?:\.(\*|\d*))?")
# str methods that pad to a width given as their first argument
_PADDING = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


def bounded_binop(name: str, left: Any, right: Any) -> Any:
    """``left <name> right`` for the operators that can build a value larger than their
    operands; SecurityError saying which bound it passes."""
    if name == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(seq, str | list | tuple) and isinstance(times, int):
                _check_size(len(seq) * max(times, 0), f"{_shown(seq)} * {times}")
        if isinstance(left, int) and isinstance(right, int):
            _check_bits(left.bit_length() + right.bit_length(), f"{left} * {right}")
        return operator.mul(left, right)
    if name == "**":
        if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
            _check_bits(left.bit_length() * min(right, MAX_INT_BITS + 1), f"{left} ** {right}")
        return operator.pow(left, right)
    if name == "%":
        if isinstance(left, str):
            check_printf(left)
        return operator.mod(left, right)
    raise SecurityError(f"operator {name!r} is not intercepted")  # pragma: no cover - by construction


def check_printf(text: str) -> None:
    """A ``%`` format's widths and precisions within MAX_SIZE (``*`` is not accepted)."""
    for match in _PRINTF_WIDTHS.finditer(text):
        _check_widths(match.groups(), text)


def check_format(text: str) -> None:
    """A ``str.format`` format's widths within MAX_SIZE (a width from an argument,
    ``{:>{w}}``, is not accepted)."""
    import string  # here: few templates call format

    try:
        fields = list(string.Formatter().parse(text))
    except ValueError:
        return  # str.format reports it
    for _, _, spec, _ in fields:
        if spec and "{" in spec:
            raise SecurityError(f"format {_shown(text)}: a width from an argument is not allowed; write the width")
        _check_widths(tuple(re.findall(r"\d+", spec or "")), text)


def check_call(method: Callable[..., Any], args: tuple[Any, ...]) -> None:
    """A str method that pads to a width (``x.center(10**9)``), checked before it runs."""
    owner = getattr(method, "__self__", None)
    name = getattr(method, "__name__", "")
    if isinstance(owner, str) and name in _PADDING and args and isinstance(args[0], int):
        _check_size(args[0] * (owner.count("\t") if name == "expandtabs" else 1), f"{name}({args[0]})")


def bounded_width_filter(filter_function: Callable[..., Any]) -> Callable[..., Any]:
    """A Jinja filter that pads to its first argument (``center``, ``indent``: on every line)."""

    def bounded(value: Any, *args: Any, **kwargs: Any) -> Any:
        width = args[0] if args else kwargs.get("width")
        if isinstance(width, int):
            _check_size(width * (str(value).count("\n") + 1), f"a width of {width}")
        return filter_function(value, *args, **kwargs)

    return bounded


def bounded_format_filter(filter_function: Callable[..., Any]) -> Callable[..., Any]:
    """Jinja's ``format`` filter: its value is a ``%`` format."""

    def bounded(value: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(value, str):
            check_printf(value)
        return filter_function(value, *args, **kwargs)

    return bounded


def _check_widths(widths: tuple[str | None, ...], text: str) -> None:
    for width in widths:
        if width == "*":
            raise SecurityError(f"format {_shown(text)}: a '*' width is not allowed; write the width")
        if width and int(width) > MAX_SIZE:
            raise SecurityError(f"format {_shown(text)}: a width of {width} is over the limit of {MAX_SIZE:,}")


def _check_size(size: int, what: str) -> None:
    if size > MAX_SIZE:
        raise SecurityError(f"{what} would build a value of {size:,} characters or items (the limit is {MAX_SIZE:,})")


def _check_bits(bits: int, what: str) -> None:
    if bits > MAX_INT_BITS:
        raise SecurityError(f"{_cut(what)} would build a number over {MAX_INT_BITS:,} bits (about 3,000 digits)")


def _shown(value: object) -> str:
    return _cut(repr(value))


def _cut(text: str) -> str:
    return text if len(text) <= 40 else text[:39] + "…"
