"""The size of a client's own connection pool: `max_connections`, through `client_for` too."""

from __future__ import annotations

import asyncio
import copy
import threading
import time
from collections.abc import Iterator

import pytest

from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.engine.pools import DEFAULT_MAX_CONNECTIONS, connections_for
from adapters.registry import REGISTRY
from osharm_core import ConfigError, Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import TIMEOUT
from tests.adapters.loopback import LoopbackServer, Received, Reply, chat_completion

REQUEST = ModelRequest(model="compat/m", messages=(Message("user", (TextPart("hi"),)),))
CALLS = 6


def pooled_client(base_url: str, max_connections: object) -> HttpModelClient:
    """`REGISTRY.client_for("compat/m")` at `base_url` with a pool of `max_connections`."""
    client = REGISTRY.client_for(
        "compat/m",
        base_url=base_url,
        api_key=FAKE_KEY,
        timeout=TIMEOUT,
        max_connections=max_connections,  # type: ignore[arg-type]
    )
    assert isinstance(client, HttpModelClient)
    return client


class Busiest:
    """A loopback server whose chat replies take a moment, counting the most answered at once."""

    def __init__(self, server: LoopbackServer) -> None:
        self.server = server
        self.most = 0
        self._now = 0
        self._lock = threading.Lock()
        server.route("POST", r".*/chat/completions", self.answer)

    def answer(self, received: Received) -> Reply:
        with self._lock:
            self._now += 1
            self.most = max(self.most, self._now)
        time.sleep(0.5)
        with self._lock:
            self._now -= 1
        return Reply(200, chat_completion("ok"))


@pytest.fixture
def busiest() -> Iterator[Busiest]:
    """A server of its own (its route answers slowly), stopped at the end."""
    with LoopbackServer() as server:
        yield Busiest(server)


def concurrent_calls(client: HttpModelClient, mode: str) -> None:
    """CALLS calls at once, from threads (sync) or tasks (async)."""
    if mode == "sync":
        threads = [threading.Thread(target=client.complete, args=(REQUEST,)) for _ in range(CALLS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        client.close()
        return

    async def run() -> None:
        await asyncio.gather(*(client.acomplete(REQUEST) for _ in range(CALLS)))
        await client.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize(("size", "most"), [(2, 2), (None, CALLS)])
def test_a_clients_pool_holds_max_connections_calls_in_flight(
    busiest: Busiest, mode: str, size: int | None, most: int
) -> None:
    """With max_connections=2 at most two calls reach the server at once (the others wait for
    a connection); with the default pool all six do."""
    client = pooled_client(busiest.server.base_url + "/v1", size)
    concurrent_calls(client, mode)
    assert busiest.most == most


def test_the_pool_size_passes_through_client_for_and_copies() -> None:
    """REGISTRY.client_for(..., max_connections=N) builds a client with that pool; a copy keeps it."""
    client = pooled_client("http://127.0.0.1:9/v1", 300)
    assert (client.max_connections, copy.copy(client).max_connections) == (300, 300)


@pytest.mark.parametrize("bad", [0, -1, True, 2.5, "8"])
def test_a_pool_size_that_is_not_a_positive_int_is_refused(bad: object) -> None:
    """max_connections of 0, a bool, a float or a string is a ConfigError naming it."""
    with pytest.raises(ConfigError, match="max_connections"):
        pooled_client("http://127.0.0.1:9/v1", bad)


def test_connections_for_gives_each_worker_one() -> None:
    """A runner sizes the pool to its workers, never below the default."""
    assert connections_for(200) == 200
    assert connections_for(1) == DEFAULT_MAX_CONNECTIONS
