"""Run every check concurrently: bounded, timed, deduplicated by endpoint, all failures kept.

This is the single pre-flight code path: ``container.preflight()``, ``genwire preflight``
and ``run`` all come through ``run_preflight``.

Chat aliases are probed with the requests the run will send: each distinct *request
shape* a column adds (its ``system``, its model params, an ``llm-structured`` column's
``response_format``; see ``Generator.request_shape``) is probed once per endpoint and
reported with ``variant: <column>``. The plain probe (``variant: None``) is sent only for
a target that some use reaches without a shape (a registry slot, a generator without
``request_shape``, a column that adds nothing): an alias every use of which is shaped
gets its shaped probes only, so no probe is a request the run never sends. Shapes are
groups like any other, so they run concurrently.

Kept whole (~460 lines) for one role: ``_Preflight`` is one pre-flight's state. Grouping
the targets, probing each group and judging the outcomes (pools, dimensions, the cache)
all read and write the same results and cache; split apart they would pass that state
round instead of sharing it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from genwire.container.core import WiredPipeline
from genwire.container.plan import TargetPlan
from genwire.container.wiring import ColumnWiring
from genwire.errors import ConfigError, ErrorClass, GenwireError, ModelError, exception_text
from genwire.generators.metadata import ResourceKind
from genwire.preflight.cache import CachedResult, ProbeCache, cache_key, default_cache_dir
from genwire.preflight.report import CheckResult, PreflightReport, Status
from genwire.providers.base import Attempts, EmbeddingModel, attempt_log
from genwire.providers.probes import Probe, ProbeFailure, ProbeRequest, ProbeResult, check_dimensions
from genwire.providers.tools.handle import ListedTools
from genwire.providers.tracing import check_span

if TYPE_CHECKING:
    from collections.abc import Callable

Shape = dict[str, Any]


@dataclass
class _Group:
    """Targets that send identical requests: probed once, judged per alias."""

    kind: ResourceKind
    resource: Any
    probe: Probe  # registered beside the resource's factory
    shape: Shape | None = None  # None: the plain probe
    variant: str | None = None  # the (first) column whose requests have this shape
    shape_key: str | None = None  # the shape's canonical text
    endpoint: str | None = None  # a pool's endpoint (its member model is ``resource``)
    targets: list[TargetPlan] = field(default_factory=list)
    cache_keys: dict[str, str] = field(default_factory=dict)  # target -> key, when cacheable


@dataclass
class _Outcome:
    value: ProbeResult | None = None
    failure: tuple[ErrorClass, str] | None = None  # (error class, message)
    latency_s: float = 0.0
    attempts: int = 0


def _result(
    target: TargetPlan,
    aliases: list[str],
    status: Status,
    error_class: ErrorClass | None,
    message: str,
    latency_s: float = 0.0,
    attempts: int = 0,
    *,
    variant: str | None = None,
    cached: CachedResult | None = None,
    endpoint: str | None = None,
) -> CheckResult:
    return CheckResult(
        target=target.name,
        kind=target.kind,
        aliases=aliases,
        status=status,
        error_class=error_class,
        message=message,
        latency_s=round(latency_s, 4),
        attempts=attempts,
        used_by=list(target.used_by),
        variant=variant,
        cached=cached is not None,
        age_s=round(cached.age_s, 1) if cached is not None else None,
        endpoint=endpoint,
    )


def _canonical(shape: Shape) -> str:
    """The shape as a key. A structured output's ``name`` (the column's) is left out: two
    columns asking one model for the same schema send the same request otherwise."""
    fmt = shape.get("response_format")
    if isinstance(fmt, dict) and isinstance(fmt.get("json_schema"), dict):
        spec = {k: v for k, v in fmt["json_schema"].items() if k != "name"}
        shape = {**shape, "response_format": {**fmt, "json_schema": spec}}
    return json.dumps(shape, sort_keys=True, default=str)


def _lists_tools(shape: Shape | None) -> bool:
    return shape is not None and any(isinstance(v, ListedTools) for v in shape.values())


# (target, canonical shape or None, pool endpoint or None): a column calling one alias
# through two slots with different shapes gets two checks, both ``variant: <column>``,
# neither hiding the other; each endpoint of a pool gets its own.
Key = tuple[str, str | None, str | None]


class _Preflight:
    def __init__(
        self,
        container: WiredPipeline,
        cache: ProbeCache | None,
        on_check: Callable[[CheckResult], None] | None = None,
        blocked: dict[str, str] | None = None,
    ) -> None:
        self.container = container
        self.blocked = blocked or {}  # targets served by a server that did not start: why
        self.on_check = on_check
        self.told: set[Key] = set()
        self.judged: set[tuple[str, str | None]] = set()  # (pool alias, shape) judged
        self.settings = container.config.preflight
        self.models = container.config.models
        self.cache = cache
        self.semaphore = asyncio.Semaphore(self.settings.concurrency)
        self.deadline = 0.0

    def uses(self, targets: list[TargetPlan]) -> tuple[dict[str, list[tuple[str, Shape]]], set[str]]:
        """Per chat alias, (column, shape) of every column use that adds something to the
        model's requests; and the targets some use reaches without a shape, which get the
        plain probe. A column that reaches a target through no shaped chat slot (a
        registry view, an embedding or dataset slot, a generator that declares no shape)
        is such a use."""
        shaped: dict[str, list[tuple[str, Shape]]] = {}
        plain: set[str] = set()
        reached: dict[str, list[str]] = {}  # column -> the targets its provider reaches
        for target in targets:
            for name in target.used_by:
                reached.setdefault(name, []).append(target.name)
        for column in self.container.columns:
            shaped_here: set[str] = set()
            for slot in column.slots.values():
                chat = slot.kind is ResourceKind.CHAT_MODEL
                shape = self.shape_of(column, slot.slot, slot.resources[0]) if chat else {}
                if shape:
                    shaped.setdefault(slot.resources[0], []).append((column.name, shape))
                    shaped_here.add(slot.resources[0])
                else:
                    plain.update(slot.resources)
            # Read from the graph, not the slots: whatever else the column's provider
            # reaches is a use without a shape.
            plain.update(name for name in reached.get(column.name, ()) if name not in shaped_here)
        return shaped, plain

    def shape_of(self, column: ColumnWiring, slot: str, alias: str) -> Shape:
        """What the column's calls through ``slot`` add to ``alias``'s own params: a key
        the model's params already hold with that value adds nothing."""
        shape = column.generator_cls.request_shape(column.params, slot=slot, column=column.name) or {}
        model = self.models.get(alias)
        own = model.params if model is not None else {}
        shape = {k: v for k, v in shape.items() if v is not None and not (k in own and own[k] == v)}
        for key, value in shape.items():  # "the tools of slot X": of the server X is bound to
            if isinstance(value, ListedTools) and value.slot in column.slots:
                shape[key] = ListedTools(value.slot, column.slots[value.slot].resources[0])
        return shape

    def group(self, targets: list[TargetPlan], results: dict[Key, CheckResult]) -> list[_Group]:
        groups: dict[Hashable, _Group] = {}
        shapes, plain = self.uses(targets)
        for t in targets:
            if t.name in self.blocked:
                results[t.name, None, None] = _result(t, [t.name], "skipped", None, self.blocked[t.name])
                continue
            if not t.health_check:
                results[t.name, None, None] = _result(
                    t, [t.name], "skipped", None, "health_check: false in its model config"
                )
                continue
            try:
                resource = self.container.resource(t.name)
            except ConfigError:  # a setup error (the MCP SDK missing), not the target's fault: exit 2
                raise
            except GenwireError as exc:
                results[t.name, None, None] = _result(t, [t.name], "failed", ErrorClass.BAD_RESPONSE, str(exc))
                continue
            # A pool: each endpoint is probed with its own member model, as its own group.
            members = self.container.pool_members(t.name)
            endpoints: list[tuple[str | None, Any, Hashable]] = (
                [(e.name, handle, identity) for e, handle, identity in members]
                if members is not None
                else [(None, resource, self.container.endpoint_identity(t.name))]
            )
            variants: list[tuple[str | None, Shape | None]] = [(None, None)] if t.name in plain else []
            variants += shapes.get(t.name, [])
            for (variant, shape), (endpoint, member, identity) in itertools.product(variants, endpoints):
                shape_key = _canonical(shape) if shape is not None else None
                # The embedding client checks an answer against its alias's `dimensions`:
                # aliases expecting different lengths never share a probe.
                expects = self.models[t.name].dimensions if t.name in self.models else None
                group = groups.setdefault(
                    (t.kind, identity, shape_key, endpoint, expects),
                    _Group(t.kind, member, self.container.probe(t.name), shape, variant, shape_key, endpoint),
                )
                if t in group.targets:
                    continue  # two columns with one shape on one alias: one probe, one check
                group.targets.append(t)
                # A shape with a server's tools is never cached: the server may list others next time.
                if self.cache is not None and self.container.cacheable(t.name) and not _lists_tools(shape):
                    dims = self.models[t.name].dimensions if t.name in self.models else None
                    group.cache_keys[t.name] = cache_key(identity, shape, dims)
        return list(groups.values())

    def cached(self, group: _Group, results: dict[Key, CheckResult]) -> bool:
        """Report the group from the cache when every target of it has a fresh ok entry."""
        if self.cache is None or len(group.cache_keys) != len(group.targets):
            return False
        hits = {name: self.cache.get(key) for name, key in group.cache_keys.items()}
        if any(hit is None for hit in hits.values()):
            return False
        aliases = [t.name for t in group.targets]
        for t in group.targets:
            hit = hits[t.name]
            assert hit is not None
            results[t.name, group.shape_key, group.endpoint] = _result(
                t, aliases, "ok", None, hit.message, variant=group.variant, cached=hit, endpoint=group.endpoint
            )
        return True

    async def probe(self, group: _Group) -> _Outcome:
        outcome = _Outcome()
        attempts = Attempts()
        attempt_log.set(attempts)  # this task's own context: counts only its requests
        started = time.perf_counter()
        try:
            async with asyncio.timeout_at(self.deadline):
                async with self.semaphore:
                    started = time.perf_counter()
                    async with asyncio.timeout(self.settings.timeout_s):
                        outcome.value = await self.run_probe(group)
        except TimeoutError:
            waited = time.perf_counter() - started
            # Named as the config spells them: the reader raises the one that cut the check short.
            limits = (
                f"preflight.timeout_s {self.settings.timeout_s:g} per check, "
                f"preflight.deadline_s {self.settings.deadline_s:g} for all; raise them for a slow model"
            )
            if attempts.rate_limited is not None:  # it was waiting out a 429, not a silent server
                outcome.failure = (
                    ErrorClass.RATE_LIMITED,
                    f"still rate-limited after {waited:.1f}s ({limits}): {attempts.rate_limited}",
                )
            else:
                outcome.failure = (ErrorClass.TIMEOUT, f"no answer within {waited:.1f}s ({limits})")
        except ModelError as exc:
            outcome.failure = (exc.error_class, exc.message)
        except ProbeFailure as exc:
            outcome.failure = (exc.error_class, exc.message)
        except GenwireError as exc:
            outcome.failure = (ErrorClass.BAD_RESPONSE, str(exc))
        except Exception as exc:  # a fake or plugin-provided model may fail in any way
            outcome.failure = (ErrorClass.BAD_RESPONSE, f"{exception_text(exc)}")
        outcome.latency_s = time.perf_counter() - started
        outcome.attempts = max(attempts.count, 1)
        return outcome

    async def run_probe(self, group: _Group) -> ProbeResult:
        budgets = [self.models[t.name].probe_max_tokens for t in group.targets if t.name in self.models]
        shape = await self.listed_tools(group.shape) if _lists_tools(group.shape) else group.shape
        request = ProbeRequest(
            max_tokens=max(budgets, default=ProbeRequest.max_tokens),
            shape=shape,
            columns=sorted({c for t in group.targets for c in t.dataset_columns}),
        )
        return await group.probe(group.resource, request)

    async def listed_tools(self, shape: Shape | None) -> Shape:
        """The shape with each server's tools as the run sends them: the server is listed
        first (started once: its own check shares the listing), then its allowed tools
        with their real schemas go to the model."""
        resolved = dict(shape or {})
        for key, value in resolved.items():
            if not isinstance(value, ListedTools) or value.server is None:
                continue
            try:
                specs = await self.container.resource(value.server).list()
            except ModelError as exc:
                raise ProbeFailure(
                    exc.error_class,
                    f"not sent: the request carries the tools of tool server {value.server!r}, "
                    f"which could not be listed ({exc.message})",
                ) from None
            resolved[key] = [spec.openai() for spec in specs]
        return resolved

    def judge(self, group: _Group, outcome: _Outcome, results: dict[Key, CheckResult]) -> None:
        aliases = [t.name for t in group.targets]
        for t in group.targets:
            status: Status = "ok"
            error_class: ErrorClass | None = None
            message = ""
            if outcome.failure is not None:
                status, (error_class, message) = "failed", outcome.failure
            elif outcome.value is not None:
                message = outcome.value.message
                if outcome.value.dimensions is not None:  # judged per alias: each its own expectation
                    try:
                        check_dimensions(outcome.value.dimensions, self.expected_dimensions(t.name, group.resource))
                    except ProbeFailure as exc:
                        status, error_class, message = "failed", exc.error_class, exc.message
            results[t.name, group.shape_key, group.endpoint] = _result(
                t,
                aliases,
                status,
                error_class,
                message,
                outcome.latency_s,
                outcome.attempts,
                variant=group.variant,
                endpoint=group.endpoint,
            )
            key = group.cache_keys.get(t.name)
            if status == "ok" and key is not None and self.cache is not None:
                self.cache.put(key, message)  # failures are never cached

    def judge_pools(self, results: dict[Key, CheckResult]) -> None:
        """A pool passes a request shape when at least ``min_healthy`` of its endpoints
        passed it: its failed endpoints are then ``degraded`` (a warning, exit 0). Judged
        once every endpoint of it has a result (until then none of them is told)."""
        checks: dict[tuple[str, str | None], list[Key]] = {}
        for key in results:
            if key[2] is not None:
                checks.setdefault((key[0], key[1]), []).append(key)
        for pool, keys in checks.items():
            target = pool[0]
            if pool in self.judged or len(keys) < len(self.models[target].endpoint_list):
                continue
            self.judged.add(pool)
            needed = self.models[target].min_healthy
            healthy = sum(results[key].status == "ok" for key in keys)
            for key in keys:
                result = results[key]
                if result.status == "failed":
                    self.judge_member(results, key, healthy, needed)

    def judge_member(self, results: dict[Key, CheckResult], key: Key, healthy: int, needed: int) -> None:
        result = results[key]
        if healthy >= needed:
            message = f"{result.message} ({healthy} of the pool's endpoints passed; min_healthy {needed})"
            results[key] = result.model_copy(update={"status": "degraded", "message": message})
        else:
            message = f"{result.message} (only {healthy} of the pool's endpoints passed; min_healthy {needed})"
            results[key] = result.model_copy(update={"message": message})

    def tell(self, results: dict[Key, CheckResult]) -> None:
        if self.on_check is None:
            return
        for key, result in results.items():
            if key[2] is not None and (key[0], key[1]) not in self.judged:
                continue  # a pool's endpoint: told once its pool is judged
            if key not in self.told:
                self.told.add(key)
                self.on_check(result)

    def expected_dimensions(self, name: str, resource: Any) -> int | None:
        """The alias's configured ``dimensions``, else what the model says of itself (an
        override: a fake knows its dimensions)."""
        model = self.models.get(name)
        if model is not None and model.dimensions is not None:
            return model.dimensions
        return resource.dimensions if isinstance(resource, EmbeddingModel) else None

    def load_client_code(self, targets: Sequence[TargetPlan]) -> None:
        """Import what the probed models' clients send with (only theirs: an http://
        endpoint's lean client never needs aiohttp)."""
        clients = self.container.config.providers
        for name in sorted({t.provider for t in targets if t.provider in clients}):
            load = getattr(self.container.client(name), "load_client_code", None)
            if load is not None:
                load()

    async def run(self) -> PreflightReport:
        plan = self.container.plan()
        results: dict[Key, CheckResult] = {}
        # Resolving the targets builds their clients; their code is imported here too (an
        # https:// endpoint's aiohttp: ~0.15 s), not at the first probe: that is the process
        # starting, not a check, so the stage's clock and deadline start after it.
        groups = self.group(plan.targets, results)
        self.load_client_code(plan.targets)
        started = time.perf_counter()
        self.deadline = asyncio.get_running_loop().time() + self.settings.deadline_s
        groups = [g for g in groups if not self.cached(g, results)]
        self.judge_pools(results)
        self.tell(results)

        async def check(group: _Group) -> None:
            with check_span(group.kind, [t.name for t in group.targets], group.variant) as traced:
                outcome = await self.probe(group)
                if traced is not None and outcome.failure is not None:
                    traced.fail(outcome.failure[0].value, outcome.failure[1])
            self.judge(group, outcome, results)
            self.judge_pools(results)
            self.tell(results)  # as each finishes: an interrupted pre-flight still lists it

        await asyncio.gather(*(check(g) for g in groups))
        self.judge_pools(results)
        # Each target's plain check, then its shapes' checks in column order.
        order = {t.name: i for i, t in enumerate(plan.targets)}
        members = {  # a pool's endpoints in the order of its config
            (alias, e.name): i for alias, m in self.models.items() for i, e in enumerate(m.endpoint_list)
        }
        checks = sorted(
            results.values(),
            key=lambda c: (order[c.target], c.variant is not None, members.get((c.target, c.endpoint or ""), 0)),
        )
        return PreflightReport(
            ok=all(c.status != "failed" for c in checks),
            duration_s=round(time.perf_counter() - started, 4),
            checks=checks,
        )


async def run_preflight(
    container: WiredPipeline,
    *,
    use_cache: bool = True,
    cache_dir: Path | None = None,
    batch_providers: Sequence[str] | None = None,
    on_check: Callable[[CheckResult], None] | None = None,
) -> PreflightReport:
    """Check every target some wired generator can reach. Never raises for an unhealthy
    target: each gets a result, and ``report.ok`` says whether all passed.

    With ``preflight.cache_ttl_s`` set, ok model probes are read from and written to the
    probe cache (``cache_dir``, default the user cache directory) unless ``use_cache``
    is False. ``on_check`` receives each result as it is decided. ``batch_providers``
    (batch mode; default: the providers with ``batch.enabled``) also get a check of their
    Files and Batches API (``preflight.batch_check``)."""
    ttl = container.config.preflight.cache_ttl_s
    cache = ProbeCache(cache_dir or default_cache_dir(), ttl) if use_cache and ttl > 0 else None
    # Managed servers first (SPEC §23): their models are probed once they are ready.
    from genwire.preflight.servers import start_servers, with_server_checks

    server_checks, blocked = await start_servers(container, on_check)
    report = with_server_checks(await _Preflight(container, cache, on_check, blocked).run(), server_checks)
    container.mark_endpoints(report.endpoint_verdicts())  # no first wave to a failed endpoint
    if batch_providers is None and any(
        getattr(getattr(p, "batch", None), "enabled", False) for p in container.config.providers.values()
    ):
        from genwire.preflight.batch_check import batch_providers as enabled

        batch_providers = enabled(container, forced=False)
    if batch_providers:
        from genwire.preflight.batch_check import with_batch_checks

        report = await with_batch_checks(container, report, batch_providers)
    return report
