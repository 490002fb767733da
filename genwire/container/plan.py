"""The wiring plan: what each column's generator gets, and what the pre-flight checks."""

from __future__ import annotations

from pydantic import BaseModel

from genwire.config.loader import LoadedConfig
from genwire.container.graph import ProviderGraph
from genwire.container.wiring import BindingSource, ColumnWiring
from genwire.generators.findings import Finding
from genwire.generators.metadata import ResourceKind


class SlotPlan(BaseModel):
    slot: str
    kind: ResourceKind
    resources: list[str]
    source: BindingSource


class ColumnPlan(BaseModel):
    name: str
    generator: str
    reads: list[str]
    slots: list[SlotPlan]
    gate: bool = False  # a gate (SPEC §21): it keeps or drops rows, its value is not written


class TargetPlan(BaseModel):
    name: str
    kind: ResourceKind
    provider: str | None  # model provider name, mcp/<transport> for tool servers; None for datasets
    model: str | None
    health_check: bool
    used_by: list[str]
    dataset_columns: list[str]  # columns the pipeline reads from this dataset
    provider_kinds: dict[str, str] = {}  # a model's providers, in order: name -> kind (openai, ...)
    path: str | None = None  # a dataset's file or Hub id


class ServerPlan(BaseModel):
    """A managed server (SPEC §23): what serves through it, down to the columns."""

    name: str
    kind: str
    model: str
    providers: list[str]
    models: list[str]  # the aliases a wired column reaches through it
    used_by: list[str]
    started: bool  # some wired model reaches it: started by the pre-flight (else never)
    replicas: int = 1


class WiringPlan(BaseModel):
    columns: list[ColumnPlan]
    targets: list[TargetPlan]
    unreachable: list[str]  # defined resources no column can reach: never probed
    servers: list[ServerPlan] = []  # managed servers: server -> provider -> model -> columns
    findings: list[Finding] = []  # the static check's warnings and notes (SPEC §15); errors stop boot

    def target(self, name: str) -> TargetPlan:
        for t in self.targets:
            if t.name == name:
                return t
        raise KeyError(name)


def _dataset_reads(wirings: list[ColumnWiring]) -> dict[str, set[str]]:
    """Dataset name -> columns read from it: by generators that declare them, and by
    later columns reading ``col.field`` of a column that emits the dataset's rows."""
    needed: dict[str, set[str]] = {}
    row_source: dict[str, str] = {}  # column -> dataset whose rows it emits as values
    for w in wirings:
        for slot, cols in w.dataset_columns.items():
            sw = w.slots.get(slot)
            if sw is not None:
                needed.setdefault(sw.resources[0], set()).update(cols)
        source_slot = w.generator_cls.row_source_slot
        if source_slot is not None and source_slot in w.slots:
            row_source[w.name] = w.slots[source_slot].resources[0]
    for w in wirings:
        for ref in w.reads:
            root, _, fld = ref.partition(".")
            if fld and root in row_source:
                needed.setdefault(row_source[root], set()).add(fld.split(".", 1)[0])
    return needed


def build_plan(loaded: LoadedConfig, wirings: list[ColumnWiring], graph: ProviderGraph) -> WiringPlan:
    cfg = loaded.config
    used_by: dict[str, list[str]] = {}
    for w in wirings:
        for name in graph.reachable(w.name):
            used_by.setdefault(name, []).append(w.name)
    reads = _dataset_reads(wirings)
    targets = []
    for name, target in graph.targets.items():
        if name not in used_by:
            continue
        model = cfg.models.get(name)
        tool = cfg.tools.get(name)
        # A pool names its providers; a tool server mcp/<transport>, and the command or URL.
        where: tuple[str, str] | None = None
        if model is not None:
            where = (", ".join(model.providers), model.model)
        elif tool is not None:
            where = (f"mcp/{tool.transport}", tool.display())
        dataset = cfg.datasets.get(name)
        targets.append(
            TargetPlan(
                name=name,
                kind=target.kind,
                provider=where[0] if where else None,
                model=where[1] if where else None,
                health_check=model.health_check if model else tool.health_check if tool else True,
                used_by=used_by[name],
                dataset_columns=sorted(reads.get(name, set())),
                provider_kinds={p: str(getattr(cfg.providers.get(p), "kind", "")) for p in model.providers}
                if model is not None
                else {},
                path=dataset.path if dataset is not None else None,
            )
        )
    columns = [
        ColumnPlan(
            name=w.name,
            generator=w.generator_name,
            reads=sorted(w.reads),
            gate=w.generator_cls.metadata.gate,
            slots=[
                SlotPlan(slot=s.slot, kind=s.kind, resources=list(s.resources), source=s.source)
                for s in w.slots.values()
            ],
        )
        for w in wirings
    ]
    unreachable = [n for n in graph.targets if n not in used_by]
    findings = list(dict.fromkeys(f for w in wirings for f in w.source_findings))
    servers = _server_plans(loaded, targets) if cfg.servers else []
    return WiringPlan(columns=columns, targets=targets, unreachable=unreachable, findings=findings, servers=servers)


def _server_plans(loaded: LoadedConfig, targets: list[TargetPlan]) -> list[ServerPlan]:
    """Each server with the providers, reached models and columns it serves (the targets
    are what some wired generator reaches: a server none of them uses never starts)."""
    cfg = loaded.config
    plans = []
    for name, server in cfg.servers.items():
        providers = [p for p, pcfg in cfg.providers.items() if getattr(pcfg, "server", None) == name]
        reached = [t for t in targets if t.name in cfg.models and set(cfg.models[t.name].providers) & set(providers)]
        used_by = list(dict.fromkeys(c for t in reached for c in t.used_by))
        plans.append(
            ServerPlan(
                name=name,
                kind=server.kind,
                model=server.model,
                providers=providers,
                models=[t.name for t in reached],
                used_by=used_by,
                started=bool(reached),
                replicas=server.replicas,
            )
        )
    return plans
