"""The garbage collector while rows are generated (``engine.rows.collector``): the objects made
before the rows frozen, the youngest generation collected less often, all put back after."""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import genwire
from genwire.engine.rows.collector import YOUNG_THRESHOLD, collector_for_rows


@pytest.fixture(autouse=True)
def _collector_as_found() -> Iterator[None]:
    """Each test starts with nothing frozen (the suite freezes what it imported: conftest)
    and leaves the collector as it found it."""
    threshold, enabled, frozen = gc.get_threshold(), gc.isenabled(), gc.get_freeze_count()
    gc.unfreeze()
    yield
    gc.set_threshold(*threshold)
    gc.unfreeze()
    if frozen:
        gc.freeze()
    gc.enable() if enabled else gc.disable()


def test_inside_the_objects_made_before_are_frozen_and_young_collections_rarer() -> None:
    before = gc.get_threshold()
    long_lived = [object() for _ in range(10)]
    with collector_for_rows():
        assert gc.get_freeze_count() >= len(long_lived)
        assert gc.get_threshold() == (YOUNG_THRESHOLD, *before[1:])
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_runs_inside_one_another_put_it_back_once_the_outermost_ends() -> None:
    before = gc.get_threshold()
    with collector_for_rows():
        with collector_for_rows():
            pass
        assert gc.get_freeze_count() > 0 and gc.get_threshold()[0] == YOUNG_THRESHOLD
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


def test_runs_that_overlap_put_it_back_whichever_ends_first() -> None:
    """Two runs in one event loop: the first begins, the second begins, the first ends,
    then the second: what the first found is what is left."""
    before = gc.get_threshold()
    first, second = collector_for_rows(), collector_for_rows()
    first.__enter__()
    second.__enter__()
    first.__exit__(None, None, None)
    assert gc.get_threshold()[0] == YOUNG_THRESHOLD and gc.get_freeze_count() > 0  # the second still runs
    second.__exit__(None, None, None)
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_process_that_froze_objects_itself_keeps_its_freeze() -> None:
    mine: list[object] = []  # a container the collector tracks
    gc.freeze()
    with collector_for_rows():
        pass
    assert gc.get_freeze_count() > 0
    assert not any(o is mine for o in gc.get_objects())  # still frozen (frozen objects are not listed)


def test_a_disabled_collector_is_left_untouched() -> None:
    gc.disable()
    before = gc.get_threshold()
    with collector_for_rows():
        assert gc.get_freeze_count() == 0 and gc.get_threshold() == before
    assert not gc.isenabled()


def test_put_back_when_the_rows_raise() -> None:
    before = gc.get_threshold()
    with pytest.raises(RuntimeError), collector_for_rows():
        raise RuntimeError("a batch failed")
    assert gc.get_freeze_count() == 0 and gc.get_threshold() == before


SEEN = '''
from genwire.generators.base import Generator
from genwire.generators.metadata import GeneratorMetadata
from pydantic import BaseModel
import gc

SEEN = []

class Params(BaseModel):
    pass

class Seen(Generator[Params]):
    metadata = GeneratorMetadata(
        name="gc-seen", description="what the collector is while rows are made", required_resources={}
    )
    params_model = Params

    async def generate(self, rows):
        SEEN.append((gc.get_threshold()[0], gc.get_freeze_count()))
        return [1 for _ in rows]
'''


async def test_a_run_generates_its_rows_under_that_collector_and_puts_it_back(
    install_plugin: Callable[..., Path], write_config: Callable[[str], Path], tmp_path: Path
) -> None:
    install_plugin("gc-seen", "gc_seen", SEEN, {"gc-seen": "gc_seen:Seen"})
    before = gc.get_threshold()
    config = write_config(
        f"pipeline: {{num_records: 3, output: {tmp_path / 'out.jsonl'}, columns: [{{name: s, generator: gc-seen}}]}}"
    )
    async with genwire.boot(config) as container:
        result = await container.run(resume=False)
    assert result.rows_written == 3
    import gc_seen  # type: ignore[import-not-found]

    assert gc_seen.SEEN and all(t == YOUNG_THRESHOLD and frozen > 0 for t, frozen in gc_seen.SEEN), gc_seen.SEEN
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
