"""Deterministic 64-bit hashes of Arrow arrays, vectorised with numpy (the card's
distinct counts, ``stats``): text by a polynomial hash over its UTF-8 bytes, numbers and
booleans by their value as a float64 (1 and 1.0 alike, as JSON says), a struct by its
fields' hashes, a list by its items' hashes and positions; a null anywhere is one
constant. Every hash goes through SplitMix64's finaliser. Arrow's buffers are read
directly: ``to_numpy`` would import pandas (tens of MB) on the way."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

_U64 = np.uint64
Hashes = np.ndarray[Any, np.dtype[np.uint64]]
_NULL = _U64(0x6E756C6C6E756C6C)  # the hash of a null inside a value
_GOLDEN = _U64(0x9E3779B97F4A7C15)
SHORT_BYTES = 48  # longer texts are hashed by BLAKE2b, one call each

_BASE = np.uint64(0x100000001B3)  # the polynomial hash's base (odd)


def mix(h: Hashes) -> Hashes:
    """SplitMix64's finaliser: every input bit reaches every output bit."""
    with np.errstate(over="ignore"):
        h = h ^ (h >> _U64(30))
        h = h * _U64(0xBF58476D1CE4E5B9)
        h = h ^ (h >> _U64(27))
        h = h * _U64(0x94D049BB133111EB)
        return h ^ (h >> _U64(31))


_powers: Hashes = np.ones(1, dtype=np.uint64)


def _powers_to(n: int) -> Hashes:
    """_BASE ** k (mod 2^64) for k < n, grown and kept as long strings come."""
    global _powers
    if len(_powers) < n:
        size = max(n, 2 * len(_powers))
        with np.errstate(over="ignore"):
            grown = np.empty(size, dtype=np.uint64)
            grown[0] = 1
            for k in range(1, size):  # a few thousand multiplications, once per process
                grown[k] = grown[k - 1] * _BASE
        _powers = grown
    return _powers


def text_hashes(offsets: np.ndarray[Any, Any], data: np.ndarray[Any, Any]) -> Hashes:
    """The hash of each string ``data[offsets[i]:offsets[i + 1]]`` (UTF-8 bytes). A short
    one (at most ``SHORT_BYTES``) by a polynomial hash over its bytes, all at once in numpy;
    a longer one by BLAKE2b, one call each (numpy's per-byte passes cost more there). The
    choice depends on the value alone, so equal values always hash alike."""
    offsets = offsets.astype(np.int64)
    starts, lengths = offsets[:-1], np.diff(offsets)
    sums = np.zeros(len(lengths), dtype=np.uint64)
    short = np.flatnonzero((lengths > 0) & (lengths <= SHORT_BYTES))
    if len(short):
        short_lengths = lengths[short]
        position = np.arange(int(short_lengths.sum()), dtype=np.int64)
        heads = np.cumsum(short_lengths) - short_lengths  # where each string starts in the gathered bytes
        position -= np.repeat(heads, short_lengths)
        gathered = data[np.repeat(starts[short], short_lengths) + position].astype(np.uint64)
        with np.errstate(over="ignore"):
            sums[short] = np.add.reduceat(gathered * _powers_to(SHORT_BYTES + 1)[position], heads)
    long = np.flatnonzero(lengths > SHORT_BYTES)
    if len(long):
        view = memoryview(data)  # type: ignore[arg-type]  # numpy arrays are buffers
        digests = b"".join(
            hashlib.blake2b(view[start:end], digest_size=8).digest()
            for start, end in zip(starts[long].tolist(), offsets[long + 1].tolist(), strict=True)
        )
        sums[long] = np.frombuffer(digests, dtype="<u8")
    with np.errstate(over="ignore"):
        return mix(sums ^ (lengths.astype(np.uint64) * _GOLDEN))


def _valid(array: Any) -> np.ndarray[Any, np.dtype[np.bool_]]:
    validity = array.buffers()[0]
    if validity is None or array.null_count == 0:
        return np.ones(len(array), dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return bits[array.offset : array.offset + len(array)].astype(bool)


def array_hashes(array: Any) -> Hashes | None:
    """One hash per value of ``array`` (nulls included, as ``_NULL``); None for a type
    this does not know (the caller hashes those cells one by one)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = array.type
    hashes: Hashes
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        width = np.int64 if pa.types.is_large_string(kind) else np.int32
        _, offsets, data = array.buffers()
        offsets_np = np.frombuffer(offsets, dtype=width)[array.offset : array.offset + len(array) + 1]
        data_np = np.frombuffer(data, dtype=np.uint8) if data is not None else np.zeros(0, dtype=np.uint8)
        hashes = text_hashes(offsets_np, data_np)
    elif pa.types.is_integer(kind) or pa.types.is_floating(kind) or pa.types.is_boolean(kind):
        numbers = pc.cast(array, pa.float64(), memory_pool=pa.system_memory_pool())
        bits = np.frombuffer(numbers.buffers()[1], dtype=np.uint64)[numbers.offset : numbers.offset + len(numbers)]
        hashes = mix(bits + _U64(1))
    elif pa.types.is_struct(kind):
        hashes = np.full(len(array), _U64(kind.num_fields), dtype=np.uint64)
        for index in range(kind.num_fields):
            child = array_hashes(array.field(index))  # the field as sliced with the struct
            if child is None:
                return None
            with np.errstate(over="ignore"):
                hashes = mix(hashes * _GOLDEN + child + _U64(index))
    elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
        width = np.int64 if pa.types.is_large_list(kind) else np.int32
        offsets = np.frombuffer(array.buffers()[1], dtype=width)[array.offset : array.offset + len(array) + 1]
        offsets = offsets.astype(np.int64)
        values = array_hashes(array.values.slice(int(offsets[0]), int(offsets[-1] - offsets[0])))
        if values is None:
            return None
        starts, lengths = offsets[:-1] - offsets[0], np.diff(offsets)
        position = (np.arange(len(values)) - np.repeat(starts, lengths)).astype(np.uint64)
        sums = np.zeros(len(array), dtype=np.uint64)
        present = lengths > 0
        with np.errstate(over="ignore"):
            if len(values):
                sums[present] = np.add.reduceat(mix(values + _GOLDEN * position), starts[present])
            hashes = mix(sums ^ (lengths.astype(np.uint64) * _GOLDEN))
    else:
        return None
    return np.where(_valid(array), hashes, _NULL)
