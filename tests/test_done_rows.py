"""``DoneRows``: which candidates a checkpoint holds, one bit each."""

from __future__ import annotations

import random

import pytest

from genwire.engine.records.checkpoint_files import DoneRows


def test_done_rows_answers_as_a_set_of_the_indices_added_and_not_discarded() -> None:
    rng = random.Random(5)
    done, expected = DoneRows(), set()
    for _ in range(5000):
        index = rng.randrange(3000)
        if rng.random() < 0.8:
            done.add(index)
            expected.add(index)
        else:
            done.discard(index)
            expected.discard(index)
    assert len(done) == len(expected)
    assert [i for i in range(3100) if i in done] == sorted(expected)
    for n in (0, 1, 7, 8, 9, 2999, 3000, 3001, 3100):
        assert list(done.missing(n)) == [i for i in range(n) if i not in expected]


def test_missing_reads_the_rows_done_while_it_is_read() -> None:
    done = DoneRows()
    for i in (0, 1, 2, 9):
        done.add(i)
    pending = done.missing(20)
    assert next(pending) == 3
    done.add(4)  # done before the reader reached it: not pending
    assert list(pending) == [5, 6, 7, 8, *range(10, 20)]


def test_no_row_index_is_negative() -> None:
    done = DoneRows.of([3, -1, 10])  # a damaged file's -1 is no row
    assert len(done) == 2 and -1 not in done and -5 not in done and 3 in done
    with pytest.raises(ValueError, match="never negative"):
        done.add(-2)
