"""What the static check of plugin code (SPEC §15) costs, against the floors measured in
the same run: ``ast.parse`` of the same files (what any check must pay once per edit) and
reading and hashing them (what the content-keyed cache pays every time).

    python benchmarks/lint_scan.py [--repeat 15]

Happy case: the built-in generators (clean code). Imperfect case: a plugin package whose
generator hands itself and its resources to helper modules, a helper class and a
``super()`` chain, with escapes the check warns about (the calls it follows are the cost).
Each case cold (no cache), warm (the on-disk cache, a new process) and hot (in memory).
Times are CPU time of this process (``time.process_time``: other load on a shared machine
moves them far less than wall time), medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import importlib
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from genwire.generators import source_scan
from genwire.generators.discovery import discover
from genwire.generators.source_check import check_generators

HELPERS = """
def pick(gen):
    return gen.resources.model

def through(gen, depth=0):
    return pick(gen)

def on_resources(res):
    return res.model

class Holder:
    def __init__(self, gen):
        self.gen = gen

    def use(self):
        return self.gen.resources.model
"""

GENERATOR = """
import json

from genwire.generators import Generator, GeneratorMetadata, ResourceKind

from . import helpers
from .helpers import Holder, through


class Base(Generator):
    metadata = GeneratorMetadata(
        name="bench-base", description="x", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows):
        return [self.resources.model for _ in rows]


class Tangled(Base):
    metadata = GeneratorMetadata(
        name="bench-tangled", description="x", required_resources={"model": ResourceKind.CHAT_MODEL}
    )

    async def generate(self, rows):
        first = helpers.on_resources(self.resources)
        name = "model"
        dynamic = getattr(self.resources, name)
        json.dumps(self)
        return [through(self), Holder(self).use(), first, dynamic, await super().generate(rows)]
"""


def median_ms(run: Callable[[], object], before: Callable[[], None], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        before()
        start = time.process_time()
        run()
        times.append(time.process_time() - start)
    return statistics.median(times) * 1e3


def source_files(classes: list[type]) -> list[Path]:
    """The files the check reads for ``classes`` (helpers the calls lead to included)."""
    source_scan._memory.clear()
    check_generators(classes)
    return sorted(Path(p) for p in source_scan._memory)


def measure(label: str, classes: list[type], repeat: int) -> None:
    files = source_files(classes)

    def new_cache() -> None:
        os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="genwire-lint-bench-")
        source_scan._memory.clear()

    def new_process() -> None:
        source_scan._memory.clear()

    def nothing() -> None:
        pass

    parse = median_ms(lambda: [ast.parse(f.read_bytes()) for f in files], nothing, repeat)
    hashing = median_ms(lambda: [hashlib.sha256(f.read_bytes()).hexdigest() for f in files], nothing, repeat)
    cold = median_ms(lambda: check_generators(classes), new_cache, repeat)
    check_generators(classes)
    warm = median_ms(lambda: check_generators(classes), new_process, repeat)
    hot = median_ms(lambda: check_generators(classes), nothing, repeat)
    print(f"{label}: {len(classes)} generators, {len(files)} files")
    print(f"  floor: ast.parse {parse:7.2f} ms   read+sha256 {hashing:7.2f} ms")
    print(f"  check: cold {cold:7.2f} ms ({cold / parse:.1f}x parse)   warm {warm:7.2f} ms   hot {hot:7.2f} ms")


def tangled_package(root: Path) -> list[type]:
    package = root / "lint_bench_plugin"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "helpers.py").write_text(HELPERS)
    (package / "gen.py").write_text(GENERATOR)
    sys.path.insert(0, str(root))
    return [importlib.import_module("lint_bench_plugin.gen").Tangled]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()
    builtins = [c for c in discover().generators.values() if c.__module__.startswith("genwire.generators.builtin")]
    measure("built-ins (happy)", builtins, args.repeat)
    with tempfile.TemporaryDirectory() as root:
        tangled = tangled_package(Path(root))
        findings = check_generators(tangled)
        measure(f"tangled plugin (imperfect: {len(findings)} findings)", tangled, args.repeat)


if __name__ == "__main__":
    main()
