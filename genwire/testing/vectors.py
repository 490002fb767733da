"""The fakes' embedding: one deterministic vector per text, used by FakeEmbeddingModel
and by the fake server alike, so tests may mix them and compare vectors."""

from __future__ import annotations

import hashlib

import numpy as np

WIRE_DECIMALS = 6  # the fake server sends 6 decimals: half the JSON, and the GIL is shared


def hash_vector(text: str, dimensions: int) -> list[float]:
    """A deterministic unit vector for ``text``: equal texts give equal vectors."""
    # SHAKE-256 gives as many hash bytes as needed, far cheaper than seeding an RNG.
    raw = hashlib.shake_256(text.encode()).digest(2 * dimensions)
    vector = np.frombuffer(raw, dtype="<i2").astype(np.float64) + 0.5  # +0.5: never all 0
    vector /= float(np.linalg.norm(vector))
    values: list[float] = vector.tolist()
    return values


def fake_vector(text: str, dimensions: int) -> list[float]:
    """``hash_vector`` as the fake server sends it: rounded to ``WIRE_DECIMALS``."""
    rounded: list[float] = np.round(hash_vector(text, dimensions), WIRE_DECIMALS).tolist()
    return rounded
