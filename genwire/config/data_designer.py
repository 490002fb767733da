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
The models of the files themselves are in ``config.data_designer_files``; the rest (~430
lines) is one role, kept whole: reading a setup's files and translating them.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ValidationError

from genwire.config.data_designer_files import (
    PARAMS_MODELS,
    DDChatParams,
    DDEmbeddingParams,
    DDImageParams,
    DDKind,
    DDModelConfig,
    DDModelConfigsFile,
    DDProvider,
    DDProvidersFile,
    generation_kind,
)
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


def data_designer_dir(directory: Path | None, *, env: Mapping[str, str], home: Path) -> Path:
    """Where the files are: ``directory``, else ``$DATA_DESIGNER_HOME``, else
    ``~/.data-designer`` (Data Designer's own order). ``env`` and ``home`` are given by
    the caller (the CLI passes the process's)."""
    if directory is not None:
        return directory.expanduser()
    configured = env.get(HOME_ENV_VAR)
    return Path(configured).expanduser() if configured else home / HOME_DIR_NAME


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
        params = file.validate(PARAMS_MODELS[kind], raw, (*path, "inference_parameters"))
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
