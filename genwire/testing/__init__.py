"""Test support: fake models, the fake OpenAI-compatible server, and pytest fixtures.

Never imported by the package itself.
"""

from genwire.testing.declarations import assert_declarations_match
from genwire.testing.fakes import FakeChatModel, FakeEmbeddingModel
from genwire.testing.gates import assert_verdicts, gate_verdicts
from genwire.testing.vectors import hash_vector

__all__ = [
    "FakeChatModel",
    "FakeEmbeddingModel",
    "FakeOpenAIServer",
    "FakeTools",
    "assert_declarations_match",
    "assert_verdicts",
    "gate_verdicts",
    "hash_vector",
]


def __getattr__(name: str) -> object:
    # The server pulls in aiohttp's web stack; load it only when asked for.
    if name == "FakeOpenAIServer":
        from genwire.testing.fake_openai.server import FakeOpenAIServer

        return FakeOpenAIServer
    if name == "FakeTools":  # the tools handle's types: loaded only for tool tests
        from genwire.testing.fake_tools import FakeTools

        return FakeTools
    raise AttributeError(name)
