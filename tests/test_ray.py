"""The Ray engine on a local two-CPU Ray instance, against the fake server over real HTTP.

The test plugins below are defined in this module; Ray workers import them by reference,
so the fixture puts this directory on the workers' PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from support import wait_gone

import genwire
from genwire.generators import Generator, GeneratorMetadata, ResourceKind
from genwire.testing import FakeChatModel, FakeOpenAIServer

HERE = Path(__file__).resolve().parent
WORKERS = 2  # per run, on the two-CPU test cluster


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[Any]:
    import ray  # a test dependency: the Ray engine is tested for real, never skipped

    # The test generators are imported by the workers from this directory: on their path
    # through the environment the local Ray inherits (as a plugin installed on every node),
    # not a job runtime_env, whose agent adds 0.7-1 s to every worker's start.
    # Started as genwire starts its own (engine.cluster.instance): at the end no process of it is left.
    from genwire.engine.cluster.instance import end_ray, ensure_ray, started_instance

    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(HERE), before) if p)
    try:
        ensure_ray(ray, None, num_cpus=2)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    instance = started_instance()
    assert instance is not None
    try:
        yield ray
    finally:
        pids = instance.pids()
        assert len(pids) >= 3, pids  # the GCS, the raylet, its agents, the workers
        end_ray(ray)
        left = [pid for pid in pids if not wait_gone(pid, timeout=60)]
        assert left == [], f"processes of the Ray instance outlived it: {left}"


@pytest.fixture
def ray_workers(ray_cluster: Any) -> Iterator[Any]:
    """The cluster (runs ask for WORKERS workers); after the test, every actor of the run
    must be gone."""
    yield ray_cluster
    deadline = time.monotonic() + 10
    while ray_cluster.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)  # ray.kill is asynchronous
    assert ray_cluster.available_resources().get("CPU", 0) == 2, "a worker actor outlived its run"


# --- test plugins (imported by the Ray workers) -----------------------------------------


class DieOnceParams(BaseModel):
    marker_dir: str
    at: list[int]  # row indices whose batch kills its worker process, once each


class DieOnce(Generator[DieOnceParams]):
    """Kills the worker process the first time it meets one of ``at`` (a marker file per
    index remembers it across processes); otherwise returns the row's index."""

    metadata = GeneratorMetadata(name="die-once", description="crash test", required_resources={})
    params_model = DieOnceParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        for index in indices:
            if index in self.params.at:
                marker = Path(self.params.marker_dir) / f"died-at-{index}"
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    continue
                os.close(fd)
                await asyncio.sleep(0.3)  # let the block's other batches finish first
                os._exit(1)
        return list(indices)


class DieFromParams(BaseModel):
    marker_dir: str
    at_or_after: int  # the first batch with a row index this high kills its worker, once in the run


class DieFrom(Generator[DieFromParams]):
    """Kills the worker process the first time it meets a row at or after ``at_or_after``
    (one marker file for the run); otherwise returns the row's index."""

    metadata = GeneratorMetadata(name="die-from", description="crash test", required_resources={})
    params_model = DieFromParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        if any(index >= self.params.at_or_after for index in indices):
            try:
                fd = os.open(Path(self.params.marker_dir) / "died", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                return list(indices)
            os.close(fd)
            await asyncio.sleep(0.3)  # let the block's other batches reach the keeper first
            os._exit(1)
        return list(indices)


class KeeperDiesParams(BaseModel):
    marker_dir: str
    at_or_after: int


class KeeperDies(Generator[KeeperDiesParams]):
    """An in-order gate keeping every row that kills its process (on Ray, the gates'
    keeper) the first time it judges a row at or after ``at_or_after``."""

    metadata = GeneratorMetadata(name="keeper-dies", description="crash test", required_resources={}, gate=True)
    params_model = KeeperDiesParams
    in_order = True

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        if any(index >= self.params.at_or_after for index in indices):
            with contextlib.suppress(FileExistsError):
                os.close(os.open(Path(self.params.marker_dir) / "keeper-died", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
                os._exit(1)
        return [True for _ in rows]


class Pid(Generator[Any]):
    metadata = GeneratorMetadata(name="pid", description="the worker's process id", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [os.getpid() for _ in rows]


class Crash(Generator[Any]):
    metadata = GeneratorMetadata(name="crash", description="x", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        if any(i >= 20 for i in indices):
            raise ZeroDivisionError("oops")
        return [0 for _ in rows]


class Snoop(Generator[Any]):
    metadata = GeneratorMetadata(name="snoop", description="x", required_resources={"model": ResourceKind.CHAT_MODEL})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        slot = "embedder"  # a name known at run time only: the static check warns, the runtime guard stops it
        return [await self.resources[slot].embed([str(r)]) for r in rows]


class KillMeParams(BaseModel):
    marker_dir: str
    at: int  # the row whose batch holds its worker process until the test kills it


class KillMe(Generator[KillMeParams]):
    """The first worker process to meet row ``at`` writes its PID to ``worker-pid`` and
    waits there for the test to kill it by that PID; returns the row's index."""

    metadata = GeneratorMetadata(name="kill-me", description="kill test", required_resources={})
    params_model = KillMeParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        if self.params.at in indices:
            with contextlib.suppress(FileExistsError):
                fd = os.open(Path(self.params.marker_dir) / "worker-pid", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                os.write(fd, str(os.getpid()).encode())
                os.close(fd)
                await asyncio.sleep(600)  # killed meanwhile
        return list(indices)


class Known(Generator[Any]):
    """What the worker process making the row knows of its run: its PID, how many other
    workers it tells its brakes and endpoints out, and its pools' endpoints out ("local"
    off Ray)."""

    metadata = GeneratorMetadata(name="known", description="the worker's roster", required_resources={})

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        from genwire.engine.cluster.worker import BlockWorker

        # The actor's instance (Ray's class objects for it are BlockWorker subclasses too),
        # made before the worker froze what it had for the rows (engine.rows.collector): the
        # collector lists frozen objects only once they are back in its generations.
        frozen = gc.get_freeze_count()
        gc.unfreeze()
        workers = (o for o in gc.get_objects() if isinstance(o, BlockWorker) and "_container" in vars(o))
        worker = next(workers, None)
        if frozen:
            gc.freeze()
        if worker is None or worker._container is None:
            return ["local" for _ in rows]
        known = {"pid": os.getpid(), "peers": len(worker._peers), "out": worker._container.endpoint_verdicts()}
        return [known for _ in rows]


class TagParams(BaseModel):
    marker_dir: str
    skip: int  # rows of the first worker process to claim the marker before the "SLOW" ones
    tagged: int  # how many "SLOW" rows


class Tag(Generator[TagParams]):
    """``SLOW row I`` for ``tagged`` rows, after the first ``skip``, of the worker process that
    first claims the marker file (their requests are answered 429 by the test's server);
    ``fine mine row I`` for its other rows, ``fine other row I`` for the other workers'."""

    metadata = GeneratorMetadata(name="tag", description="marks one worker's first rows", required_resources={})
    params_model = TagParams
    seen = 0

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return await self.generate_batch(rows, range(len(rows)))

    async def generate_batch(self, rows: list[dict[str, Any]], indices: Sequence[int]) -> list[Any]:
        marker = Path(self.params.marker_dir) / "slow-worker"
        with contextlib.suppress(FileExistsError):  # the first process to ask claims it
            fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            os.write(fd, str(os.getpid()).encode())
            os.close(fd)
        mine = marker.read_text() == str(os.getpid())
        out = []
        for index in indices:
            slow = mine and self.params.skip <= Tag.seen < self.params.skip + self.params.tagged
            Tag.seen += mine
            out.append(f"{'SLOW' if slow else 'fine'} {'mine' if mine else 'other'} row {index}")
        return out


class ToolPid(Generator[Any]):
    """The process id of the tool server that answers (its ``pid`` tool), and the names of
    the variables it sees (``env_names``)."""

    metadata = GeneratorMetadata(
        name="tool-pid", description="which server answered", required_resources={"web": ResourceKind.TOOLS}
    )

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        web = self.resources.web
        return [{"pid": (await web.call("pid", {})).text, "env": (await web.call("env_names", {})).text} for _ in rows]


# --- helpers ---------------------------------------------------------------------------


def pipeline(
    server: FakeOpenAIServer, root: Path, *, n: int, max_concurrency: int = 8, batch_size: int = 8
) -> dict[str, Any]:
    """Seeded pipeline: sampler, seed-dataset over documents and over jsonl (both shuffled),
    and llm-text reading them."""
    docs = root / "docs"
    docs.mkdir(exist_ok=True)
    (docs / "a.md").write_text("Cats purr when content.\n\nCats hunt mice at night.\n\nCats sleep all day.")
    (docs / "b.txt").write_text("The Nile flows north.\n\nBakers knead the dough.\n\nCargo builds Rust code.")
    people = root / "people.jsonl"
    people.write_text("".join(json.dumps({"name": f"p{i}", "age": 20 + i}) + "\n" for i in range(7)))
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "max_concurrency": max_concurrency}},
        "models": {"writer": {"provider": "srv", "model": "writer", "kind": "chat"}},
        "datasets": {
            "corpus": {"kind": "documents", "path": str(docs), "chunk_chars": 50},
            "people": {"kind": "jsonl", "path": str(people)},
        },
        "pipeline": {
            "num_records": n,
            "seed": 11,
            "output": str(root / "out.jsonl"),
            "batch_size": batch_size,
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {"name": "style", "generator": "sampler", "params": {"kind": "category", "values": ["a", "b", "c"]}},
                {"name": "passage", "generator": "seed-dataset", "resources": {"dataset": "corpus"}},
                {
                    "name": "person",
                    "generator": "seed-dataset",
                    "resources": {"dataset": "people"},
                    "params": {"shuffle": True},
                },
                {
                    "name": "question",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "{{ style }} {{ person.name }}: {{ passage.text }}"},
                },
            ],
        },
    }


def with_column(cfg: dict[str, Any], column: dict[str, Any]) -> dict[str, Any]:
    cfg["pipeline"]["columns"].append(column)
    return cfg


async def run(cfg: dict[str, Any], engine: str, generators: tuple[type[Generator[Any]], ...] = (), **kw: Any) -> Any:
    container = genwire.boot(cfg, generators=generators)
    async with container:
        return await container.run(engine=engine, **({"ray_workers": WORKERS} if engine == "ray" else {}), **kw)


def read_rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def cancel_ray_run_after(container: Any, server: FakeOpenAIServer, requests: int, **kw: Any) -> None:
    """A Ray run of ``container`` (no pre-flight), cancelled once ``server`` saw ``requests`` of the writer."""
    task = asyncio.create_task(container.run(engine="ray", ray_workers=WORKERS, skip_preflight=True, **kw))
    deadline = time.monotonic() + 60
    while server.requests["writer"] < requests and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


# --- tests ------------------------------------------------------------------------------


async def test_same_rows_as_the_local_engine(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, n=100)
    local = await run(cfg, "local", output=tmp_path / "local.jsonl")
    on_ray = await run(cfg, "ray", output=tmp_path / "ray.jsonl")
    assert local.rows_written == on_ray.rows_written == 100 and on_ray.rows_failed == 0
    # Global row indices seed every generator: byte-identical output whichever worker ran a row.
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert len({r["uid"] for r in read_rows(tmp_path / "ray.jsonl")}) == 100
    assert fake_openai_server.requests["writer"] == 2 * (100 + 1)  # each run: every row once, plus its probe
    assert on_ray.requests == local.requests == {"writer": 101}  # workers' requests are counted too


async def test_ray_workers_share_the_response_cache(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.vary_answers()  # a new answer per request: a cached one is recognisable
    cfg = pipeline(fake_openai_server, tmp_path, n=40)
    cfg["cache"] = {"dir": str(tmp_path / "cache")}
    on_ray = await run(cfg, "ray", output=tmp_path / "ray.jsonl")  # the workers pay and store
    assert on_ray.requests == {"writer": 41} and on_ray.usage["writer"].cached == 0
    fake_openai_server.reset_stats()
    local = await run(cfg, "local", output=tmp_path / "local.jsonl")
    assert fake_openai_server.requests["writer"] == 1  # the probe: every answer was the workers'
    assert local.usage["writer"].cached == 40
    assert (tmp_path / "local.jsonl").read_bytes() == (tmp_path / "ray.jsonl").read_bytes()
    fake_openai_server.reset_stats()
    again = await run(cfg, "ray", output=tmp_path / "again.jsonl")
    assert fake_openai_server.requests["writer"] == 1 and again.usage["writer"].cached == 40
    assert (tmp_path / "again.jsonl").read_bytes() == (tmp_path / "ray.jsonl").read_bytes()
    # The driver counted the workers' hits as its own (the workers write nothing).
    assert cache_table(tmp_path / "cache", "SELECT value FROM meta WHERE name = 'hits'") == [(80,)]


def cache_table(directory: Path, sql: str) -> list[tuple[Any, ...]]:
    import sqlite3

    conn = sqlite3.connect(directory / "responses.sqlite3")
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


async def drained_block(worker: Any, rows: list[int], batch_size: int) -> tuple[Any, list[Any], tuple[str, int]]:
    """``worker.run_block`` with the driver's drains beside it, each said stored by the next
    (as ``engine.cluster.drain`` does): the block's result, every answer drained, and what
    the last drain (taken after the block ended) covered."""
    return await drained_block_rest(worker, asyncio.create_task(worker.run_block(rows, batch_size)), None)


async def test_a_ray_workers_answer_holds_its_slot_until_the_driver_stored_it(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Issue 49 item 7: a worker's answer keeps its concurrency slot until a drain that
    carried it is said stored (the driver's next drain call), so what is paid and not on
    the driver's disk never passes the worker's share of the cap, however late the driver
    is (or if it died): here 2 slots, nothing said stored, and the server sees 2 requests,
    not the block's 8; each drain said stored lets as many more go."""
    from genwire.engine.cluster.wire import WorkerSpec
    from genwire.engine.cluster.worker import BlockWorker
    from genwire.providers.response_cache import ResponseCache

    cap = 2
    cfg = pipeline(fake_openai_server, tmp_path, n=8, max_concurrency=cap)
    at = tmp_path / "cache"
    ResponseCache(at).prepare()
    container = genwire.boot(cfg)
    spec = WorkerSpec(container.loaded, {c.generator_name: c.generator_cls for c in container.columns}, at)
    worker = BlockWorker(spec)
    block = asyncio.create_task(worker.run_block(list(range(8)), 4))
    try:
        await held_answers(worker, cap)  # both answers came, and hold their slots
        assert fake_openai_server.requests["writer"] == cap
        first = await worker.drain(0.0)  # taken, not yet stored: the slots stay held
        assert len(first.answers) == cap and fake_openai_server.requests["writer"] == cap
        assert not block.done()
        second = await worker.drain(0.0, (first.through[0], first.number))  # said stored: two more go
        await held_answers(worker, cap)
        assert fake_openai_server.requests["writer"] == 2 * cap
        out, answers, _ = await drained_block_rest(worker, block, (second.through[0], second.number))
        assert fake_openai_server.requests["writer"] == 8 and len(first.answers + second.answers + answers) == 8
        assert sorted(i for result in out[1] for i in result.indices) == list(range(8))
    finally:
        block.cancel()
        await asyncio.gather(block, return_exceptions=True)
        await worker.close()
        await container.aclose()


async def held_answers(worker: Any, count: int) -> None:
    """Until ``count`` answers of ``worker`` hold their slots (generous timeout)."""
    deadline = time.monotonic() + 60
    while worker._holds.held < count and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    assert worker._holds.held == count


async def drained_block_rest(
    worker: Any, block: asyncio.Task[Any], stored: tuple[str, int] | None
) -> tuple[Any, list[Any], tuple[str, int]]:
    """The rest of ``drained_block`` for a block already running."""
    answers: list[Any] = []
    while True:
        ended = block.done()
        drained = await worker.drain(0.05, stored)
        answers += drained.answers
        stored = (drained.through[0], drained.number)
        if ended:
            out = block.result()
            assert isinstance(out, tuple), out
            return out, answers, drained.through


async def test_a_worker_only_reads_the_cache_and_the_driver_stores_its_answers(
    fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The driver is the cache's one writer: a worker (here in-process, as Ray runs it in
    its actor) sends the answers it paid for back as they settle (its drains) and writes
    nothing, not even its hit count; the driver stores them."""
    from genwire.engine.cluster.fleet import store_worker_answers
    from genwire.engine.cluster.wire import WorkerSpec
    from genwire.engine.cluster.worker import BlockWorker
    from genwire.providers.response_cache import ResponseCache

    cfg = pipeline(fake_openai_server, tmp_path, n=16)
    at = tmp_path / "cache"
    driver = ResponseCache(at)
    driver.prepare()  # as RayBatches does before starting its workers
    container = genwire.boot(cfg)
    spec = WorkerSpec(container.loaded, {c.generator_name: c.generator_cls for c in container.columns}, at)

    async def block(rows: list[int]) -> tuple[list[Any], list[Any]]:
        worker = BlockWorker(spec)
        try:
            out, answers, through = await drained_block(worker, rows, 8)
        finally:
            await worker.close()
        assert through == out[0]  # the last drain was taken once the block had ended
        return out[1], answers

    paid, answers = await block(list(range(16)))
    assert fake_openai_server.requests["writer"] == 16
    assert sorted(e.row for e in answers) == list(range(16))  # every answer comes back
    assert all(not r.answers for r in paid)  # by the drain, not with the rows
    assert cache_table(at, "SELECT COUNT(*) FROM answers") == [(0,)]  # and the worker stored none
    driver.put_many(answers)
    assert cache_table(at, "SELECT COUNT(*) FROM answers") == [(16,)]

    hit, answers = await block(list(range(16)))
    assert fake_openai_server.requests["writer"] == 16 and sum(r.cached for r in hit) == 16
    assert answers == []
    assert cache_table(at, "SELECT * FROM meta") == []  # no hit count written by the worker either
    await store_worker_answers(driver, hit)
    driver.close()  # the driver records the workers' hits
    assert cache_table(at, "SELECT name, value FROM meta") == [("hits", 16)]
    await container.aclose()


async def test_a_stopped_ray_run_resumes_on_ray_with_the_same_rows(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from genwire.errors import RunStopped

    cfg = pipeline(fake_openai_server, tmp_path, n=100)
    await run(cfg, "local", output=tmp_path / "local.jsonl")
    fake_openai_server.fail_when("writer", "c p", 400)  # style "c": a third of the rows fail
    with pytest.raises(RunStopped) as caught:
        await run(cfg, "ray")
    kept = caught.value.kept
    assert kept > 0
    # The stopped run's workers are killed asynchronously: let their last requests land
    # before counting what the resumed run sends.
    deadline = time.monotonic() + 10
    while (ray_workers.available_resources().get("CPU", 0) < 2 or fake_openai_server.in_flight) and (
        time.monotonic() < deadline
    ):
        await asyncio.sleep(0.05)
    fake_openai_server.clear()
    fake_openai_server.reset_stats()
    resumed = await run(cfg, "ray")
    assert resumed.rows_resumed == kept and resumed.rows_written == 100
    # The driver wrote the checkpoint; the workers were sent only the rows it lacked.
    assert fake_openai_server.requests["writer"] == 1 + 100 - kept
    assert resumed.requests == {"writer": 1 + 100 - kept}
    assert (tmp_path / "out.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


async def test_dead_worker_is_restarted_and_its_block_rerun(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    n = 96  # batches of 8, blocks of 3 batches: 20 and 70 die in the 3rd batch of blocks 0 and 2
    cfg = with_column(
        pipeline(fake_openai_server, tmp_path, n=n),
        {"name": "tag", "generator": "die-once", "params": {"marker_dir": str(tmp_path), "at": [20, 70]}},
    )
    result = await run(cfg, "ray", (DieOnce,), output=tmp_path / "ray.jsonl", skip_preflight=True)
    assert sorted(p.name for p in tmp_path.glob("died-at-*")) == ["died-at-20", "died-at-70"]  # both died
    rows = read_rows(tmp_path / "ray.jsonl")
    assert result.rows_written == n and result.rows_failed == 0
    assert [r["tag"] for r in rows] == list(range(n))  # every row exactly once, in order
    assert len({r["uid"] for r in rows}) == n
    # And the rows are the local engine's (the markers exist now, so nothing dies in-process).
    await run(cfg, "local", (DieOnce,), output=tmp_path / "local.jsonl", skip_preflight=True)
    assert rows == read_rows(tmp_path / "local.jsonl")


@pytest.mark.parametrize(("max_concurrency", "workers"), [(4, 2), (5, 2), (1, 1)])
async def test_max_concurrency_holds_across_the_cluster(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path, max_concurrency: int, workers: int
) -> None:
    fake_openai_server.set_latency("writer", 0.05 if max_concurrency > 1 else 0.01)
    cfg = with_column(
        pipeline(fake_openai_server, tmp_path, n=200, max_concurrency=max_concurrency, batch_size=25),
        {"name": "pid", "generator": "pid"},
    )
    result = await run(cfg, "ray", (Pid,), skip_preflight=True)
    assert result.rows_written == 200
    # Each worker holds its share of the slots (2+2, 3+2; a cap of 1 allows one worker).
    assert len({r["pid"] for r in read_rows(tmp_path / "out.jsonl")}) == workers
    # Never more in flight than the cap, cluster-wide. (That every slot fills at once is
    # a race a loaded machine can lose: the split is shown by the worker count above.)
    assert 1 <= fake_openai_server.peak_in_flight <= max_concurrency


@pytest.mark.parametrize(
    ("cls", "column", "error"),
    [
        (Crash, {"name": "boom", "generator": "crash"}, genwire.PluginError),
        (
            Snoop,
            {"name": "snoop", "generator": "snoop", "resources": {"model": "writer"}},
            genwire.UndeclaredResourceError,
        ),
    ],
)
async def test_plugin_errors_surface_as_the_same_genwire_error(
    ray_workers: Any,
    fake_openai_server: FakeOpenAIServer,
    tmp_path: Path,
    cls: type[Generator[Any]],
    column: dict[str, Any],
    error: type[Exception],
) -> None:
    cfg = with_column(pipeline(fake_openai_server, tmp_path, n=40), column)
    with pytest.raises(error) as local:
        await run(cfg, "local", (cls,), skip_preflight=True)
    with pytest.raises(error) as on_ray:
        await run(cfg, "ray", (cls,), skip_preflight=True)
    assert type(on_ray.value) is type(local.value)
    assert str(on_ray.value) == str(local.value)
    assert vars(on_ray.value).get("problems") == vars(local.value).get("problems")
    assert any("raised on a Ray worker" in note for note in getattr(on_ray.value, "__notes__", []))
    assert not (tmp_path / "out.jsonl").exists()


async def test_cancelled_run_closes_its_workers(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    fake_openai_server.set_latency("writer", 0.05)
    container = genwire.boot(pipeline(fake_openai_server, tmp_path, n=2000, max_concurrency=4))
    async with container:
        await cancel_ray_run_after(container, fake_openai_server, 20)
    assert not (tmp_path / "out.jsonl").exists()
    # (the ray_workers fixture then checks that both actors were killed)


async def test_plugin_missing_on_the_workers_is_named(
    ray_workers: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "driver-only"
    site.mkdir()
    (site / "driver_only_plugin.py").write_text(
        "from typing import Any\n"
        "from genwire.generators import Generator, GeneratorMetadata\n"
        "class Local(Generator[Any]):\n"
        "    metadata = GeneratorMetadata(name='driver-only', description='x', required_resources={})\n"
        "    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:\n"
        "        return [1 for _ in rows]\n"
    )
    monkeypatch.syspath_prepend(str(site))  # the driver's path only, not the workers'
    from driver_only_plugin import Local  # type: ignore[import-not-found]

    cfg = {
        "pipeline": {
            "num_records": 4,
            "output": str(tmp_path / "o.jsonl"),
            "columns": [{"name": "x", "generator": "driver-only"}],
        }
    }
    try:  # (in sys.modules during the run: that is what makes Local travel by reference)
        with pytest.raises(
            genwire.RunError, match=r"could not start \(ModuleNotFoundError: No module named 'driver_only_plugin'\)"
        ):
            await run(cfg, "ray", (Local,), skip_preflight=True)
    finally:
        sys.modules.pop("driver_only_plugin", None)


async def test_overrides_are_refused(ray_cluster: Any, tmp_path: Path) -> None:
    with FakeOpenAIServer() as server:
        container = genwire.boot(pipeline(server, tmp_path, n=4))
        async with container:
            with (
                container.override("writer", FakeChatModel()),
                pytest.raises(genwire.RunError, match=r"cannot carry container overrides.*writer"),
            ):
                await container.run(engine="ray", ray_workers=WORKERS, skip_preflight=True)


async def test_without_ray_installed(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    cfg = {
        "pipeline": {
            "num_records": 4,
            "output": str(tmp_path / "o.jsonl"),
            "columns": [{"name": "x", "generator": "sampler", "params": {"kind": "uuid"}}],
        }
    }
    with pytest.raises(genwire.RunError, match=r"pip install 'genwire\[ray\]'"):
        await run(cfg, "ray")
    assert not (tmp_path / "o.jsonl").exists()


def test_cli_joins_a_cluster_by_address(ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path) -> None:
    cfg = pipeline(fake_openai_server, tmp_path, n=30)
    path = tmp_path / "genwire.yaml"
    path.write_text(json.dumps(cfg))  # JSON is YAML
    address = ray_workers.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    command = [sys.executable, "-m", "genwire.cli.main", "run", str(path)]
    proc = subprocess.run(
        [*command, "--engine", "ray", "--address", address, "--workers", str(WORKERS)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert len(read_rows(tmp_path / "out.jsonl")) == 30


# --- the run's accounting: the driver feeds what the workers paid for (SPEC §22) ---------------


def pool_pipeline(urls: list[str], root: Path, *, n: int) -> dict[str, Any]:
    """``writer`` served by a pool of the replicas at ``urls``."""
    root.mkdir(parents=True, exist_ok=True)
    names = [f"r{i}" for i in range(len(urls))]
    return {
        "providers": {
            name: {"kind": "openai", "base_url": url, "max_concurrency": 4}
            for name, url in zip(names, urls, strict=True)
        },
        "models": {"writer": {"kind": "chat", "model": "writer", "endpoints": [{"provider": n} for n in names]}},
        "pipeline": {
            "num_records": n,
            "batch_size": 4,
            "max_failure_rate": 0.0,
            "output": str(root / "out.jsonl"),
            "columns": [
                {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
                {
                    "name": "text",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Sentence {{ uid }}"},
                },
            ],
        },
    }


async def test_a_pool_on_ray_reports_every_workers_requests_per_endpoint(ray_workers: Any, tmp_path: Path) -> None:
    with FakeOpenAIServer() as first, FakeOpenAIServer() as second:
        replicas = [first, second]
        result = await run(pool_pipeline([s.url for s in replicas], tmp_path, n=40), "ray")
        served = [s.requests.get("writer", 0) for s in replicas]
    assert result.rows_written == 40 and result.rows_failed == 0
    endpoints = result.summary()["models"]["writer"]["endpoints"]  # what --json prints
    # Each endpoint's count is what its replica served (less the driver's probe, outside the pool).
    assert [endpoints[f"r{i}"]["requests"] for i in range(2)] == [count - 1 for count in served]
    assert sum(e["requests"] for e in endpoints.values()) == 40  # every row once, whichever worker sent it
    assert all(e["failures"] == 0 and e["latency_p50_s"] is not None for e in endpoints.values())


async def test_a_ray_run_reports_the_same_per_model_figures_as_a_local_run(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """The metrics (sent, answered, latencies), the ledger and the cost of a Ray run are
    those of a local run of the same work: the workers' receipts reach the driver."""
    from genwire.engine.records.checkpoint import checkpoint_dir
    from genwire.engine.records.ledger import LEDGER_NAME, read_totals
    from genwire.engine.report.data import collect

    cfg = pipeline(fake_openai_server, tmp_path, n=40)
    cfg["models"]["writer"]["price"] = {"input_per_mtok": 1.0, "output_per_mtok": 2.0}
    figures = {}
    for engine in ("local", "ray"):
        out = tmp_path / f"{engine}.jsonl"
        result = await run(cfg, engine, output=out, sample_rows=40)  # the checkpoint stays: its report is read
        data = collect(checkpoint_dir(out), out)  # what the report page shows
        writer = data.models["writer"]
        cost = result.cost["by_model"]["writer"]
        ledger = read_totals(checkpoint_dir(out) / LEDGER_NAME)["writer"]
        figures[engine] = {
            "requests": writer.count("requests"),
            "answered": sum(writer.latency.values()),
            "input_tokens": writer.count("prompt_tokens"),
            "output_tokens": writer.count("completion_tokens"),
            "ledger": (ledger.requests, ledger.input_tokens, ledger.output_tokens, round(ledger.usd, 12)),
            "cost": {k: round(v, 12) if isinstance(v, float) else v for k, v in cost.items()},
        }
    assert figures["ray"] == figures["local"]
    assert figures["local"]["requests"] == figures["local"]["answered"] == 41  # every row once, plus the probe
    assert figures["local"]["input_tokens"] > 0


def test_the_run_span_of_a_ray_run_carries_the_local_runs_per_model_figures(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from tests.otlp_receiver import OTLPReceiver

    address = ray_workers.get_runtime_context().gcs_address
    figures: dict[str, dict[str, Any]] = {}
    with OTLPReceiver() as receiver:
        for engine in ("local", "ray"):
            root = tmp_path / engine
            root.mkdir()
            path = root / "genwire.yaml"
            path.write_text(json.dumps(pipeline(fake_openai_server, root, n=30)))  # JSON is YAML
            env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS" and not k.startswith("OTEL_")}
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = receiver.endpoint
            on_ray = ["--engine", "ray", "--address", address, "--workers", str(WORKERS)] if engine == "ray" else []
            before = len(receiver.spans)
            proc = subprocess.run(
                [sys.executable, "-m", "genwire.cli.main", "run", str(path), "--json", *on_ray],
                capture_output=True,
                text=True,
                env=env,
                timeout=120,
            )
            assert proc.returncode == 0, proc.stdout + proc.stderr
            (run_span,) = [s for s in receiver.spans[before:] if s.name == "genwire.run"]
            assert run_span.attributes["genwire.engine"] == engine
            figures[engine] = {k: v for k, v in run_span.attributes.items() if k.startswith("genwire.model.")}
            summary = json.loads(proc.stdout)["models"]["writer"]
            assert figures[engine]["genwire.model.writer.requests"] == summary["requests"] == 31  # rows + probe
            assert figures[engine]["genwire.model.writer.input_tokens"] == summary["prompt_tokens"] > 0
    assert figures["ray"] == figures["local"]


# --- the guarantees held cluster-wide (SPEC §22) ------------------------------------------------

PRICE = (0.15, 0.60)  # writer, USD per million tokens
ANSWER_TOKENS = 12  # small answers: a cheap run


def priced_pipeline(server: FakeOpenAIServer, root: Path, *, n: int) -> dict[str, Any]:
    """``uid`` and one priced chat column whose prompt names the row (every request is one row's)."""
    cfg = pool_pipeline([server.url], root, n=n)
    cfg["models"]["writer"] = {
        "provider": "r0",
        "model": "writer",
        "kind": "chat",
        "params": {"max_tokens": ANSWER_TOKENS},
        "price": {"input_per_mtok": PRICE[0], "output_per_mtok": PRICE[1]},
    }
    cfg["providers"]["r0"]["max_concurrency"] = 8
    cfg["pipeline"]["batch_size"] = 8
    return cfg


async def test_near_the_cap_ray_keeps_as_many_rows_as_the_local_engine_and_says_what_one_request_may_cost(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Issue 49 item 12: at 40 % of a run's cost, Ray kept 62-70 rows of 200 where the local
    engine kept 80 (its workers refused each other's rows near the cap); the driver holds new
    rows back as the local engine does, and its stop message names one request's worst case."""
    from genwire.errors import BudgetStopped

    n = 200
    full = await run(priced_pipeline(fake_openai_server, tmp_path / "full", n=n), "local", skip_preflight=True)
    assert full.cost is not None
    cap = 0.4 * full.cost["total_usd"]
    kept = {}
    for engine in ("local", "ray"):
        cfg = priced_pipeline(fake_openai_server, tmp_path / engine, n=n)
        with pytest.raises(BudgetStopped) as stopped:
            await run(cfg, engine, max_cost_usd=cap, skip_preflight=True, response_cache=False)
        kept[engine] = stopped.value.kept
        assert "one request of writer may cost up to" in str(stopped.value), (engine, str(stopped.value))
    assert 0 < kept["local"] < n
    assert kept["ray"] >= kept["local"] - cfg["providers"]["r0"]["max_concurrency"], kept


def cli_on_ray(ray: Any, *args: str | Path) -> subprocess.CompletedProcess[str]:
    address = ray.get_runtime_context().gcs_address
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    command = [sys.executable, "-m", "genwire.cli.main", *map(str, args)]
    on_ray = ["--engine", "ray", "--address", address, "--workers", str(WORKERS)]
    return subprocess.run([*command, *on_ray], capture_output=True, text=True, env=env, timeout=300)


def test_max_cost_holds_across_the_cluster_stops_with_exit_3_and_a_higher_cap_finishes(
    ray_workers: Any, tmp_path: Path
) -> None:
    from genwire.engine.records.checkpoint import checkpoint_dir
    from genwire.engine.records.ledger import LEDGER_NAME, read_totals
    from genwire.providers.budget import CostMeter
    from genwire.providers.pricing import Price
    from genwire.testing.fake_openai.usage import RealisticUsage

    n = 600
    with FakeOpenAIServer(latency=0.005) as server:
        server.realistic_usage("*", RealisticUsage(seed=5))

        def server_usd() -> float:
            return (server.prompt_tokens["writer"] * PRICE[0] + server.completion_tokens["writer"] * PRICE[1]) / 1e6

        # What the whole run costs: a local estimate of a copy of it (its own output).
        probe = tmp_path / "estimate"
        probe.mkdir()
        config = write_json(priced_pipeline(server, probe, n=n), probe / "genwire.yaml")
        estimate = subprocess.run(
            [sys.executable, "-m", "genwire.cli.main", "estimate", "-k", "8", "--json", str(config)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert estimate.returncode == 0, estimate.stderr
        found = json.loads(estimate.stdout)
        cap = 0.4 * (found["cost_usd"] + found["cost"]["this_session_usd"])
        server.reset_stats()

        path = write_json(priced_pipeline(server, tmp_path, n=n), tmp_path / "genwire.yaml")
        stopped = cli_on_ray(ray_workers, "run", path, "--max-cost", repr(cap))
        assert stopped.returncode == 3, stopped.stdout + stopped.stderr
        assert "stopped at the budget" in stopped.stderr and "--max-cost" in stopped.stderr
        assert "Traceback" not in stopped.stderr
        # One request's worst case (a body far longer than these, its answer at max_tokens).
        meter = CostMeter({"writer": Price(PRICE[0] / 1e6, PRICE[1] / 1e6, 0.0, 0.0, "test")})
        _, worst = meter.worst_case("writer", 600, ANSWER_TOKENS)
        assert server_usd() <= cap + WORKERS * worst  # the server's own count
        ledger = read_totals(checkpoint_dir(tmp_path / "out.jsonl") / LEDGER_NAME)["writer"]
        assert (ledger.requests, ledger.input_tokens, ledger.output_tokens) == (
            server.requests["writer"],
            server.prompt_tokens["writer"],
            server.completion_tokens["writer"],
        )
        assert 0 < ledger.requests < n  # it stopped partway

        done = cli_on_ray(ray_workers, "run", path, "--max-cost", repr(cap * 10), "--json")
        assert done.returncode == 0, done.stdout + done.stderr
        summary = json.loads(done.stdout)
        rows = read_rows(tmp_path / "out.jsonl")
        assert len(rows) == n and len({r["uid"] for r in rows}) == n
        asked = [json.dumps(body["messages"]) for model, body in server.bodies if model == "writer"]
        per_row = [a for a in asked if "Sentence" in a]
        assert len(per_row) == len(set(per_row)) == n  # every row paid for once, across both sessions
        assert summary["cost"]["total_usd"] == pytest.approx(server_usd(), rel=1e-9)


def write_json(cfg: dict[str, Any], path: Path) -> Path:
    path.write_text(json.dumps(cfg))  # JSON is YAML
    return path


RETRY_AFTER_S = 8


async def test_a_brake_on_one_worker_slows_every_workers_use_of_that_model(ray_workers: Any, tmp_path: Path) -> None:
    """One worker's requests to ``writer`` are answered 429 (Retry-After 8 s) after its
    first rows, until its gate brakes; the other worker, which never gets a 429, pauses
    ``writer`` too: the server sees none of its requests for the pause."""
    from genwire.testing.fake_server import FakeResponse

    n = 64  # 4 blocks of 16 rows: each worker gets 2 at the start (32 rows, ~4 s of 0.5 s requests)
    with FakeOpenAIServer(latency=0.5) as server:
        server.fail_when("writer", "SLOW", FakeResponse(429, headers={"Retry-After": str(RETRY_AFTER_S)}))
        cfg = pool_pipeline([server.url], tmp_path, n=n)
        cfg["providers"]["r0"].update(max_concurrency=8, rate_limit_wait_s=2)  # a SLOW row fails at once
        cfg["models"]["writer"] = {"provider": "r0", "model": "writer", "kind": "chat"}
        cfg["pipeline"].update(batch_size=4, max_failure_rate=1.0)
        cfg["pipeline"]["columns"][1:] = [
            {"name": "tag", "generator": "tag", "params": {"marker_dir": str(tmp_path), "skip": 8, "tagged": 4}},
            {
                "name": "text",
                "generator": "llm-text",
                "resources": {"model": "writer"},
                "params": {"prompt": "{{tag}}"},
            },
        ]
        result = await run(cfg, "ray", (Tag,))
        arrivals = [
            (when, json.dumps(body["messages"]))
            for (when, _, _), (model, body) in zip(server.log, server.bodies, strict=True)
            if model == "writer"
        ]
    assert result.rows_failed == 4 and result.rows_written == n - 4  # the four SLOW rows
    braked_at = min(when for when, text in arrivals if "SLOW" in text)
    # The other worker's rows (two blocks each, all sent at the start): without a
    # cluster-wide brake they are all answered a second or two after the 429s; with it,
    # what is left of them waits out the pause of the worker that got the 429s.
    other = [when for when, text in arrivals if "fine other row" in text]
    assert other and max(other) >= braked_at + RETRY_AFTER_S - 1.5
    # ...and it was braked: its requests stopped for seconds after the 429s (a pause,
    # where unbraked they come every fraction of a second). A gap rather than a fixed
    # window: on a starved machine the brake's message reaches the other worker late.
    after = sorted([braked_at, *(when for when in other if when >= braked_at)])
    assert max(b - a for a, b in itertools.pairwise(after)) >= RETRY_AFTER_S / 2, after


def tools_pipeline(root: Path, *, n: int, pids: Path, slow_s: float = 0.0) -> dict[str, Any]:
    """A ``tool-pid`` column on a stdio server that appends its PID to ``pids``; with
    ``slow_s``, a ``tool-slow`` column after it holds every row that long."""
    server = [sys.executable, "-m", "genwire.testing.mcp_server", "--pids-file", str(pids)]
    columns: list[dict[str, Any]] = [
        {"name": "uid", "generator": "sampler", "params": {"kind": "uuid"}},
        {"name": "tool", "generator": "tool-pid", "resources": {"web": "web"}},
    ]
    if slow_s:
        columns.append({"name": "held", "generator": "tool-slow", "resources": {"web": "web"}, "params": {"s": slow_s}})
    return {
        "tools": {
            "web": {"kind": "mcp", "transport": "stdio", "command": server, "env": {"DECLARED": "yes"}, "timeout_s": 60}
        },
        "preflight": {"timeout_s": 60, "deadline_s": 120},
        "pipeline": {"num_records": n, "batch_size": 4, "output": str(root / "out.jsonl"), "columns": columns},
    }


class SlowParams(BaseModel):
    s: float


class ToolSlow(Generator[SlowParams]):
    metadata = GeneratorMetadata(name="tool-slow", description="x", required_resources={"web": ResourceKind.TOOLS})
    params_model = SlowParams

    async def generate(self, rows: list[dict[str, Any]]) -> list[Any]:
        return [(await self.resources.web.call("slow", {"seconds": self.params.s})).text for _ in rows]


def server_pids(pids: Path) -> list[int]:
    return [int(line) for line in pids.read_text().split()] if pids.exists() else []


async def test_a_tools_pipeline_runs_on_ray_one_server_per_worker_and_none_outlives_the_run(
    ray_workers: Any, tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    os.environ["GENWIRE_TEST_UNDECLARED"] = "must-not-reach-the-server"
    try:
        result = await run(tools_pipeline(tmp_path, n=24, pids=pids), "ray", (ToolPid,))
    finally:
        del os.environ["GENWIRE_TEST_UNDECLARED"]
    assert result.rows_written == 24 and result.rows_failed == 0
    rows = read_rows(tmp_path / "out.jsonl")
    answered = {int(r["tool"]["pid"]) for r in rows}
    started = server_pids(pids)
    # The pre-flight's server on the driver, and one per worker that ran rows (shared by its columns).
    assert len(started) == 1 + len(answered) and 1 <= len(answered) <= WORKERS
    assert started[0] not in answered  # the driver's answered the pre-flight only
    # The declared variables only (LC_CTYPE: Python sets it itself under the C locale, PEP 538).
    assert {frozenset(json.loads(r["tool"]["env"])) - {"LC_CTYPE"} for r in rows} == {frozenset({"DECLARED", "PATH"})}
    assert [pid for pid in started if not wait_gone(pid, timeout=60)] == []


def test_no_tool_server_outlives_a_killed_ray_driver(ray_workers: Any, tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    path = write_json(tools_pipeline(tmp_path, n=400, pids=pids, slow_s=600), tmp_path / "genwire.yaml")
    address = ray_workers.get_runtime_context().gcs_address
    pythonpath = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    driver_code = f"""
import asyncio, json, logging, ray, genwire
from test_ray import ToolPid, ToolSlow
ray.init(address={address!r}, log_to_driver=False, logging_level=logging.WARNING,
         runtime_env={{"env_vars": {{"PYTHONPATH": {pythonpath!r}}}}})
async def main():
    container = genwire.boot(json.loads(open({str(path)!r}).read()), generators=[ToolPid, ToolSlow])
    async with container:
        await container.run(engine="ray", ray_workers={WORKERS})
asyncio.run(main())
"""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = pythonpath
    driver = subprocess.Popen(
        [sys.executable, "-c", driver_code], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    try:
        deadline = time.monotonic() + 120
        while len(server_pids(pids)) < 1 + WORKERS and driver.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(server_pids(pids)) == 1 + WORKERS, driver.stderr.read() if driver.poll() is not None else "slow"
        time.sleep(1.0)  # the workers' rows are in their tool calls now
    finally:
        driver.kill()  # kill -9
        driver.wait(timeout=60)
        assert driver.stderr is not None
        driver.stderr.close()
    assert [pid for pid in server_pids(pids) if not wait_gone(pid, timeout=60)] == []


async def test_a_pool_on_ray_starts_from_the_drivers_preflight_verdicts(ray_workers: Any, tmp_path: Path) -> None:
    """An endpoint the pre-flight found refusing the key is out on every worker from the
    start: it gets the driver's probe and nothing else, as on the local engine."""
    sent = {}
    for engine in ("local", "ray"):
        with FakeOpenAIServer() as good, FakeOpenAIServer() as bad:
            bad.require_api_key("another-key")
            result = await run(pool_pipeline([good.url, bad.url], tmp_path / engine, n=40), engine)
            sent[engine] = (good.requests["writer"], bad.requests["writer"])
        assert result.rows_written == 40 and result.rows_failed == 0
    assert sent["ray"] == sent["local"]
    assert sent["ray"][1] >= 1  # the probe


def kill_written_pid(marker: Path, timeout: float) -> int | None:
    """kill -9 of the process whose PID appears in ``marker``; None if none did in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(FileNotFoundError, ValueError):
            pid = int(marker.read_text())
            os.kill(pid, signal.SIGKILL)
            return pid
        time.sleep(0.05)
    return None


async def test_a_worker_killed_by_pid_comes_back_with_its_peers_and_the_drivers_verdicts(
    ray_workers: Any, tmp_path: Path
) -> None:
    """kill -9 of a worker process mid-block: Ray restarts it and the block runs again; the
    new process gets the run's roster with that block, so it tells its peer its brakes and
    endpoints out, and keeps out the endpoint the pre-flight found refusing the key. Every
    row is made once, the rows are the local engine's, and the refusing endpoint got the
    probe only, as locally."""
    n = 48  # blocks of 12 rows: row 20 holds the second block on its worker until the kill
    marker = tmp_path / "worker-pid"
    rows: dict[str, list[dict[str, Any]]] = {}
    sent: dict[str, tuple[int, int]] = {}
    killed = None
    for engine in ("ray", "local"):  # the marker is there for the local run: nothing waits
        with FakeOpenAIServer() as good, FakeOpenAIServer() as refusing:
            refusing.require_api_key("another-key")
            cfg = pool_pipeline([good.url, refusing.url], tmp_path / engine, n=n)
            cfg["pipeline"]["columns"][1:1] = [
                {"name": "held", "generator": "kill-me", "params": {"marker_dir": str(tmp_path), "at": 20}},
                {"name": "known", "generator": "known"},
            ]
            killing = asyncio.create_task(asyncio.to_thread(kill_written_pid, marker, 120 if engine == "ray" else 0))
            result = await run(cfg, engine, (KillMe, Known))
            killed = await killing if engine == "ray" else killed
            assert result.rows_written == n and result.rows_failed == 0
            rows[engine] = read_rows(tmp_path / engine / "out.jsonl")
            sent[engine] = (good.requests["writer"], refusing.requests["writer"])
        if engine == "ray":
            assert killed is not None and wait_gone(killed, timeout=60)
    known = [row.pop("known") for row in rows["ray"]]
    assert rows["ray"] == [{k: v for k, v in row.items() if k != "known"} for row in rows["local"]]
    assert sent["ray"][1] == sent["local"][1] >= 1  # the refusing endpoint: the probe, nothing else
    # Every row's worker knew its peer and the pre-flight's verdict, the restarted one too.
    assert {(k["peers"], json.dumps(k["out"])) for k in known} == {(1, json.dumps({"writer": {"r1": "auth"}}))}
    assert len({k["pid"] for k in known} - {killed}) == 2  # the other worker and the restarted one


async def test_the_workers_boot_during_the_preflight_and_a_failed_one_ends_them(
    ray_workers: Any, tmp_path: Path
) -> None:
    """The workers start while the pre-flight runs (the server holds its probe until both
    hold their CPU), send nothing, and the pre-flight's failure ends them: no actor outlives
    the run (the ``ray_workers`` fixture)."""
    with FakeOpenAIServer() as server:
        server.require_api_key("another-key")  # the probe is refused: the pre-flight fails
        server.hold(lambda: ray_workers.available_resources().get("CPU", 0) == 0, timeout_s=60)
        with pytest.raises(genwire.PreflightError):
            await run(pipeline(server, tmp_path, n=64), "ray")
        probes = server.requests["writer"]
        assert probes >= 1 and server.released == probes  # the workers were up during every probe
    assert not (tmp_path / "out.jsonl").exists()


async def test_an_endpoint_one_worker_takes_out_is_out_on_every_worker(ray_workers: Any, tmp_path: Path) -> None:
    """Replica r1 refuses (401) the rows of one worker only; once that worker takes r1 out
    for the run, the other worker, which r1 always answered, stops sending to it too."""
    n = 128
    with FakeOpenAIServer(latency=0.3) as good, FakeOpenAIServer(latency=0.3) as refusing:
        refusing.fail_when("writer", "SLOW", 401)
        cfg = pool_pipeline([good.url, refusing.url], tmp_path, n=n)
        cfg["pipeline"]["columns"][1:] = [
            {"name": "tag", "generator": "tag", "params": {"marker_dir": str(tmp_path), "skip": 0, "tagged": n}},
            {
                "name": "text",
                "generator": "llm-text",
                "resources": {"model": "writer"},
                "params": {"prompt": "{{tag}}"},
            },
        ]
        result = await run(cfg, "ray", (Tag,), skip_preflight=True)
        at_good = [(when, json.dumps(body)) for (when, _, _), (_, body) in zip(good.log, good.bodies, strict=True)]
        at_refusing = [
            (when, json.dumps(body)) for (when, _, _), (_, body) in zip(refusing.log, refusing.bodies, strict=True)
        ]
    assert result.rows_written == n and result.rows_failed == 0  # the refused rows failed over to r0
    out_at = min(when for when, body in at_refusing if "SLOW" in body)
    other_later = [when for when, body in at_good if "fine other" in body and when > out_at + 2]
    assert other_later  # the other worker still had rows to send, and sent them to r0...
    assert [when for when, body in at_refusing if "fine other" in body and when > out_at + 2] == []  # ...not to r1


def test_estimate_on_ray_measures_the_workers_requests_and_the_run_continues_after_them(
    ray_workers: Any, tmp_path: Path
) -> None:
    """``genwire estimate --engine ray``: the sample runs on the workers, their answers are
    measured (requests, tokens, latency: what a local estimate of the same rows measures),
    the rest is projected, and the run continues after the sample."""
    found = {}
    with FakeOpenAIServer(latency=0.01) as server:
        for engine in ("local", "ray"):
            root = tmp_path / engine
            root.mkdir()
            path = write_json(priced_pipeline(server, root, n=200), root / "genwire.yaml")
            if engine == "local":
                done = subprocess.run(
                    [sys.executable, "-m", "genwire.cli.main", "estimate", str(path), "-k", "16", "--json"],
                    capture_output=True,
                    text=True,
                    timeout=120,
                )
            else:
                done = cli_on_ray(ray_workers, "estimate", path, "-k", "16", "--json")
            assert done.returncode == 0, done.stdout + done.stderr
            found[engine] = json.loads(done.stdout)
        before = server.requests["writer"]
        finished = cli_on_ray(ray_workers, "run", tmp_path / "ray" / "genwire.yaml")
        assert finished.returncode == 0, finished.stderr
        assert server.requests["writer"] - before == 200 - 16 + 1  # the rest of the rows, and the probe
    for engine in ("local", "ray"):
        writer = found[engine]["models"]["writer"]
        assert found[engine]["rows_left"] == 184 and writer["requests"] == 184
        assert writer["sample_requests"] == 16 and writer["latency_s_mean"] > 0
        assert found[engine]["duration_s"] > 0
    # Issue 49 item 20: the projection counts the workers' start-up the sample measured.
    assert found["local"]["workers_start_s"] is None
    assert found["ray"]["workers_start_s"] > 0
    assert found["ray"]["duration_s"] >= found["ray"]["workers_start_s"]
    same = ("requests_per_row", "input_tokens_mean", "output_tokens_mean", "cost_usd")
    assert {k: found["ray"]["models"]["writer"][k] for k in same} == {
        k: found["local"]["models"]["writer"][k] for k in same
    }


# --- gates on Ray (SPEC §21, §22) ------------------------------------------------------------

GATED_N = 20
ANSWER_WORDS = 16  # the fake server counts a word a token


def gated_pipeline(server: FakeOpenAIServer, root: Path) -> dict[str, Any]:
    """``n → keep-if (n % 3 != 0) → keep-unique(a) → echo (the writer repeats b) →
    keep-novel(echo)`` (by the fake server's embeddings: a repeated b is cosine 1): every
    gate rejects some candidates, and both in-order gates run on the cluster's keeper."""
    server.answer_with("writer", lambda prompt: " ".join([prompt.split()[1], *["and"] * (ANSWER_WORDS - 1)]))
    # Paid per answer token only, answers of max_tokens: a request's worst case is its cost,
    # so a budget of a few requests stops partway.
    price = {"input_per_mtok": 0.0, "output_per_mtok": 1000.0}
    words = {"a": [f"a{i}" for i in range(40)], "b": [f"b{i}" for i in range(40)]}
    return {
        "providers": {"srv": {"kind": "openai", "base_url": server.url, "max_concurrency": 8}},
        "models": {
            "writer": {
                "provider": "srv",
                "model": "writer",
                "kind": "chat",
                "params": {"max_tokens": 16},
                "price": price,
            },
            "embedder": {"provider": "srv", "model": "embedder", "kind": "embedding", "price": price},
        },
        "cache": {"dir": str(root / "cache")},
        "pipeline": {
            "num_records": GATED_N,
            "seed": 3,
            "batch_size": 4,
            "output": str(root / "out.jsonl"),
            "columns": [
                {
                    "name": "n",
                    "generator": "sampler",
                    "params": {"kind": "uniform", "low": 0, "high": 10**9, "integer": True},
                },
                *(
                    {"name": k, "generator": "sampler", "params": {"kind": "category", "values": v}}
                    for k, v in words.items()
                ),
                {"name": "most", "generator": "keep-if", "params": {"expression": "n % 3 != 0"}},
                {"name": "new_a", "generator": "keep-unique", "params": {"column": "a"}},
                {
                    "name": "echo",
                    "generator": "llm-text",
                    "resources": {"model": "writer"},
                    "params": {"prompt": "Say {{ b }} for {{ n }}"},
                },
                {
                    "name": "new_b",
                    "generator": "keep-novel",
                    "resources": {"model": "embedder"},
                    "params": {"column": "echo"},
                },
            ],
        },
    }


def rejected_up_to_last_kept(output: Path) -> list[dict[str, Any]]:
    """The rejected file's records below the last candidate in the output (past it, the
    surplus depends on what was in flight when the target was met)."""
    rejected = read_rows(output.with_name(output.name + ".rejected.jsonl"))
    taken = {r["candidate"] for r in rejected if r["gate"] is not None}
    last, seen = -1, 0
    while seen < GATED_N:
        last += 1
        seen += last not in taken
    return [r for r in rejected if r["candidate"] < last]


async def test_a_gated_pipeline_gives_the_local_output_on_ray_with_a_worker_killed_midway(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = gated_pipeline(fake_openai_server, tmp_path)
    columns = cfg["pipeline"]["columns"]
    # Past the first in-order gate, before the second: the dead batch was judged by one
    # (its re-run gets the same verdicts) and holds the other up until its re-run gets there.
    die = {"name": "tag", "generator": "die-from", "params": {"marker_dir": str(tmp_path), "at_or_after": 12}}
    columns.insert(columns.index(next(c for c in columns if c["name"] == "echo")), die)
    on_ray = await run(cfg, "ray", (DieFrom,), output=tmp_path / "ray.jsonl")
    assert (tmp_path / "died").exists()  # a worker died mid-run
    local = await run(cfg, "local", (DieFrom,), output=tmp_path / "local.jsonl", response_cache=False)
    assert on_ray.rows_written == local.rows_written == GATED_N
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    rejected = rejected_up_to_last_kept(tmp_path / "ray.jsonl")
    assert rejected == rejected_up_to_last_kept(tmp_path / "local.jsonl")
    assert {r["gate"] for r in rejected} == {"most", "new_a", "new_b"}  # every gate rejected some
    assert on_ray.funnel is not None and on_ray.funnel.kept >= GATED_N
    # The keeper's embedding requests were paid for and counted as the workers' are, and
    # the answers they kept came back with the verdicts: the driver stored them.
    assert on_ray.requests["embedder"] > 1 and on_ray.cost is not None
    assert cache_table(tmp_path / "cache", "SELECT COUNT(*) FROM answers WHERE col = 'new_b'")[0][0] > 0


async def test_a_gated_ray_run_stopped_by_its_budget_then_its_candidates_cap_resumes_to_the_local_output(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    from genwire.errors import BudgetStopped, CandidatesExhausted

    cfg = gated_pipeline(fake_openai_server, tmp_path)
    local = await run(cfg, "local", output=tmp_path / "local.jsonl", response_cache=False, skip_preflight=True)
    assert local.cost is not None
    reference = rejected_up_to_last_kept(tmp_path / "local.jsonl")
    last_kept = len(reference) + GATED_N - 1  # the candidate of the last row in the output
    fake_openai_server.reset_stats()

    with pytest.raises(BudgetStopped) as budget:
        await run(cfg, "ray", max_cost_usd=0.4 * local.cost["total_usd"], skip_preflight=True)
    assert not isinstance(budget.value, CandidatesExhausted)
    assert 0 < budget.value.funnel["kept"] < GATED_N

    cfg["pipeline"]["max_candidates"] = last_kept  # one short of the last kept candidate
    with pytest.raises(CandidatesExhausted) as capped:
        await run(cfg, "ray", skip_preflight=True)
    assert capped.value.funnel["candidates"] == last_kept and capped.value.funnel["kept"] == GATED_N - 1

    del cfg["pipeline"]["max_candidates"]
    done = await run(cfg, "ray", skip_preflight=True)
    assert done.rows_written == GATED_N
    assert (tmp_path / "out.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert rejected_up_to_last_kept(tmp_path / "out.jsonl") == reference
    # Nothing paid twice across the three sessions (the driver stored every answer it was sent).
    asked = [body["messages"][-1]["content"] for model, body in fake_openai_server.bodies if model == "writer"]
    per_candidate = [a for a in asked if a.startswith("Say ")]
    assert len(per_candidate) == len(set(per_candidate))


async def test_a_keep_novel_ray_run_under_a_cap_of_several_times_its_cost_finishes(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Issue 49 item 23: the keeper's embedding requests, priced per input token, spend
    leases of the cluster's cap as the workers' requests do; a cap of 6x what the whole run
    costs locally must not stop it (it stopped at 6-7 % of the cap: the keeper, asking for a
    lease while the workers held the rest unspent, ended the budget)."""
    cfg = gated_pipeline(fake_openai_server, tmp_path)
    cfg["models"]["embedder"]["price"] = {"input_per_mtok": 1000.0, "output_per_mtok": 0.0}
    # A known output limit far above the answers: every request holds it, so the workers'
    # leases (several worst cases each) soon cover the whole cap while little of it is spent.
    cfg["models"]["writer"]["max_output_tokens"] = 256
    local = await run(cfg, "local", output=tmp_path / "local.jsonl", response_cache=False, skip_preflight=True)
    assert local.cost is not None and local.requests["embedder"] > 1
    done = await run(cfg, "ray", max_cost_usd=6 * local.cost["total_usd"], skip_preflight=True)
    assert done.rows_written == GATED_N
    assert (tmp_path / "out.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()


async def test_the_keeper_judges_the_clusters_batches_in_key_order_and_a_rerun_batch_gets_its_first_verdicts(
    tmp_path: Path,
) -> None:
    """The keeper in-process (as Ray runs it in its actor): batches judged in key order
    whatever order the workers ask in, a re-run batch not judged against itself, a batch
    that left before the driver's word holding nothing up, a worker's call that comes
    before the driver's word waiting for it."""
    from genwire.engine.cluster.keeper import Answer, GateKeeper
    from genwire.engine.cluster.wire import WorkerSpec

    cfg = {
        "pipeline": {
            "num_records": 4,
            "output": str(tmp_path / "out.jsonl"),
            "columns": [
                {"name": "w", "generator": "sampler", "params": {"kind": "category", "values": ["x"]}},
                {"name": "u", "generator": "keep-unique", "params": {"column": "w"}},
            ],
        }
    }
    container = genwire.boot(cfg)
    spec = WorkerSpec(container.loaded, {c.generator_name: c.generator_cls for c in container.columns})
    keeper = GateKeeper(spec, ["u"], {"u": ([{"w": "old"}], [0])})  # an earlier session kept "old"

    async def judge(key: int, words: list[str]) -> list[Any]:
        answer = await keeper.judge("u", key, [{"w": w} for w in words], list(range(key, key + len(words))))
        assert isinstance(answer, Answer), answer
        return [v.keep for v in answer.values]

    async def waits(task: asyncio.Task[Any]) -> bool:
        for _ in range(20):
            await asyncio.sleep(0)
        return not task.done()

    try:
        await keeper.enter(1, [8])  # Ray delivered the driver's second block first
        later = asyncio.create_task(judge(8, ["x", "y"]))
        assert await waits(later)  # block 0 was submitted before it: its batches go first
        await keeper.enter(0, [4])
        assert await waits(later)
        assert await judge(4, ["x", "old", "z"]) == [True, False, True]
        assert await asyncio.wait_for(later, 60) == [False, True]
        assert await judge(4, ["x", "old", "z"]) == [True, False, True]  # re-run: the same verdicts
        await keeper.leave(12)  # a batch with no row left for the gate, before the driver's word
        early = asyncio.create_task(judge(16, ["y", "q"]))
        assert await waits(early)  # the driver has not entered it yet
        await keeper.enter(2, [12, 16])
        assert await asyncio.wait_for(early, 60) == [False, True]
    finally:
        await keeper.close()
        await container.aclose()


async def test_a_keeper_that_dies_stops_the_run_and_the_rerun_resumes_to_the_local_output(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    cfg = gated_pipeline(fake_openai_server, tmp_path)
    dies = {"name": "judged", "generator": "keeper-dies", "params": {"marker_dir": str(tmp_path), "at_or_after": 16}}
    cfg["pipeline"]["columns"].append(dies)
    with pytest.raises(genwire.RunError, match=r"in-order gates died.*rerun the same command"):
        await run(cfg, "ray", (KeeperDies,), skip_preflight=True)
    assert (tmp_path / "keeper-died").exists()
    done = await run(cfg, "ray", (KeeperDies,), skip_preflight=True)
    assert done.rows_written == GATED_N
    local = await run(
        cfg, "local", (KeeperDies,), output=tmp_path / "local.jsonl", skip_preflight=True, response_cache=False
    )
    assert local.rows_written == GATED_N
    assert (tmp_path / "out.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
    assert rejected_up_to_last_kept(tmp_path / "out.jsonl") == rejected_up_to_last_kept(tmp_path / "local.jsonl")


class InProcess:
    """An object's async methods called as a Ray actor handle's are (``handle.m.remote(...)``)."""

    def __init__(self, target: Any) -> None:
        self._target = target

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)

        class Remote:
            @staticmethod
            def remote(*args: Any) -> Any:
                return asyncio.ensure_future(method(*args))

        return Remote


async def test_a_worker_runs_a_later_block_first_and_its_batches_waiting_at_the_keeper_give_up_their_slots(
    tmp_path: Path,
) -> None:
    """Ray runs an async actor's calls in no guaranteed order: a worker may start a later
    block before an earlier one. That block's batches, waiting at the keeper for the earlier
    block's, must not hold every slot the earlier block's batches need (a deadlock)."""
    from genwire.engine.cluster.keeper import GateKeeper, KeeperClient
    from genwire.engine.cluster.wire import WorkerSpec
    from genwire.engine.cluster.worker import BATCHES_IN_FLIGHT, BlockWorker

    cfg = {
        "pipeline": {
            "num_records": 8,
            "seed": 2,
            "output": str(tmp_path / "out.jsonl"),
            "columns": [
                {"name": "w", "generator": "sampler", "params": {"kind": "category", "values": ["x", "y", "z"]}},
                {"name": "u", "generator": "keep-unique", "params": {"column": "w"}},
            ],
        }
    }
    container = genwire.boot(cfg)
    spec = WorkerSpec(container.loaded, {c.generator_name: c.generator_cls for c in container.columns})
    keeper = GateKeeper(spec, ["u"], {})
    worker = BlockWorker(dataclasses.replace(spec, gates=KeeperClient(InProcess(keeper))))
    try:
        size = BATCHES_IN_FLIGHT  # a block of one-row batches fills every slot
        first, second = list(range(size)), list(range(size, 2 * size))
        await keeper.enter(0, first)
        await keeper.enter(1, second)
        later = asyncio.create_task(worker.run_block(second, 1))  # started first
        for _ in range(50):
            await asyncio.sleep(0)
        earlier = asyncio.create_task(worker.run_block(first, 1))
        done = await asyncio.wait_for(asyncio.gather(earlier, later), 60)
        results = [result for block in done if isinstance(block, tuple) for result in block[1]]
        kept = sorted(i for r in results for i in r.indices)
        rejected = sorted(r["candidate"] for result in results for r in result.rejected)
        assert sorted(kept + rejected) == list(range(2 * size)) and 0 < len(kept) <= 3
    finally:
        await worker.close()
        await keeper.close()
        await container.aclose()


# --- a Ray instance genwire starts itself: quiet, reaped, and a killed driver loses nothing paid ----


def ray_processes(mark: str) -> list[int]:
    """The PIDs of the processes carrying ``mark`` in their environment (a driver's Ray instance)."""
    import psutil

    found = []
    for proc in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if proc.environ().get("GENWIRE_TEST_MARK") == mark:
                found.append(proc.pid)
    return found


def ray_run_command(path: Path) -> tuple[list[str], dict[str, str], str]:
    """A CLI run on a Ray instance of its own (two workers), its environment marked (the mark
    finds that instance's processes: ``ray_processes``), and the mark."""
    command = [sys.executable, "-m", "genwire.cli.main", "run", str(path), "--engine", "ray", "--workers", "2"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["GENWIRE_TEST_MARK"] = mark = f"driver-{os.getpid()}-{time.monotonic_ns()}"
    return command, env, mark


def wait_for_requests(server: FakeOpenAIServer, count: int, driver: subprocess.Popen[Any]) -> None:
    """Until the server saw ``count`` requests of the writer, the driver still running."""
    deadline = time.monotonic() + 240
    while server.requests["writer"] < count and driver.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert driver.poll() is None, "the run ended before it was stopped"


def start_ray_driver(
    server: FakeOpenAIServer, root: Path, rows: int, cap: int
) -> tuple[list[str], dict[str, str], str, subprocess.Popen[Any]]:
    """A CLI run of ``pipeline`` (batches of 4) on a Ray instance of its own, started in the
    background: its command, environment and mark (``ray_run_command``), and its process."""
    cfg = pipeline(server, root, n=rows, max_concurrency=cap, batch_size=4)
    command, env, mark = ray_run_command(write_json(cfg, root / "genwire.yaml"))
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return command, env, mark, driver


def test_a_killed_ray_driver_leaves_no_process_and_its_resume_pays_at_most_what_was_in_flight(tmp_path: Path) -> None:
    """kill -9 of a CLI driver that started its own Ray mid-run: every process of that
    instance ends (by PID), the server sees no more requests than were in flight, and the
    resume (which starts and ends its own instance too) pays again only for those: every
    answer settled before the kill was on disk. The resume's stderr holds no line of Ray's,
    and its summary shows the cluster's peak in flight, not the driver's.

    The driver stalls first (SIGSTOP: swapped out, or busy), so it stores nothing for a
    while: the workers must not go on paying beyond the cap meanwhile (without the answers'
    holds they did, at every slot's turn, until the kill)."""
    rows, cap = 48, 4
    with FakeOpenAIServer(latency=0.4) as server:
        command, env, mark, driver = start_ray_driver(server, tmp_path, rows, cap)
        try:
            wait_for_requests(server, rows // 2, driver)
            instance = [pid for pid in ray_processes(mark) if pid != driver.pid]
            driver.send_signal(signal.SIGSTOP)
            stalled = server.requests["writer"]
            deadline = time.monotonic() + 5  # the workers may run on meanwhile: at most the cap
            while server.requests["writer"] <= stalled + cap and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            driver.kill()  # kill -9
            driver.wait(timeout=60)
        at_kill = server.requests["writer"]
        assert len(instance) >= 3, instance  # the GCS, the raylet, its agents, the workers
        assert [pid for pid in instance if not wait_gone(pid, timeout=60)] == []
        first = server.requests["writer"]
        assert first <= at_kill + cap  # the workers stopped paying with the driver gone

        env["GENWIRE_TEST_MARK"] = mark = mark + "-resume"
        resume = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert resume.returncode == 0, resume.stdout + resume.stderr
        assert resume.stderr == ""  # nothing of Ray's on the terminal without --debug
        assert len(read_rows(tmp_path / "out.jsonl")) == rows
        probes = 2  # the pre-flight's, one per session
        # Paid again: at most the cap. An answer holds its slot until the driver stored it
        # (engine.cluster.holds), so in flight plus settled-not-stored never passes it.
        assert server.requests["writer"] <= rows + cap + probes
        peak = int(resume.stdout.split("peak ", 1)[1].split()[0])
        assert 2 <= peak <= cap  # the workers' gates add up (the driver's own peak is its probe's: 1)
        assert [pid for pid in ray_processes(mark) if not wait_gone(pid, timeout=60)] == []


def block_workers(mark: str, timeout: float = 120) -> list[int]:
    """The PIDs of the block workers of a driver's Ray instance (``ray::BlockWorker...``), once
    there are WORKERS of them."""
    import psutil

    deadline = time.monotonic() + timeout
    while True:
        found = []
        for pid in ray_processes(mark):
            with contextlib.suppress(psutil.Error):
                if "BlockWorker" in " ".join(psutil.Process(pid).cmdline()):
                    found.append(pid)
        if len(found) >= WORKERS or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_ray_worker_killed_then_its_driver_pays_at_most_the_cap_after_the_driver_died(tmp_path: Path) -> None:
    """Issue 49 item 7: kill -9 of one worker process (Ray restarts it and re-runs its
    blocks), then kill -9 of the driver: the workers still alive start at most the cap's
    requests after the driver died, every process of the instance ends, and the resume
    pays again at most the cap for the driver's death plus what the killed worker had
    paid and not yet handed over (its share of the cap: those answers died with it)."""
    rows, cap = 48, 4
    with FakeOpenAIServer(latency=0.4) as server:
        command, env, mark, driver = start_ray_driver(server, tmp_path, rows, cap)
        try:
            wait_for_requests(server, rows // 4, driver)
            victim = block_workers(mark)[0]
            os.kill(victim, signal.SIGKILL)
            assert wait_gone(victim, timeout=60)
            wait_for_requests(server, rows // 2, driver)  # its siblings, and Ray's new process, go on
            instance = [pid for pid in ray_processes(mark) if pid != driver.pid]
        finally:
            driver.kill()  # kill -9
            driver.wait(timeout=60)
        at_kill = server.requests["writer"]
        assert [pid for pid in instance if not wait_gone(pid, timeout=60)] == []
        first = server.requests["writer"]
        assert first <= at_kill + cap  # no worker paid beyond its slots with the driver gone

        env["GENWIRE_TEST_MARK"] = mark = mark + "-resume"
        resume = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert resume.returncode == 0, resume.stdout + resume.stderr
        assert len(read_rows(tmp_path / "out.jsonl")) == rows
        probes = 2  # the pre-flight's, one per session
        assert server.requests["writer"] <= rows + cap + cap // WORKERS + probes, (at_kill, first)
        assert [pid for pid in ray_processes(mark) if not wait_gone(pid, timeout=60)] == []


@pytest.mark.parametrize("stage", ["rows_kept", "before_any_row"])
def test_a_ray_run_interrupted_by_ctrl_c_says_what_is_on_disk_and_its_resume_pays_at_most_what_was_in_flight(
    tmp_path: Path, stage: str
) -> None:
    """Issue 49 item 7: Ctrl-C (SIGINT) of a CLI driver that started its own Ray: its message
    counts what is on disk (the checkpoint's rows, or the cache's answers before any row was
    kept), every process of its instance ends, and the resume pays again at most what was in
    flight. ``before_any_row``: one block of the whole run, interrupted before it returns."""
    from genwire.engine.records.checkpoint import checkpoint_dir, kept_rows

    rows, cap = 48, 4
    with FakeOpenAIServer(latency=0.4) as server:
        batch = rows if stage == "before_any_row" else 4
        cfg = pipeline(server, tmp_path, n=rows, max_concurrency=cap, batch_size=batch)
        cfg["cache"] = {"dir": str(tmp_path / "cache")}
        path = write_json(cfg, tmp_path / "genwire.yaml")
        command, env, mark = ray_run_command(path)
        driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        try:
            wait_for_requests(server, rows // 2, driver)
            instance = [pid for pid in ray_processes(mark) if pid != driver.pid]
            driver.send_signal(signal.SIGINT)
            out, err = driver.communicate(timeout=120)
        finally:
            if driver.poll() is None:
                driver.kill()
                driver.wait(timeout=60)
        assert driver.returncode == 130, out + err
        assert [pid for pid in instance if not wait_gone(pid, timeout=60)] == []
        kept = kept_rows(checkpoint_dir(tmp_path / "out.jsonl"))
        answers = cache_table(tmp_path / "cache", "SELECT COUNT(*) FROM answers")[0][0]
        if kept:
            assert f"interrupted: {kept:,} of {rows:,} rows kept" in err, err
        else:
            assert answers > 0 and f"the response cache holds the {answers:,} answers" in err, (answers, err)

        env["GENWIRE_TEST_MARK"] = mark + "-resume"
        resume = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
        assert resume.returncode == 0, resume.stdout + resume.stderr
        assert len(read_rows(tmp_path / "out.jsonl")) == rows
        probes = 2  # the pre-flight's, one per session
        assert server.requests["writer"] <= rows + cap + probes


LATENCY_S = 0.25


async def test_an_interrupted_ray_runs_requests_per_second_stay_within_what_its_concurrency_allows(
    ray_workers: Any, fake_openai_server: FakeOpenAIServer, tmp_path: Path
) -> None:
    """Item 13 of issue 49: a worker's receipts may cover several seconds (its last at the
    interruption); the report spreads them over those seconds, never into the last one."""
    from genwire.engine.records.checkpoint import checkpoint_dir
    from genwire.engine.report.data import collect

    fake_openai_server.set_latency("writer", LATENCY_S)
    cap = 4
    out = tmp_path / "out.jsonl"
    container = genwire.boot(pipeline(fake_openai_server, tmp_path, n=400, max_concurrency=cap))
    async with container:
        await cancel_ray_run_after(container, fake_openai_server, 40, output=out)
    data = collect(checkpoint_dir(out), out)
    bins = data.bins(count=10_000)  # one-second bins
    rates = [b.requests.get("writer", 0) / b.width for b in bins]
    assert max(rates) <= cap / LATENCY_S * 1.5 + 2, rates  # the slack: a tick's edges, a loaded machine
    # What the server counted, give or take the interruption: requests in flight then (sent by
    # a worker; whether the server counted them is a race) and the cancelled retries' attempts.
    # Seen once beside the whole suite: 46 plotted for 41 counted (not explained yet).
    counted = round(sum(b.requests.get("writer", 0) for b in bins))
    assert abs(counted - fake_openai_server.requests["writer"]) <= 2 * cap, (counted, fake_openai_server.requests)
