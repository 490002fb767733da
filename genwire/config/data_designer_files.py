"""NeMo Data Designer's own files as genwire reads them (SPEC §13): pydantic models of
``model_providers.yaml``, ``model_configs.yaml`` and each alias's inference parameters,
keeping only the fields the pre-flight needs (``extra="ignore"``) with Data Designer's
rules for them. ``config.data_designer`` reads the files with these and turns them into a
genwire config."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, SecretStr, field_validator

from genwire.config.messages import shown
from genwire.config.validators import check_base_url, check_headers

DDKind = Literal["chat", "embedding", "image"]
KNOWN_PROVIDER_TYPES = ("openai", "anthropic")  # what Data Designer itself accepts


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


PARAMS_MODELS: dict[DDKind, type[DDChatParams | DDEmbeddingParams | DDImageParams]] = {
    "chat": DDChatParams,
    "embedding": DDEmbeddingParams,
    "image": DDImageParams,
}
