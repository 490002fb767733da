"""OpenAI-compatible HTTP models (NIM, vLLM, OpenAI, Ollama...) over a lean client or aiohttp.

One ``OpenAIProvider`` per configured provider owns its clients and one ``ProviderGate``;
every model alias of that provider shares both, so ``max_concurrency`` caps the provider's
in-flight requests whatever the number of aliases, while 429s brake only the model that got
them (``genwire.providers.pacing``). Failures are raised as ``ModelError`` with one
``ErrorClass``; only transient classes are retried.

The package, by role (each module says more):

* ``provider``: ``OpenAIProvider``, the configured provider and the handles it builds;
* ``endpoint``: its requests (``send``: pacing, retries, budget, failure classes);
* ``client``: the clients they go over and their life (lean client or aiohttp, redirects);
* ``handles``: ``OpenAIChatModel`` / ``OpenAIEmbeddingModel``, what a plugin holds;
* ``answers``: what a server's answer says (error excerpts, ``Retry-After``).

``genwire.providers.openai`` keeps exporting the names it did as one module.
"""

from genwire.providers.openai.answers import parse_retry_after as _parse_retry_after
from genwire.providers.openai.answers import readable_excerpt
from genwire.providers.openai.client import MIN_SECRET_CHARS, USER_AGENT
from genwire.providers.openai.handles import OpenAIChatModel, OpenAIEmbeddingModel
from genwire.providers.openai.provider import OpenAIProvider

__all__ = [
    "MIN_SECRET_CHARS",
    "USER_AGENT",
    "OpenAIChatModel",
    "OpenAIEmbeddingModel",
    "OpenAIProvider",
    "_parse_retry_after",
    "readable_excerpt",
]
