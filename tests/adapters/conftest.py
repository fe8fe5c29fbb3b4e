"""Fixtures for the adapter tests: the loopback server, instant retries, anyio on asyncio, a screenshot."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import pytest
import stamina

from osharm_core import ImagePart
from tests.adapters.loopback import LoopbackServer

#: A key that must never show up in errors, reprs or logs.
FAKE_KEY = "sk-test-DO-NOT-LEAK-0123456789abcdef"


@pytest.fixture
def anyio_backend() -> str:
    """Async tests run on asyncio."""
    return "asyncio"


@pytest.fixture(scope="session")
def loopback_server() -> Iterator[LoopbackServer]:
    """One real HTTP server on 127.0.0.1 for the whole session, stopped at the end."""
    with LoopbackServer() as server:
        yield server


@pytest.fixture
def server(loopback_server: LoopbackServer) -> Iterator[LoopbackServer]:
    """The session's loopback server with an empty reply queue and request log."""
    loopback_server.reset()
    yield loopback_server
    leftover = loopback_server.pending()
    loopback_server.reset()
    assert leftover == 0, f"{leftover} scripted replies were never requested"


@pytest.fixture
def instant_retries() -> Iterator[None]:
    """Retries without waiting; each client's own attempt limit still applies."""
    with stamina.set_testing(True, attempts=1000, cap=True):
        yield


@pytest.fixture(scope="session")
def screenshot(observations_dir: Path) -> ImagePart:
    """A real 1920x1080 desktop screenshot, base64 as the core hands it over."""
    data = (observations_dir / "thunar_context_menu.png").read_bytes()
    return ImagePart(base64.b64encode(data).decode())
