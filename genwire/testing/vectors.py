"""The fakes' embedding: one deterministic vector per text, used by FakeEmbeddingModel
and by the fake server alike, so tests may mix them and compare vectors."""

from __future__ import annotations

import hashlib

import numpy as np
import numpy.typing as npt

WIRE_DECIMALS = 6  # the fake server sends 6 decimals: half the JSON, and the GIL is shared


def hash_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for ``text``: equal texts give equal vectors."""
    values: list[float] = hash_row(text, dimensions).tolist()
    return values


def hash_row(text: str, dimensions: int) -> npt.NDArray[np.float64]:
    """``hash_vector`` as a float64 array."""
    # SHAKE-256 gives as many hash bytes as needed, far cheaper than seeding an RNG.
    raw = hashlib.shake_256(text.encode()).digest(2 * dimensions)
    vector = np.frombuffer(raw, dtype="<i2").astype(np.float64) + 0.5  # +0.5: never all 0
    vector /= float(np.linalg.norm(vector))
    return vector


def fake_row(text: str, dimensions: int) -> npt.NDArray[np.float64]:
    """``hash_vector`` as the fake server sends it: rounded to ``WIRE_DECIMALS``."""
    return np.round(hash_row(text, dimensions), WIRE_DECIMALS)


def fake_vector(text: str, dimensions: int) -> list[float]:
    """``fake_row`` as a list."""
    rounded: list[float] = fake_row(text, dimensions).tolist()
    return rounded


def near_duplicates(
    count: int, dimensions: int = 384, *, share: float = 0.2, clusters: int = 1000, seed: int = 0
) -> np.ndarray:
    """``count`` unit float32 vectors in the shape a dedup gate meets: topics (``clusters``
    of related rows), and a ``share`` of rows that rephrase an earlier row, at cosines
    spread from 0.85 to 0.99 around a 0.92 threshold (the imperfect cases: just above,
    just below). Deterministic in ``seed``; rows are made in chunks to bound memory."""
    rng = np.random.default_rng(seed)
    centers = rng.standard_normal((clusters, dimensions)).astype(np.float32)
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    out = np.empty((count, dimensions), dtype=np.float32)
    for start in range(0, count, 65_536):
        n = min(65_536, count - start)
        rows = centers[rng.integers(0, clusters, n)] + rng.standard_normal((n, dimensions), dtype=np.float32) * 0.06
        out[start : start + n] = rows / np.linalg.norm(rows, axis=1, keepdims=True)
        again = np.flatnonzero(rng.random(n) < share) + start
        again = again[again > 0]
        if len(again):
            sources = out[(rng.random(len(again)) * again).astype(np.int64)]  # an earlier row each
            # cosine c to the source: noise of norm tan(acos c), orthogonal-ish in high dimensions
            cosine = rng.uniform(0.85, 0.99, len(again)).astype(np.float32)
            noise = rng.standard_normal((len(again), dimensions), dtype=np.float32)
            noise /= np.linalg.norm(noise, axis=1, keepdims=True)
            moved = sources + noise * np.sqrt(1 / cosine**2 - 1)[:, None]
            out[again] = moved / np.linalg.norm(moved, axis=1, keepdims=True)
    return out
