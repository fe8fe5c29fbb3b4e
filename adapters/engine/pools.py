"""The connection pools an `HttpModelClient` builds: their size, and one async pool per event loop.

Every model call an episode has in flight holds one pooled connection, so a
client shared by more workers than its pool holds keeps the others waiting
for a connection: size it with `max_connections=` (see `connections_for`).
How many calls one process keeps in flight before its own CPU is the limit
is `calls_in_flight(latency)`, from the CPU one call costs
(`MODEL_CALL_CPU_SECONDS`, measured by `tests/benchmarks/test_bench_in_flight.py`);
past it, more workers in one process only queue: spread them over processes
(Ray).
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, Callable
from typing import Final

import httpx

from adapters.engine.transport import ShardedAsyncTransport

#: The connections a client's own pool holds unless told otherwise (`max_connections=`).
DEFAULT_MAX_CONNECTIONS: Final = 128
#: The default pool: enough connections for many agents sharing one client.
DEFAULT_LIMITS: Final = httpx.Limits(
    max_connections=DEFAULT_MAX_CONNECTIONS, max_keepalive_connections=DEFAULT_MAX_CONNECTIONS // 2
)
#: The CPU time (seconds) one model call costs the process that makes it: a
#: `screenshot_a11y_tree` step's request (three turns of history, ~260 kB) sent and its reply
#: read through the async client, with 200 calls in flight (measured 4.8-5.2 ms on a shared
#: 2-core machine under load), rounded up. The rest of a step (its prompt, recording) is not
#: in it: a caller counting whole steps passes its own figure to `calls_in_flight`.
MODEL_CALL_CPU_SECONDS: Final = 0.006


def pool_limits(max_connections: int | None) -> httpx.Limits:
    """The pool of a client that holds `max_connections` connections (`None`: the default),
    half of them kept alive when idle, as the default pool does.

    >>> pool_limits(300).max_connections, pool_limits(None) == DEFAULT_LIMITS
    (300, True)
    """
    if max_connections is None:
        return DEFAULT_LIMITS
    return httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max(1, max_connections // 2)
    )


def connections_for(workers: int) -> int:
    """The pool size for a client shared by `workers` concurrent episodes: one connection
    each, never fewer than the default.

    >>> connections_for(32), connections_for(200)
    (128, 200)
    """
    return max(DEFAULT_MAX_CONNECTIONS, workers)


def calls_in_flight(latency: float, cpu_per_call: float = MODEL_CALL_CPU_SECONDS) -> int:
    """How many model calls one process keeps in flight at a model `latency` (seconds) before
    its CPU (one core, for the GIL) is the limit: each call costs it `cpu_per_call` seconds.
    A caller whose steps cost more CPU than the call (prompts, recording) passes that.

    >>> calls_in_flight(5.0)
    833
    """
    return max(1, math.floor(latency / cpu_per_call))


async def _close_at_shutdown(
    client: httpx.AsyncClient, forget: Callable[[], None]
) -> AsyncGenerator[None, None]:
    """Suspended until its event loop shuts down its async generators, then closes `client`."""
    try:
        yield
    finally:
        forget()
        await client.aclose()


class LoopClient:
    """An async client built for one event loop, closed when that loop shuts down.

    asyncio's `shutdown_asyncgens` (run by `asyncio.run` at its end, while the
    loop still runs) closes every suspended async generator of the loop; the
    watcher is one, and its `finally` closes the client in its own loop. A loop
    closed without it (`run_until_complete`, then `close()`) leaves the watcher
    suspended for good: its owner `abandon`s the client instead.
    """

    def __init__(self, client: httpx.AsyncClient, forget: Callable[[], None]) -> None:
        self.client = client
        self._forget = forget
        self._watcher: AsyncGenerator[None, None] | None = None

    async def watch(self) -> None:
        """Start the watcher (once), inside the loop the client belongs to."""
        if self._watcher is None:
            self._watcher = _close_at_shutdown(self.client, self._forget)
            await self._watcher.asend(None)

    async def close(self) -> None:
        """Close the client now (the watcher then has nothing left to do)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await watcher.aclose()
        else:
            await self.client.aclose()

    def abandon(self) -> None:
        """Close the sockets of a client whose loop was closed without shutting down its
        async generators: nothing can be awaited on that loop again (the watcher, dropped,
        is finalized by nobody: its loop is closed)."""
        self._watcher = None
        transport = getattr(self.client, "_transport", None)  # the default one, built here
        if isinstance(transport, ShardedAsyncTransport):
            transport.abandon()


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_MAX_CONNECTIONS",
    "MODEL_CALL_CPU_SECONDS",
    "LoopClient",
    "calls_in_flight",
    "connections_for",
    "pool_limits",
]
