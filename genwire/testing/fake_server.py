"""``FakeOpenAIServer`` and what tests script it with, at their documented import path.

The server lives in ``genwire.testing.fake_openai`` (one module a role); this module
keeps ``from genwire.testing.fake_server import FakeOpenAIServer, FakeResponse`` working
for plugins' tests.
"""

from genwire.testing.fake_openai.scripted import SYMBOLS, FakeResponse, Scripted, Symbol
from genwire.testing.fake_openai.server import FakeOpenAIServer
from genwire.testing.fake_openai.wire import count_tokens, fake_answer
from genwire.testing.vectors import fake_vector

__all__ = [
    "SYMBOLS",
    "FakeOpenAIServer",
    "FakeResponse",
    "Scripted",
    "Symbol",
    "count_tokens",
    "fake_answer",
    "fake_vector",
]
