"""Floats as base64 of their little-endian bytes: OpenAI's ``encoding_format: base64``
embeddings (float32, ``"f"``) and the response cache's stored vectors (float64, ``"d"``).
Standard library only (``array``, ``binascii``): decoded and encoded in C."""

from __future__ import annotations

import array
import binascii
import sys
from collections.abc import Iterable


def packed(values: Iterable[float], code: str) -> str:
    """``values`` as the base64 of their little-endian ``code`` (``"f"``, ``"d"``) bytes."""
    numbers = array.array(code, values)
    if sys.byteorder == "big":
        numbers.byteswap()
    return binascii.b2a_base64(numbers.tobytes(), newline=False).decode()


def unpacked_bytes(text: str, itemsize: int) -> bytes | None:
    """The bytes of strict base64 ``text`` when they are a whole number of ``itemsize``
    items (little-endian floats for ``numpy.frombuffer``), else None."""
    try:
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError):
        return None
    return None if len(raw) % itemsize else raw


def unpacked(text: str, code: str) -> list[float] | None:
    """The floats ``packed`` wrote, or None for text that is not strict base64 of a whole
    number of them (an empty text is no floats)."""
    numbers: array.array[float] = array.array(code)  # "f" or "d": floats
    raw = unpacked_bytes(text, numbers.itemsize)
    if raw is None:
        return None
    numbers.frombytes(raw)
    if sys.byteorder == "big":
        numbers.byteswap()
    return numbers.tolist()
