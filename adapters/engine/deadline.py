"""Keeping a call's deadline while its reply arrives, not just between chunks.

httpx applies its read timeout to each read, fixed when the request starts,
so a reply that stalls just before the deadline would otherwise be waited for
one more whole read timeout, and one that sends a header line every few
seconds would never end. The async shell runs each try inside a timeout
scope that ends at the deadline (`within`); the sync shell bounds every read
and write of the connection by the time its thread has left (set for the
duration of a try with `reading_until`): from the connection's first byte
when the request carries the `watch_connections` trace (`stream_until` does
both), else from the reply's headers on (`bound_reads`). A `Cutoff` ends a
thread's exchanges from another thread (`cut_by`): a read blocked in one
ends at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from types import TracebackType
from typing import Any, Final, TypeVar

import anyio
import httpcore
import httpx

# The shortest read timeout handed down once the deadline is (nearly) reached: a
# zero timeout would make the socket non-blocking and fail as a read error instead.
_LAST_READ: Final = 0.001
_MARK: Final = "_osharm_bounded_reads"
_R = TypeVar("_R")

_thread = threading.local()


class within:
    """`async with within(seconds):` cancels its body after `seconds` and raises `TimeoutError`.

    asyncio's own timeout on asyncio, anyio's on other event loops (trio);
    `None` sets no limit. `fired` tells whether the limit cut the body short.
    """

    def __init__(self, seconds: float | None) -> None:
        self._seconds = seconds
        self._scope: Any = None
        self._sync = False
        self.fired = False

    async def __aenter__(self) -> None:
        if self._seconds is None:
            return
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            self._scope, self._sync = anyio.fail_after(self._seconds), True
            self._scope.__enter__()
        else:
            self._scope = asyncio.timeout(self._seconds)
            await self._scope.__aenter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._scope is None:
            return None
        try:
            if self._sync:
                return bool(self._scope.__exit__(exc_type, exc, tb))
            return bool(await self._scope.__aexit__(exc_type, exc, tb))
        except TimeoutError:
            self.fired = True
            raise


@contextlib.contextmanager
def reading_until(deadline: float | None) -> Iterator[None]:
    """`with reading_until(deadline):` the reads and writes of bounded connections (see the
    module doc) end by `deadline` in this thread.

    `deadline` is a `time.monotonic()` value; `None` sets no bound. The
    thread's earlier deadline is back once the block ends.
    """
    before = getattr(_thread, "deadline", None)
    _thread.deadline = deadline
    try:
        yield
    finally:
        _thread.deadline = before


class Cutoff:
    """A switch that ends the HTTP exchanges of the threads working under it, from any thread.

    In a thread under `cut_by(cutoff)`, every read or write of a bounded
    connection fails at once (`httpcore.ReadError` / `WriteError`, which httpx
    turns into its own) once `cut()` was called, and `cut()` shuts down the
    connection a read or write is blocked on, so it ends at once (its
    connection is not used again). `clear()` lets later exchanges run.
    A connection still being opened ends at its connect timeout.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cut = False
        self._busy: dict[int, Any] = {}  # the streams in a read or write now, by id

    @property
    def is_cut(self) -> bool:
        """Whether `cut()` was called (and not `clear()` since)."""
        return self._cut

    def cut(self) -> None:
        """End the exchanges under way and fail the next ones."""
        with self._lock:
            self._cut = True
            busy = list(self._busy.values())
        for stream in busy:
            _shut(stream)

    def clear(self) -> None:
        """Let exchanges run again."""
        with self._lock:
            self._cut = False

    def _enter(self, stream: Any, error: type[Exception]) -> None:
        with self._lock:
            if self._cut:
                raise error("the call was stopped")
            self._busy[id(stream)] = stream

    def _leave(self, stream: Any) -> None:
        with self._lock:
            self._busy.pop(id(stream), None)


@contextlib.contextmanager
def cut_by(cutoff: Cutoff) -> Iterator[None]:
    """`with cut_by(cutoff):` this thread's exchanges on bounded connections end when
    `cutoff` is cut. The thread's earlier cutoff is back once the block ends."""
    before = getattr(_thread, "cutoff", None)
    _thread.cutoff = cutoff
    try:
        yield
    finally:
        _thread.cutoff = before


def cut_short() -> bool:
    """Whether this thread works under a `Cutoff` that has been cut."""
    cutoff: Cutoff | None = getattr(_thread, "cutoff", None)
    return cutoff is not None and cutoff.is_cut


def _shut(stream: Any) -> None:
    """Shut `stream`'s socket down, which wakes a read or write blocked on it in another thread."""
    extra = getattr(stream, "get_extra_info", None)
    sock = extra("socket") if callable(extra) else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):
            # The plain socket's shutdown: a TLS socket's own would also drop its TLS state
            # under the thread reading it.
            socket.socket.shutdown(sock, socket.SHUT_RDWR)


def shut_connections(client: httpx.Client) -> None:
    """Shut down the sockets of `client`'s pooled connections (httpx's default transport),
    so the reads and writes other threads are blocked in end at once: `client.close()`
    alone closes the sockets under them, and they go on waiting for the server. Through
    httpx's and httpcore's private attributes; whatever is not found is left as it is."""
    pool = getattr(getattr(client, "_transport", None), "_pool", None)
    for connection in list(getattr(pool, "connections", ())):
        _shut(getattr(getattr(connection, "_connection", None), "_network_stream", None))


def _left(timeout: float | None) -> float | None:
    """`timeout`, but never past this thread's deadline."""
    deadline: float | None = getattr(_thread, "deadline", None)
    if deadline is None:
        return timeout
    left = max(deadline - time.monotonic(), _LAST_READ)
    return left if timeout is None else min(timeout, left)


def _bounded(
    stream: Any, operation: Callable[[Any, float | None], _R], error: type[Exception]
) -> Callable[..., _R]:
    """`stream`'s read or write `operation`, waiting at most until the thread's deadline and
    ended at once (with `error`) by the thread's `Cutoff`."""

    def bounded(data: Any, timeout: float | None = None) -> _R:
        cutoff: Cutoff | None = getattr(_thread, "cutoff", None)
        if cutoff is None:
            return operation(data, _left(timeout))
        cutoff._enter(stream, error)
        try:
            return operation(data, _left(timeout))
        finally:
            cutoff._leave(stream)

    return bounded


def _bound(stream: Any) -> None:
    """Bound `stream`'s reads and writes (once; a stream without them is left as it is)."""
    if stream is None or getattr(stream, _MARK, False):
        return
    read, write = getattr(stream, "read", None), getattr(stream, "write", None)
    if not callable(read):
        return
    try:
        stream.read = _bounded(stream, read, httpcore.ReadError)
        if callable(write):
            stream.write = _bounded(stream, write, httpcore.WriteError)
        setattr(stream, _MARK, True)
    except AttributeError:  # a stream that takes no new attributes keeps its reads
        return


def bound_reads(response: httpx.Response) -> None:
    """Make every later read (and write) of `response`'s connection wait at most until its
    thread's deadline, and end with its thread's `Cutoff`.

    Works through the connection's `network_stream` (httpx's default
    transports expose it); a response without one (a mock transport) is left
    as it is. A thread with no `reading_until` deadline reads as before, so a
    pooled connection serves other callers unchanged.
    """
    _bound(response.extensions.get("network_stream"))


_OPENED: Final = (".connect_tcp.complete", ".connect_unix_socket.complete", ".start_tls.complete")


def watch_connections(event: str, info: Mapping[str, Any]) -> None:
    """An httpx `trace` extension for sync clients: each connection the request opens is
    bounded as `bound_reads` bounds it, from its first byte (the reply's headers included).

    `client.send(request)` with `request.extensions["trace"] = watch_connections`.
    """
    if event.endswith(_OPENED):
        _bound(info.get("return_value"))


@contextlib.contextmanager
def stream_until(
    client: httpx.Client, method: str, url: str, *, deadline: float, **kwargs: Any
) -> Iterator[httpx.Response]:
    """`client.stream(method, url, **kwargs)` with the whole exchange bounded: every read and
    write, from the connection's first byte (headers however slowly they trickle) to the
    body's last, ends by `deadline` (a `time.monotonic()` value) and with the thread's
    `Cutoff`. A read past the deadline raises `httpx.ReadTimeout`.
    """
    extensions = {**kwargs.pop("extensions", {}), "trace": watch_connections}
    with (
        reading_until(deadline),
        client.stream(method, url, extensions=extensions, **kwargs) as response,
    ):
        bound_reads(response)
        yield response


__all__ = [
    "Cutoff",
    "bound_reads",
    "cut_by",
    "cut_short",
    "reading_until",
    "shut_connections",
    "stream_until",
    "watch_connections",
    "within",
]
