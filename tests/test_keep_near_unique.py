"""keep-near-unique (issue 53): MinHash LSH over word shingles, in candidate order."""

from __future__ import annotations

import random
from typing import Any

import pytest

from genwire.errors import WiringError
from genwire.generators import Verdict
from genwire.generators.builtin.keep_near_unique import KeepNearUnique, KeepNearUniqueParams, bands_for, shingles
from genwire.generators.resources import Resources
from genwire.testing import assert_verdicts

WORDS = [f"word{i}" for i in range(3000)]


def texts(count: int, seed: int = 0) -> list[str]:
    """Texts of 40 words; every third repeats an earlier one with 0 to 3 words changed
    (Jaccard of 3-shingles 1, then about 0.86, 0.75, 0.65: on both sides of 0.8)."""
    rng = random.Random(seed)
    out: list[str] = []
    for i in range(count):
        if i % 3 == 2:
            words = out[rng.randrange(i)].split()
            for _ in range(rng.randint(0, 3)):
                words[rng.randrange(len(words))] = rng.choice(WORDS)
            out.append(" ".join(words))
        else:
            out.append(" ".join(rng.choice(WORDS) for _ in range(40)))
    return out


def exact_jaccard(a: str, b: str, size: int = 3) -> float:
    x, y = set(shingles(a, size)), set(shingles(b, size))
    return len(x & y) / len(x | y)


def gate(**params: Any) -> KeepNearUnique:
    return KeepNearUnique(
        column="near",
        params=KeepNearUniqueParams.model_validate({"column": "text", **params}),
        resources=Resources("keep-near-unique", "near", {}),
    )


async def verdicts(g: KeepNearUnique, all_texts: list[str], batch: int, start: int = 0) -> list[tuple[bool, str]]:
    out = []
    for first in range(start, len(all_texts), batch):
        indices = list(range(first, min(first + batch, len(all_texts))))
        for value in await g.generate_batch([{"text": all_texts[i]} for i in indices], indices):
            assert isinstance(value, Verdict), value
            out.append((value.keep, value.reason))
    return out


async def test_it_drops_a_text_that_repeats_a_kept_one_with_a_word_or_two_changed() -> None:
    base = "the quick brown fox jumps over the lazy dog near the quiet river bank at dawn"
    rows = [
        {"q": base},
        {"q": base.replace("lazy", "sleepy")},  # one word of 16 changed: 3 of its 14 shingles
        {"q": base.upper() + "!"},  # case and punctuation are not words
        {"q": "an entirely different sentence about tides and the moon and the sea"},
    ]
    assert exact_jaccard(rows[1]["q"], base) < 0.8
    await assert_verdicts(
        KeepNearUnique, rows, [True, True, "candidate 0", True], params={"column": "q", "threshold": 0.8}
    )
    await assert_verdicts(
        KeepNearUnique, rows, [True, "candidate 0", "candidate 0", True], params={"column": "q", "threshold": 0.6}
    )


async def test_verdicts_follow_the_exact_jaccard_and_do_not_depend_on_batching() -> None:
    all_texts = texts(600)
    whole = await verdicts(gate(), all_texts, 64)
    assert await verdicts(gate(), all_texts, 5) == whole
    # Against the exact Jaccard of each text with every text kept before it.
    kept: list[set[str]] = []
    agree = 0
    for text, (keep, _) in zip(all_texts, whole, strict=True):
        mine = set(shingles(text, 3))
        best = max((len(mine & k) / len(mine | k) for k in kept), default=0.0)
        clear = abs(best - 0.8) > 0.1  # far from the threshold, the estimate never errs
        if clear:
            assert keep == (best < 0.8), (text, best)
        agree += keep == (best < 0.8)
        if keep:
            kept.append(mine)
    assert agree >= 0.97 * len(all_texts)
    assert 50 < sum(not keep for keep, _ in whole) < 200


async def test_a_resumed_gate_that_remembers_the_earlier_rows_judges_as_an_uninterrupted_one() -> None:
    all_texts = texts(900, seed=2)
    whole = await verdicts(gate(threshold=0.7, shingle=2), all_texts, 32)
    resumed = gate(threshold=0.7, shingle=2)
    earlier = [i for i, (keep, _) in enumerate(whole[:500]) if keep]
    await resumed.remember([{"text": all_texts[i]} for i in earlier], earlier)
    assert await verdicts(resumed, all_texts, 32, start=500) == whole[500:]


def test_bands_make_a_pair_at_the_threshold_a_candidate() -> None:
    for threshold in (0.5, 0.8, 0.9, 0.95):
        rows = 128 // bands_for(threshold)
        assert 1 - (1 - threshold**rows) ** bands_for(threshold) >= 0.99


def test_bad_params_are_located_errors_at_load(tmp_path: Any) -> None:
    import yaml

    import genwire

    config = tmp_path / "genwire.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "pipeline": {
                    "num_records": 2,
                    "output": str(tmp_path / "out.jsonl"),
                    "columns": [
                        {"name": "t", "generator": "template", "params": {"template": "x"}},
                        {"name": "near", "generator": "keep-near-unique", "params": {"column": "t", "threshold": 1.5}},
                    ],
                }
            }
        )
    )
    with pytest.raises(WiringError) as caught:
        genwire.boot(config)
    assert "genwire.yaml:11:7 pipeline.columns[1] (near).params.threshold" in str(caught.value)
