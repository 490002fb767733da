"""The genwire.yaml schema as pydantic models. Unknown keys are errors everywhere.

About 500 lines, kept whole: one role (the file's model, section by section), and the
sections refer to each other (providers to servers, models to providers, columns to
models); the self-contained sections already live beside it (``servers``, ``tools``,
``validators``, ``limits``)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)

from genwire.config.limits import too_many_rows
from genwire.config.servers import ServerConfig
from genwire.config.strict import StrictValues
from genwire.config.tools import ToolServerConfig
from genwire.config.validators import check_api_key, check_base_url, check_headers

NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_-]*$"
Name = Annotated[str, Field(pattern=NAME_PATTERN, max_length=128)]
# The output formats, defined once: the schema, the CLI and the writers all use these.
OUTPUT_SUFFIXES = (".jsonl", ".csv", ".parquet")


def output_suffix_problem(path: str) -> str | None:
    """Why ``path`` cannot be an output file, in words; None when its format is known."""
    suffix = "." + path.rsplit(".", 1)[-1] if "." in path.rsplit("/", 1)[-1] else ""
    if suffix.lower() in OUTPUT_SUFFIXES:
        return None
    known = ", ".join(OUTPUT_SUFFIXES[:-1]) + " or " + OUTPUT_SUFFIXES[-1]
    if not suffix:
        return f"{path!r} has no file extension; use {known}"
    return f"{suffix!r} is not a known format; use {known}"


def _output_path(value: str) -> str:
    problem = output_suffix_problem(value)
    if problem:
        raise ValueError(problem)
    return value


def _row_count(value: Any) -> Any:
    """Refuse a row count beyond what a row index holds, naming both (pydantic's own
    message for a huge number names neither the limit nor the field's meaning)."""
    if isinstance(value, int | float) and not isinstance(value, bool) and value == value:  # NaN: pydantic's error
        problem = too_many_rows(value)
        if problem:
            raise ValueError(problem)
    return value


def _finite_numbers(value: dict[str, Any]) -> dict[str, Any]:
    """A model's params go into every request as JSON, which has no NaN or Infinity."""

    def check(item: Any, where: str) -> None:
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"{where}: got {item!r}; a number sent in a request must be finite")
        if isinstance(item, dict):
            for key, inner in item.items():
                check(inner, f"{where}.{key}")
        elif isinstance(item, list):
            for index, inner in enumerate(item):
                check(inner, f"{where}[{index}]")

    for key, item in value.items():
        check(item, key)
    return value


def _not_reserved(value: str) -> str:
    if value.startswith("_"):
        raise ValueError(f"got {value!r}: names beginning with '_' are reserved for genwire; rename it")
    return value


# Names a Jinja2 template resolves itself (its globals and special names): a column so
# named could never be read by a later template, which would get the built-in instead.
TEMPLATE_NAMES = frozenset(
    {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "self", "loop", "caller", "varargs", "kwargs"}
)


def _column_name(value: str) -> str:
    _not_reserved(value)
    if value in TEMPLATE_NAMES or value.lower() in ("true", "false", "none"):
        raise ValueError(
            f"got {value!r}: templates read {value!r} as a built-in, never as this column; rename the column"
        )
    return value


UserName = Annotated[Name, AfterValidator(_not_reserved)]
PositiveInt = Annotated[int, Field(gt=0)]
PositiveFloat = Annotated[float, Field(gt=0)]


class StrictModel(StrictValues):
    """Unknown keys are errors; values are taken as written (``config.strict``)."""

    # Merged with StrictValues' config. Every number a user gives is finite (a price of
    # .inf, a cap of .nan): allow_inf_nan=False.
    model_config = ConfigDict(allow_inf_nan=False)


# --- providers -----------------------------------------------------------------------


class RateLimitConfig(StrictModel):
    """Pacing below an endpoint's published limits (either or both)."""

    requests_per_minute: PositiveFloat | None = None
    tokens_per_minute: PositiveFloat | None = None


def _retry_statuses(value: list[int]) -> list[int]:
    bad = [v for v in value if not 400 <= v <= 599]
    if bad:
        raise ValueError(f"got {bad}: retry_on holds HTTP error statuses (400-599)")
    return value


class BatchConfig(StrictModel):
    """Batch-API mode (SPEC §14): requests go out as OpenAI Batch files at half price."""

    enabled: bool = False
    completion_window: Annotated[str, Field(pattern=r"^[1-9][0-9]*h$")] = "24h"
    poll_interval_s: PositiveFloat = 30.0
    max_requests: Annotated[int, Field(gt=0, le=50_000)] = 50_000
    max_file_mb: Annotated[float, Field(gt=0, le=200)] = 190.0


class OpenAIProviderConfig(StrictModel):
    """Any OpenAI-compatible endpoint (NIM, vLLM, OpenAI, Ollama...)."""

    model_config = ConfigDict(json_schema_extra={"oneOf": [{"required": ["base_url"]}, {"required": ["server"]}]})

    kind: Literal["openai"]
    # One of the two: the endpoint's URL, or a managed server's name (SPEC §23), whose
    # URL genwire knows once it started it.
    base_url: Annotated[str, Field(pattern=r"^https?://\S+$"), AfterValidator(check_base_url)] | None = None
    server: Name | None = None
    api_key: Annotated[SecretStr | None, AfterValidator(check_api_key)] = None
    # Sent with every request after the Authorization header (which one may replace);
    # values are secrets: never printed, cached or repr'd.
    headers: Annotated[dict[str, SecretStr], AfterValidator(check_headers)] = Field(default_factory=dict)
    timeout_s: PositiveFloat = 60.0
    # A response body larger than this fails its request as bad_response (memory stays
    # bounded whatever a broken server or proxy sends). The largest legitimate answer:
    # 2,048 inputs (OpenAI's maximum) of 3,072-dim vectors as JSON text, each float up to
    # ~30 bytes with the separators and indentation some servers add: ~190 MB (base64:
    # 34 MB); the longest chat answers are a few MB.
    max_response_mb: PositiveFloat = 256.0
    max_concurrency: PositiveInt = 16
    retries: Annotated[int, Field(ge=0, le=20)] = 3
    backoff_s: Annotated[float, Field(ge=0)] = 0.5
    # Which statuses are retried (connect errors and timeouts always are). Add 500 behind
    # a gateway (LiteLLM) that reports a brief upstream outage as 500.
    retry_on: Annotated[list[int], AfterValidator(_retry_statuses)] = Field(
        default_factory=lambda: [429, 502, 503, 504]
    )
    rate_limit: RateLimitConfig | None = None
    # A request still rate-limited (429) after this long fails its row as rate_limited.
    rate_limit_wait_s: PositiveFloat = 300.0
    # false: no per-model brake or adaptive concurrency; each request retries a 429
    # on its own, bounded by ``retries`` (the behaviour before 0.2; a benchmark baseline).
    adapt_to_rate_limits: bool = True
    batch: BatchConfig = Field(default_factory=BatchConfig)
    # Which replica of ``server`` (SPEC §23, ``replicas: N``): set by ``config.replicas``.
    _replica: int = PrivateAttr(default=0)

    @model_validator(mode="after")
    def _base_url_or_server(self) -> OpenAIProviderConfig:
        if (self.base_url is None) == (self.server is None):
            raise ValueError("give either base_url: (an endpoint) or server: (a server under servers:), exactly one")
        return self

    @property
    def url(self) -> str:
        """The base URL; a provider of a managed server has it once the server started
        (``with_url``)."""
        if self.base_url is None:
            raise RuntimeError(f"the base URL of server {self.server!r} is known once it started")
        return self.base_url

    @property
    def replica(self) -> int:
        return self._replica

    def for_replica(self, index: int) -> OpenAIProviderConfig:
        """This provider served by replica ``index`` of its server."""
        copy = self.model_copy()
        copy._replica = index
        return copy

    def with_url(self, base_url: str) -> OpenAIProviderConfig:
        """This provider pointed at ``base_url`` (a managed server's, once started)."""
        return self.model_copy(update={"base_url": base_url})

    @model_validator(mode="after")
    def _one_credential(self) -> OpenAIProviderConfig:
        from yarl import URL  # loaded by the base_url check already

        if self.base_url is None:  # a managed server's URL carries no credentials
            return self
        url = URL(self.base_url)
        if self.api_key is not None and (url.user is not None or url.password is not None):
            raise ValueError(
                "base_url carries credentials (user:password@) and api_key is set: give one, "
                "the api_key (sent as Authorization) or the URL's credentials"
            )
        return self


class LocalProviderConfig(StrictModel):
    """Embedded offline models from weights shipped in installed packages (genwire[local])."""

    kind: Literal["local"]
    max_concurrency: PositiveInt = 2  # inference calls in flight; they share the CPU


ProviderConfig = Annotated[OpenAIProviderConfig | LocalProviderConfig, Field(discriminator="kind")]


# --- models ----------------------------------------------------------------------------


ModelKind = Literal["chat", "embedding"]  # the one vocabulary for a model's kind


class PriceConfig(StrictModel):
    """What a model costs, in USD per million tokens (SPEC §16). ``batch_discount``
    multiplies the price of requests sent through batches (1: no discount)."""

    input_per_mtok: Annotated[float, Field(ge=0)]
    output_per_mtok: Annotated[float, Field(ge=0)] = 0.0
    batch_discount: Annotated[float, Field(gt=0, le=1)] = 1.0


class EndpointConfig(StrictModel):
    """One endpoint of a model pool (SPEC §17): a provider, optionally another model name."""

    provider: Name
    model: Annotated[str, Field(min_length=1)] | None = None  # None: the alias's model
    weight: PositiveFloat = 1.0
    role: Literal["primary", "fallback"] = "primary"


# What ModelConfig's validators check, said in JSON Schema too, so an editor flags it as
# `genwire validate` does: `provider` or `endpoints` (exactly one; `min_healthy` only with
# `endpoints`, which hold a primary), `dimensions` only for embeddings.
_ONE_ENDPOINT_OR_A_POOL: dict[str, Any] = {
    "allOf": [
        {
            "if": {"required": ["endpoints"], "properties": {"endpoints": {"type": "array"}}},
            "then": {
                "properties": {
                    "provider": {"type": "null"},
                    "endpoints": {
                        "contains": {"not": {"required": ["role"], "properties": {"role": {"const": "fallback"}}}}
                    },
                }
            },
            "else": {
                "required": ["provider"],
                "properties": {
                    "provider": {"type": "string"},
                    "min_healthy": {"anyOf": [{"const": 1}, {"type": "string"}]},
                },
            },
        },
        {
            "if": {"required": ["kind"], "properties": {"kind": {"const": "chat"}}},
            "then": {"properties": {"dimensions": {"type": "null"}}},
        },
    ]
}


class ModelConfig(StrictModel):
    model_config = ConfigDict(json_schema_extra=_ONE_ENDPOINT_OR_A_POOL)

    provider: Name | None = None
    # Several endpoints for one model, instead of ``provider`` (SPEC §17).
    endpoints: Annotated[list[EndpointConfig], Field(min_length=1)] | None = None
    min_healthy: PositiveInt = 1
    model: Annotated[str, Field(min_length=1)]
    kind: ModelKind
    params: Annotated[dict[str, Any], AfterValidator(_finite_numbers)] = Field(default_factory=dict)
    dimensions: PositiveInt | None = None
    health_check: bool = True
    probe_max_tokens: PositiveInt = 16  # raise for reasoning models that think before answering
    price: PriceConfig | None = None  # none here nor in pricing.source: cost "unknown", never 0
    # The most tokens one answer may have: every request's output worst case under a budget
    # (else the price table's max_output_tokens; else max_tokens, or a conservative default).
    max_output_tokens: PositiveInt | None = None

    @model_validator(mode="after")
    def _dimensions_only_for_embeddings(self) -> ModelConfig:
        if self.dimensions is not None and self.kind != "embedding":
            raise ValueError("dimensions is only valid for kind: embedding")
        return self

    @model_validator(mode="after")
    def _provider_or_endpoints(self) -> ModelConfig:
        if (self.provider is None) == (self.endpoints is None):
            raise ValueError("give either provider: (one endpoint) or endpoints: (a pool), exactly one of them")
        if self.endpoints is None:
            if self.min_healthy != 1:
                raise ValueError("min_healthy is only valid with endpoints:")
            return self
        if not any(e.role == "primary" for e in self.endpoints):
            raise ValueError("endpoints: needs at least one endpoint with role: primary")
        if self.min_healthy > len(self.endpoints):
            raise ValueError(f"min_healthy is {self.min_healthy} but there are only {len(self.endpoints)} endpoints")
        names = [e.name for e in self.endpoint_list]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"endpoint {repeated[0]!r} is listed twice")
        return self

    @property
    def endpoint_list(self) -> list[PoolEndpoint]:
        """Every endpoint of the alias with its model resolved: one for ``provider:``."""
        if self.endpoints is None:
            assert self.provider is not None  # the validator allows nothing else
            return [PoolEndpoint(self.provider, self.provider, self.model, 1.0, "primary")]
        return [
            PoolEndpoint(_endpoint_name(e, self.model), e.provider, e.model or self.model, e.weight, e.role)
            for e in self.endpoints
        ]

    def for_endpoint(self, endpoint: PoolEndpoint) -> ModelConfig:
        """The config of one pool member: this alias on ``endpoint`` alone."""
        update = {"model": endpoint.model, "provider": endpoint.provider, "endpoints": None, "min_healthy": 1}
        return self.model_copy(update=update)

    @property
    def providers(self) -> list[str]:
        """The provider names the alias uses (one, or its pool's)."""
        return list(dict.fromkeys(e.provider for e in self.endpoint_list))


@dataclass(frozen=True)
class PoolEndpoint:
    """An endpoint with its model resolved (the alias's when the endpoint names none)."""

    name: str  # how reports name it: "provider", or "provider/model" for another model
    provider: str
    model: str
    weight: float
    role: Literal["primary", "fallback"]


def _endpoint_name(endpoint: EndpointConfig, alias_model: str) -> str:
    model = endpoint.model
    return endpoint.provider if model is None or model == alias_model else f"{endpoint.provider}/{model}"


# --- datasets --------------------------------------------------------------------------


class FileDatasetConfig(StrictModel):
    kind: Literal["jsonl", "csv", "parquet"]
    path: Annotated[str, Field(min_length=1)]


class DocumentsDatasetConfig(StrictModel):
    kind: Literal["documents"]
    path: Annotated[str, Field(min_length=1)]
    chunk_chars: Annotated[int, Field(ge=50, le=1_000_000)] = 800


DatasetConfig = Annotated[FileDatasetConfig | DocumentsDatasetConfig, Field(discriminator="kind")]


# --- pipeline --------------------------------------------------------------------------


class DefaultsConfig(StrictModel):
    chat_model: Name | None = None
    embedding_model: Name | None = None
    dataset: Name | None = None
    model_registry: list[Name] | Literal["*"] | None = None
    tools: Name | None = None


_NAME_RE = re.compile(NAME_PATTERN)


def _check_binding(value: Any) -> str | list[str]:
    """A slot binding: one resource name, a list of model aliases, or "*" (all models)."""
    names = value if isinstance(value, list) else [value]
    if value == "*" or (names and all(isinstance(n, str) and _NAME_RE.match(n) for n in names)):
        binding: str | list[str] = value
        return binding
    raise ValueError('expected a resource name, a list of model aliases, or "*"')


Binding = Annotated[Any, AfterValidator(_check_binding)]


class ColumnConfig(StrictModel):
    # No '-' in column names: templates read columns as Jinja names (``{{ question }}``).
    name: Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$", max_length=128), AfterValidator(_column_name)]
    generator: Annotated[str, Field(min_length=1)]
    resources: dict[UserName, Binding] = Field(default_factory=dict)
    params: dict[str, Any] = Field(default_factory=dict)


class BudgetConfig(StrictModel):
    """A hard budget for the run (SPEC §16): either or both."""

    max_cost_usd: PositiveFloat | None = None
    max_tokens: PositiveInt | None = None


class CardConfig(StrictModel):
    """What the dataset card (SPEC §24) says beyond how the data was made."""

    title: Annotated[str, Field(min_length=1)] | None = None
    description: str | None = None
    license: Annotated[str, Field(min_length=1)] | None = None  # a Hub license id: apache-2.0, cc-by-4.0...
    task_categories: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    language: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)


class PipelineConfig(StrictModel):
    num_records: Annotated[PositiveInt, BeforeValidator(_row_count)] = 10
    seed: int = 0
    output: Annotated[str, Field(min_length=1), AfterValidator(_output_path)] = "out/dataset.jsonl"
    batch_size: Annotated[int, Field(gt=0, le=100_000)] = 64
    max_failure_rate: Annotated[float, Field(ge=0, le=1)] = 0.1
    budget: BudgetConfig | None = None
    # With a gate (SPEC §21): candidates tried at most (None: 10 x num_records). Not in the
    # fingerprint: a higher cap goes on from the same checkpoint.
    max_candidates: Annotated[PositiveInt, BeforeValidator(_row_count)] | None = None
    columns: Annotated[list[ColumnConfig], Field(min_length=1)]
    card: CardConfig | None = None  # the dataset card's title, license...: not in the fingerprint

    @field_validator("columns")
    @classmethod
    def _unique_names(cls, columns: list[ColumnConfig]) -> list[ColumnConfig]:
        seen: set[str] = set()
        for column in columns:
            if column.name in seen:
                raise ValueError(f"column name {column.name!r} is used twice")
            seen.add(column.name)
        return columns


class PreflightConfig(StrictModel):
    timeout_s: PositiveFloat = 20.0
    deadline_s: PositiveFloat = 60.0
    concurrency: PositiveInt = 32
    # Seconds an ok model probe is trusted from the cache (0: no cache).
    cache_ttl_s: Annotated[float, Field(ge=0)] = 0.0


class CacheConfig(StrictModel):
    """The response cache (a rerun pays only for the requests that changed)."""

    enabled: bool = True
    # Where it lives; relative paths resolve against the config file's directory.
    # Default: .genwire/cache beside the config file (a config given as a dict has no
    # file: its cache is off unless dir is given).
    dir: Annotated[str, Field(min_length=1)] | None = None


class PricingConfig(StrictModel):
    """A JSON price table in LiteLLM's model_prices_and_context_window.json format, for
    models without ``price:``; a relative path resolves against the config's directory."""

    source: Annotated[str, Field(min_length=1)]


# --- the file --------------------------------------------------------------------------


class GenwireConfig(StrictModel):
    providers: dict[Name, ProviderConfig] = Field(default_factory=dict)
    models: dict[Name, ModelConfig] = Field(default_factory=dict)
    datasets: dict[Name, DatasetConfig] = Field(default_factory=dict)
    tools: dict[Name, ToolServerConfig] = Field(default_factory=dict)  # MCP servers (SPEC §18)
    servers: dict[Name, ServerConfig] = Field(default_factory=dict)  # inference servers genwire runs (SPEC §23)
    defaults: DefaultsConfig = Field(default_factory=DefaultsConfig)
    pipeline: PipelineConfig
    preflight: PreflightConfig = Field(default_factory=PreflightConfig)
    cache: CacheConfig = Field(default_factory=CacheConfig)
    pricing: PricingConfig | None = None
