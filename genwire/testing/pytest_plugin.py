"""pytest plugin (entry point ``pytest11``): genwire's fixtures.

* ``genwire_container``: a factory ``boot(path_or_dict, **kwargs)``; every container it
  booted is closed after the test.
* ``fake_openai_server``: a real OpenAI-compatible HTTP server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from genwire.testing.fake_openai.server import FakeOpenAIServer

__all__ = ["fake_openai_server", "genwire_container"]

Booter = Callable[..., Any]


def _booter(booted: list[Any]) -> Booter:
    from genwire.app import boot

    def factory(source: Any, **kwargs: Any) -> Any:
        container = boot(source, **kwargs)
        booted.append(container)
        return container

    return factory


def _closing_on_private_loop() -> Iterator[Booter]:
    booted: list[Any] = []
    yield _booter(booted)
    for container in booted:
        asyncio.run(container.aclose())


async def _closing_on_test_loop() -> AsyncIterator[Booter]:
    booted: list[Any] = []
    yield _booter(booted)
    for container in booted:
        await container.aclose()


def _fixture() -> Any:
    try:  # with pytest-asyncio, close on the loop the test used (clients belong to it)
        import pytest_asyncio
    except ImportError:
        return pytest.fixture(name="genwire_container")(_closing_on_private_loop)
    return pytest_asyncio.fixture(name="genwire_container")(_closing_on_test_loop)


genwire_container = _fixture()


@pytest.fixture
def fake_openai_server() -> Iterator[FakeOpenAIServer]:
    """A started FakeOpenAIServer, stopped after the test."""
    # Imported here: the server pulls in aiohttp's web stack, which a test suite that
    # never asks for this fixture should not pay for (genwire.testing is lazy too).
    from genwire.testing.fake_openai.server import FakeOpenAIServer

    with FakeOpenAIServer() as server:
        yield server
