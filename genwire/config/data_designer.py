"""NeMo Data Designer's own files, read without the data-designer package (SPEC §13).

``model_providers.yaml`` and ``model_configs.yaml`` (and, optionally, a pipeline config
whose columns name model aliases) are read with genwire's YAML loader, so every problem
is located (``file:line:col key.path``) and shows what was written. genwire's models of
those files keep only the fields the pre-flight needs (``extra="ignore"``), with Data
Designer's rules for them (checked against data-designer v0.9.0rc1; the layout is the
same since v0.7.0, and the ``default:`` provider of older files is honoured).

``load_data_designer`` turns a setup into a genwire config: one ``openai`` provider per
probed alias (its endpoint, key, ``extra_headers``, ``timeout`` and
``max_parallel_requests``, which are Data Designer's own settings and never part of a
request body) and one model per alias whose ``params`` are the request fields Data
Designer sends (``temperature``, ``top_p``, ``max_tokens``; ``encoding_format``,
``dimensions``; ``extra_body`` merged in, the provider's over the model's). Aliases that
are not probed (image models, a provider genwire cannot speak, a key whose environment
variable is unset) come back as ``Unprobed`` results with the reason.

Nothing here reads the process environment or the home directory: both are parameters.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from genwire.config.loader import (
    LoadedConfig,
    Path_,
    SourceMap,
    parse_yaml,
    read_text,
    validate_data,
    validation_problems,
)
from genwire.config.messages import shown
from genwire.config.schema import ModelKind
from genwire.config.validators import check_base_url, check_headers
from genwire.errors import ConfigError, ErrorClass

HOME_ENV_VAR = "DATA_DESIGNER_HOME"
HOME_DIR_NAME = ".data-designer"
PROVIDERS_FILE = "model_providers.yaml"
MODEL_CONFIGS_FILE = "model_configs.yaml"
DEFAULT_TIMEOUT_S = 60  # Data Designer's request timeout when an alias sets none
# A chat alias without max_tokens is sent none by Data Designer; the probe needs a cap,
# and one this size leaves a reasoning model room to think before its one word.
UNCAPPED_PROBE_TOKENS = 1024
GENERATOR = "data-designer-columns"  # the stand-in column's generator (genwire.preflight.data_designer)
STAND_IN_COLUMN = "data_designer"
MAX_PROBES_IN_FLIGHT = 256
CHECKED_PROVIDER_TYPES = ("openai",)
KNOWN_PROVIDER_TYPES = ("openai", "anthropic")  # what Data Designer itself accepts

DDKind = Literal["chat", "embedding", "image"]


def data_designer_dir(directory: Path | None, *, env: Mapping[str, str], home: Path) -> Path:
    """Where the files are: ``directory``, else ``$DATA_DESIGNER_HOME``, else
    ``~/.data-designer`` (Data Designer's own order). ``env`` and ``home`` are given by
    the caller (the CLI passes the process's)."""
    if directory is not None:
        return directory.expanduser()
    configured = env.get(HOME_ENV_VAR)
    return Path(configured).expanduser() if configured else home / HOME_DIR_NAME


# --- the files, as genwire reads them ----------------------------------------------------


class _Lenient(BaseModel):
    """Data Designer's fields genwire does not use are ignored, not refused."""

    model_config = ConfigDict(extra="ignore", frozen=True)


Text = Annotated[str, Field(min_length=1)]
Headers = Annotated[dict[str, SecretStr], AfterValidator(check_headers)]


class DDProvider(_Lenient):
    name: Text
    endpoint: Annotated[str, Field(pattern=r"^https?://\S+$"), AfterValidator(check_base_url)]
    provider_type: str = "openai"
    api_key: SecretStr | None = None  # an environment variable's name, or the key itself
    extra_body: dict[str, Any] | None = None
    extra_headers: Headers | None = None

    @field_validator("provider_type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        value = value.lower()
        if value not in KNOWN_PROVIDER_TYPES:
            raise ValueError(f"got {value!r}; Data Designer supports 'openai' or 'anthropic'")
        return value


class DDProvidersFile(_Lenient):
    providers: Annotated[list[DDProvider], Field(min_length=1)]
    default: str | None = None  # Data Designer before 0.7: the provider of aliases that name none


class DDModelConfig(_Lenient):
    alias: Text
    model: Text
    provider: Text | None = None
    inference_parameters: dict[str, Any] | None = None
    skip_health_check: bool = False


class DDModelConfigsFile(_Lenient):
    model_configs: list[DDModelConfig]


def _sampled_top(value: Any, low: float, high: float, name: str) -> float | None:
    """A fixed value, or the largest a distribution can give (what the probe sends: the
    value an endpoint is likeliest to refuse); every value checked against Data
    Designer's range for ``name``."""
    if value is None:
        return None
    out_of_range = ValueError(f"{name} must be between {low:g} and {high:g}")
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not low <= value <= high:
            raise out_of_range
        return float(value)
    params = value.get("params") if isinstance(value, dict) else None
    if not isinstance(params, dict):
        raise ValueError(f"expected a number or a distribution ({{distribution_type, params}}), got {shown(value)}")
    kind = value.get("distribution_type") or ("manual" if "values" in params else "uniform")
    if kind == "uniform":
        start, end = _number(params.get("low")), _number(params.get("high"))
        if start is None or end is None or start >= end:
            raise ValueError("a uniform distribution needs numbers low < high in its params")
        points: list[float | None] = [start, end]
    elif kind == "manual":
        values = params.get("values")
        points = [_number(v) for v in values] if isinstance(values, list) else []
        if not points or None in points:
            raise ValueError("a manual distribution needs a non-empty list of numbers in params.values")
    else:
        raise ValueError(f"distribution_type: got {kind!r}; expected 'uniform' or 'manual'")
    numbers = [p for p in points if p is not None]
    if min(numbers) < low or max(numbers) > high:
        raise out_of_range
    return max(numbers)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


class _BaseParams(_Lenient):
    """What every generation type carries; these configure the provider, never a body."""

    max_parallel_requests: Annotated[int, Field(ge=1)] = 4
    timeout: Annotated[int, Field(ge=1)] | None = None
    extra_body: dict[str, Any] | None = None


class DDChatParams(_BaseParams):
    temperature: Any = None
    top_p: Any = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None

    @field_validator("temperature")
    @classmethod
    def _temperature(cls, value: Any) -> float | None:
        return _sampled_top(value, 0.0, 2.0, "temperature")

    @field_validator("top_p")
    @classmethod
    def _top_p(cls, value: Any) -> float | None:
        return _sampled_top(value, 0.0, 1.0, "top_p")

    def body(self) -> dict[str, Any]:
        fields = {"temperature": self.temperature, "top_p": self.top_p, "max_tokens": self.max_tokens}
        return {k: v for k, v in fields.items() if v is not None}


class DDEmbeddingParams(_BaseParams):
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(gt=0)] | None = None

    def body(self) -> dict[str, Any]:
        fields = {"encoding_format": self.encoding_format, "dimensions": self.dimensions}
        return {k: v for k, v in fields.items() if v is not None}


class DDImageParams(_BaseParams):
    def body(self) -> dict[str, Any]:
        return {}


GENERATION_TYPES = ("chat-completion", "embedding", "image")


def generation_kind(params: Mapping[str, Any]) -> DDKind:
    """Data Designer's rule: ``generation_type``, else ``encoding_format`` or
    ``dimensions`` make an embedding model, else chat."""
    given = params.get("generation_type")
    if given is not None and given not in GENERATION_TYPES:
        raise ValueError(f"got {shown(given)}; expected one of {', '.join(GENERATION_TYPES)}")
    if given == "image":
        return "image"
    if given == "embedding" or "encoding_format" in params or "dimensions" in params:
        if given == "chat-completion":
            raise ValueError("encoding_format and dimensions are for embedding models (generation_type: embedding)")
        return "embedding"
    return "chat"


_PARAMS_MODELS: dict[DDKind, type[DDChatParams | DDEmbeddingParams | DDImageParams]] = {
    "chat": DDChatParams,
    "embedding": DDEmbeddingParams,
    "image": DDImageParams,
}


# --- what load_data_designer returns ---------------------------------------------------


@dataclass(frozen=True)
class Unprobed:
    """An alias reported without a request: skipped, or failed before any could be sent."""

    alias: str
    kind: DDKind
    status: Literal["skipped", "failed"]
    message: str
    error_class: ErrorClass | None = None


@dataclass(frozen=True)
class DataDesignerSetup:
    """A Data Designer setup as genwire will check it."""

    directory: Path
    aliases: list[str]  # the checked aliases, in file order
    loaded: LoadedConfig | None  # genwire's config of the probed aliases (None: nothing to probe)
    names: dict[str, str]  # genwire model name -> Data Designer alias
    used_by: dict[str, list[str]]  # alias -> the pipeline columns that name it
    unprobed: list[Unprobed] = field(default_factory=list)


# --- reading ---------------------------------------------------------------------------


@dataclass
class _File:
    """One parsed file and its positions; problems are collected, raised together."""

    data: Any
    smap: SourceMap
    problems: list[str] = field(default_factory=list)

    @classmethod
    def read(cls, path: Path, needs: str) -> _File:
        data, locations = parse_yaml(read_text(path), str(path), substitute=False, needs=needs)
        return cls(data, SourceMap(str(path), path.parent, locations))

    def where(self, path: Path_) -> str:
        return self.smap.where(path)

    def problem(self, path: Path_, message: str) -> None:
        self.problems.append(f"{self.where(path)}: {message}")

    def validate(self, model: type[BaseModel], data: Any, prefix: Path_ = ()) -> Any:
        try:
            return model.model_validate(data)
        except ValidationError as exc:
            self.problems += validation_problems(exc, self.smap, data, model, prefix)
            return None

    def mapping(self, needs: str) -> dict[str, Any]:
        if not isinstance(self.data, dict):
            where = f"{self.smap.source}:1:1"
            raise ConfigError(f"{where}: the top level must be a mapping with {needs}, got {shown(self.data)}")
        return self.data


def _required(path: Path, what: str) -> Path:
    if not path.is_file():
        hint = " (a directory)" if path.is_dir() else ""
        raise ConfigError(f"{path}: no such file{hint}; Data Designer keeps {what} there")
    return path


@dataclass
class _Alias:
    config: DDModelConfig
    kind: DDKind
    params: DDChatParams | DDEmbeddingParams | DDImageParams
    provider: DDProvider
    path: Path_  # its entry's key path in its file
    file: _File


def _read_providers(directory: Path) -> tuple[dict[str, DDProvider], str | None]:
    file = _File.read(_required(directory / PROVIDERS_FILE, "model providers"), "a providers: list")
    parsed = file.validate(DDProvidersFile, file.mapping("a providers: list"))
    if parsed is None:
        raise ConfigError(file.problems)
    providers: dict[str, DDProvider] = {}
    for i, provider in enumerate(parsed.providers):
        if provider.name in providers:
            file.problem(("providers", i, "name"), f"provider name {provider.name!r} is used twice")
        providers.setdefault(provider.name, provider)
    if parsed.default is not None and parsed.default not in providers:
        file.problem(("default",), f"unknown provider {parsed.default!r} (providers: {', '.join(providers)})")
    if file.problems:
        raise ConfigError(file.problems)
    return providers, parsed.default


def _read_aliases(
    file: _File, prefix: Path_, entries: Any, providers: Mapping[str, DDProvider], default: str | None
) -> dict[str, _Alias]:
    parsed = file.validate(DDModelConfigsFile, {"model_configs": entries}, prefix[:-1])
    if parsed is None:
        raise ConfigError(file.problems)
    aliases: dict[str, _Alias] = {}
    for i, mc in enumerate(parsed.model_configs):
        path = (*prefix, i)
        raw = mc.inference_parameters or {}
        try:
            kind = generation_kind(raw)
        except ValueError as exc:
            file.problem((*path, "inference_parameters", "generation_type"), str(exc))
            continue
        params = file.validate(_PARAMS_MODELS[kind], raw, (*path, "inference_parameters"))
        name = mc.provider or default or (next(iter(providers)) if len(providers) == 1 else None)
        if name is None:
            file.problem(
                (*path, "provider"),
                f"required key is missing (and {PROVIDERS_FILE} has no default: provider to fall back on)",
            )
            continue
        if name not in providers:
            file.problem(
                (*path, "provider"), f"unknown provider {name!r} ({PROVIDERS_FILE} defines: {', '.join(providers)})"
            )
            continue
        if mc.alias in aliases:
            first = file.where(aliases[mc.alias].path)
            file.problem((*path, "alias"), f"alias {mc.alias!r} is defined twice (first at {first})")
            continue
        if params is not None:
            aliases[mc.alias] = _Alias(mc, kind, params, providers[name], path, file)
    if file.problems:
        raise ConfigError(file.problems)
    return aliases


def _column_aliases(column: dict[str, Any]) -> list[tuple[str, Any]]:
    """(key, value) of every key naming a model: ``model_alias``, and a plugin's
    ``<role>_model_alias`` (e.g. ``judge_model_alias``)."""
    return [(k, v) for k, v in column.items() if k == "model_alias" or k.endswith("_model_alias")]


@dataclass
class _Pipeline:
    file: _File
    prefix: Path_  # ("data_designer",) in the full format, () in the shorthand
    columns: list[Any]
    inline: dict[str, _Alias] | None  # its own model_configs, if it has any
    used_by: dict[str, list[str]]  # alias -> the columns naming it

    def check_defined(self, known: Mapping[str, _Alias], source: str) -> None:
        """A column naming an alias no model config defines is a located error."""
        file = self.file
        for i, column in enumerate(self.columns):
            if not isinstance(column, dict):
                continue
            for key, alias in _column_aliases(column):
                if alias in known:
                    continue
                close = difflib.get_close_matches(alias, list(known), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                file.problem(
                    (*self.prefix, "columns", i, key),
                    f"no model config defines alias {alias!r}{hint}; {source} defines: {', '.join(known) or 'none'}",
                )
        if file.problems:
            raise ConfigError(file.problems)


def _read_pipeline(path: Path, providers: Mapping[str, DDProvider], default: str | None) -> _Pipeline:
    """The pipeline's own model_configs (Data Designer uses them instead of the home
    file's when given) and, per alias, the columns that name it."""
    file = _File.read(path, "a columns: list")
    top = file.mapping("a columns: list")
    prefix: Path_ = ()
    if "data_designer" in top:
        prefix = ("data_designer",)
        top = top["data_designer"]
        if not isinstance(top, dict):
            raise ConfigError(f"{file.where(prefix)}: expected a mapping, got {shown(top)}")
    columns = top.get("columns")
    if not isinstance(columns, list):
        got = "it is missing" if columns is None else f"got {shown(columns)}"
        raise ConfigError(f"{file.where((*prefix, 'columns'))}: expected a list of columns; {got}")
    inline = None
    if top.get("model_configs"):
        inline = _read_aliases(file, (*prefix, "model_configs"), top["model_configs"], providers, default)
    used_by: dict[str, list[str]] = {}
    for i, column in enumerate(columns):
        if not isinstance(column, dict):
            file.problem((*prefix, "columns", i), f"expected a mapping, got {shown(column)}")
            continue
        name = column.get("name")
        label = name if isinstance(name, str) else f"columns[{i}]"
        for key, alias in _column_aliases(column):
            if not isinstance(alias, str) or not alias:
                file.problem((*prefix, "columns", i, key), f"expected a model alias, got {shown(alias)}")
            elif label not in used_by.setdefault(alias, []):
                used_by[alias].append(label)
    if file.problems:
        raise ConfigError(file.problems)
    return _Pipeline(file, prefix, columns, inline, used_by)


def _read_model_configs(directory: Path, providers: Mapping[str, DDProvider], default: str | None) -> dict[str, _Alias]:
    file = _File.read(_required(directory / MODEL_CONFIGS_FILE, "model configs"), "a model_configs: list")
    entries = file.mapping("a model_configs: list").get("model_configs")
    if not isinstance(entries, list):
        got = "it is missing" if entries is None else f"got {shown(entries)}"
        raise ConfigError(f"{file.where(('model_configs',))}: expected a list of model configs; {got}")
    return _read_aliases(file, ("model_configs",), entries, providers, default)


# --- translating -----------------------------------------------------------------------


def _api_key(provider: DDProvider, env: Mapping[str, str]) -> tuple[str | None, str | None]:
    """(key, missing variable). Data Designer's rule: the value names an environment
    variable if one is set, else it is the key itself; an unset name that looks like a
    variable (upper case with ``_``) is a missing variable, not a key."""
    if provider.api_key is None or not provider.api_key.get_secret_value():
        return None, None
    written = provider.api_key.get_secret_value()
    if written in env:
        return env[written] or None, None  # an empty variable: no key, as Data Designer sends it
    if written.isupper() and "_" in written:
        return None, written
    return written, None


def _model_entry(alias: _Alias, provider_name: str) -> dict[str, Any]:
    params = alias.params
    body = {**params.body(), **(params.extra_body or {}), **(alias.provider.extra_body or {})}
    kind: ModelKind = "chat" if alias.kind == "chat" else "embedding"
    entry: dict[str, Any] = {
        "provider": provider_name,
        "model": alias.config.model,
        "kind": kind,
        "params": body,
    }
    if isinstance(params, DDChatParams):
        entry["probe_max_tokens"] = params.max_tokens or UNCAPPED_PROBE_TOKENS
    if isinstance(params, DDEmbeddingParams) and params.dimensions is not None:
        entry["dimensions"] = params.dimensions
    return entry


def load_data_designer(
    directory: Path,
    *,
    env: Mapping[str, str],
    pipeline: Path | None = None,
    cache_ttl_s: float = 0.0,
) -> DataDesignerSetup:
    """Read a Data Designer setup from ``directory`` (see ``data_designer_dir``) and, with
    ``pipeline``, only the aliases its columns name. ``env`` resolves ``api_key`` names.
    Raises ``ConfigError`` (located) for a missing or malformed file."""
    if not directory.is_dir():
        raise ConfigError(
            f"{directory}: no such directory; give the Data Designer config directory "
            f"(the one holding {PROVIDERS_FILE} and {MODEL_CONFIGS_FILE})"
        )
    providers, default = _read_providers(directory)
    if pipeline is None:
        aliases = _read_model_configs(directory, providers, default)
        return _translate(directory, list(aliases.values()), {}, env, cache_ttl_s)
    flow = _read_pipeline(pipeline, providers, default)
    if flow.inline is not None:
        aliases, source = flow.inline, f"the model_configs of {pipeline.name}"
    else:
        aliases, source = _read_model_configs(directory, providers, default), MODEL_CONFIGS_FILE
    flow.check_defined(aliases, source)
    checked = [a for name, a in aliases.items() if name in flow.used_by]
    return _translate(directory, checked, flow.used_by, env, cache_ttl_s)


def _translate(
    directory: Path, checked: list[_Alias], used_by: dict[str, list[str]], env: Mapping[str, str], cache_ttl_s: float
) -> DataDesignerSetup:
    providers: dict[str, Any] = {}
    models: dict[str, Any] = {}
    names: dict[str, str] = {}
    unprobed: list[Unprobed] = []
    for i, alias in enumerate(checked):
        name, provider = alias.config.alias, alias.provider
        if alias.config.skip_health_check:  # before anything else: Data Designer sends nothing for it
            where = alias.file.where((*alias.path, "skip_health_check"))
            unprobed.append(
                Unprobed(name, alias.kind, "skipped", f"skip_health_check: true in its model config ({where})")
            )
            continue
        if alias.kind == "image":
            unprobed.append(Unprobed(name, "image", "skipped", "image models are not checked"))
            continue
        if provider.provider_type not in CHECKED_PROVIDER_TYPES:
            unprobed.append(
                Unprobed(
                    name,
                    alias.kind,
                    "skipped",
                    f"provider {provider.name!r} is provider_type {provider.provider_type!r}; "
                    "genwire checks OpenAI-compatible providers only",
                )
            )
            continue
        key, missing = _api_key(provider, env)
        if missing is not None:
            unprobed.append(
                Unprobed(
                    name,
                    alias.kind,
                    "failed",
                    f"environment variable {missing} is not set (the api_key of provider {provider.name!r} "
                    f"in {PROVIDERS_FILE} names it); set it, or write the key itself",
                    ErrorClass.AUTH,
                )
            )
            continue
        entry: dict[str, Any] = {
            "kind": "openai",
            "base_url": provider.endpoint,
            "timeout_s": alias.params.timeout or DEFAULT_TIMEOUT_S,
            "max_concurrency": alias.params.max_parallel_requests,
        }
        if key is not None:
            entry["api_key"] = key
        if provider.extra_headers:
            entry["headers"] = dict(provider.extra_headers)
        providers[f"p{i}"] = entry
        models[f"m{i}"] = _model_entry(alias, f"p{i}")
        names[f"m{i}"] = name
    loaded = None
    if models:
        data = {
            "providers": providers,
            "models": models,
            "pipeline": {
                "columns": [{"name": STAND_IN_COLUMN, "generator": GENERATOR, "resources": {"models": list(models)}}]
            },
            # Every alias at once (the run itself has every alias's max_parallel_requests in
            # flight), within a bound on open connections.
            "preflight": {"concurrency": min(len(models), MAX_PROBES_IN_FLIGHT), "cache_ttl_s": cache_ttl_s},
        }
        loaded = validate_data(data, f"<Data Designer setup in {directory}>", directory)
    return DataDesignerSetup(
        directory=directory,
        aliases=[a.config.alias for a in checked],
        loaded=loaded,
        names=names,
        used_by={a.config.alias: used_by.get(a.config.alias, []) for a in checked},
        unprobed=unprobed,
    )
