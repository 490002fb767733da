"""An embedding answer as genwire holds it: one float64 matrix (vectors x dimensions),
checked once in numpy, stored by the response cache as its bytes; and what ``embed()``
returns for it, ``Vectors``: the list of float lists the SPEC promises, which also carries
the matrix, so genwire's own gates do not convert it back.

Why: an answer of 64 vectors of 384 floats went through five Python passes over its
floats (decoded to lists, their types checked three times, summed, packed for the
cache, made a matrix again): 5 ms a request, a fifth of a keep-novel run's event loop.
numpy is imported by the callers that hold a matrix, never here at import time."""

from __future__ import annotations

import math
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

    Matrix = npt.NDArray[np.float64]


def is_matrix(answer: object) -> bool:
    """Whether ``answer`` is a numpy array (none can be before numpy was imported)."""
    numpy = sys.modules.get("numpy")
    return numpy is not None and type(answer) is numpy.ndarray


class Vectors(list[list[float]]):
    """A list of float lists (what ``embed()`` returns) that also holds them as one
    read-only float64 matrix, ``matrix``: the same numbers, checked finite."""

    __slots__ = ("matrix",)

    def __init__(self, matrix: Matrix, lists: list[list[float]] | None = None) -> None:
        super().__init__(matrix.tolist() if lists is None else lists)
        view = matrix.view()
        view.flags.writeable = False  # what a caller changes in the lists does not reach it
        self.matrix = view

    def __reduce__(self) -> tuple[Any, ...]:  # crosses to Ray workers as what it is, lists as they are
        return (Vectors, (self.matrix.copy(), list(self)))


def embedding_answer(answer: Any) -> list[list[float]]:
    """What ``embed()`` returns for a checked answer: ``Vectors`` for a matrix, else the lists."""
    return Vectors(answer) if is_matrix(answer) else answer


def matrix_problem(matrix: Any, count: int, dimensions: int | None) -> str | None:
    """What is wrong with an answer held as a matrix, or None (``vectors_problem``'s rules:
    ``count`` vectors, non-empty, ``dimensions`` long when set, finite)."""
    import numpy as np

    if matrix.ndim != 2 or matrix.shape[0] != count:
        return f"has {matrix.shape[0] if matrix.ndim else 0} vectors for {count} inputs"
    if matrix.dtype != np.float64:
        return "is not float64 numbers"
    length = int(matrix.shape[1])
    if not length:
        return "data[0].embedding is empty or not a list"
    if dimensions is not None and length != dimensions:
        return f"data[0].embedding has {length} dimensions, but dimensions is set to {dimensions}"
    finite = np.isfinite(matrix).all(axis=1)
    if not finite.all():
        position = int(np.argmin(finite))
        bad = next(x for x in matrix[position].tolist() if not math.isfinite(x))
        return f"data[{position}].embedding holds {bad!r} (NaN or infinity)"
    return None
