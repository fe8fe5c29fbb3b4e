"""The call's deadline holds while a reply arrives: a stalled body ends at it, typed (review finding 5)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator

import httpcore
import httpx
import pytest

from adapters.contract import ModelRequest
from adapters.engine.deadline import (
    Cutoff,
    bound_reads,
    cut_by,
    cut_short,
    reading_until,
    stream_until,
    watch_connections,
    within,
)
from adapters.engine.retry import RetryPolicy
from adapters.errors import DeadlineExceededError
from osharm_core import Message, TextPart
from tests.adapters.drip import DripServer
from tests.adapters.helpers import MODES, call, loopback_client
from tests.adapters.loopback import LoopbackServer, Reply

REQUEST = ModelRequest(model="compat/m", messages=(Message("user", (TextPart("hi"),)),))


class Stream:
    """A network stream that records the read timeouts it is given."""

    def __init__(self) -> None:
        self.timeouts: list[float | None] = []

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        self.timeouts.append(timeout)
        return b""


def test_reads_are_bounded_by_the_threads_deadline_only_while_it_is_set() -> None:
    stream = Stream()
    response = httpx.Response(200, extensions={"network_stream": stream})
    bound_reads(response)
    bound_reads(response)  # wrapping twice changes nothing
    with reading_until(time.monotonic() + 5.0):
        stream.read(10, 60.0)
        stream.read(10, None)
    with reading_until(time.monotonic() - 1.0):
        stream.read(10, 60.0)
    with reading_until(None):
        stream.read(10, 60.0)
    stream.read(10, 60.0)
    first, second, late, unset, outside = stream.timeouts
    assert 4.0 < (first or 0.0) <= 5.0
    assert 4.0 < (second or 0.0) <= 5.0
    assert late == 0.001  # a zero timeout would turn the socket non-blocking
    assert (unset, outside) == (60.0, 60.0)


def test_a_response_without_a_network_stream_is_left_alone() -> None:
    bound_reads(httpx.Response(200, content=b"{}"))


def _late_then_stalled() -> Iterator[bytes]:
    """One byte at once, then nothing for far longer than any deadline here."""
    yield b"{"
    time.sleep(8.0)
    yield b"}"


@pytest.mark.parametrize("mode", MODES)
def test_a_body_that_stalls_after_late_headers_ends_at_the_deadline(
    server: LoopbackServer, mode: str
) -> None:
    """Headers 1.5 s into a 3 s deadline, then a stall: httpx's read timeout alone (set to the
    3 s left when the try began) would wait until 4.5 s and fail as a retryable ReadTimeout."""
    server.enqueue(Reply(200, delay=1.5, stream=_late_then_stalled))
    client = loopback_client(
        "compat/m",
        server.base_url + "/v1",
        retry=RetryPolicy(attempts=3, wait=0.0, timeout=3.0),
        timeout=httpx.Timeout(30.0, connect=2.0),
    )
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError, match="reading the reply body") as caught:
        call(client, REQUEST, mode)
    assert time.monotonic() - started < 4.2
    assert (caught.value.status, caught.value.tries, caught.value.retryable) == (200, 1, False)


@pytest.mark.parametrize("mode", MODES)
def test_headers_that_never_come_end_at_the_deadline(server: LoopbackServer, mode: str) -> None:
    server.enqueue(Reply(200, b"{}", delay=3.0))
    client = loopback_client(
        "compat/m",
        server.base_url + "/v1",
        retry=RetryPolicy(attempts=3, wait=0.0, timeout=1.0),
        timeout=httpx.Timeout(30.0, connect=2.0),
    )
    with pytest.raises(DeadlineExceededError, match="waiting for the reply") as caught:
        call(client, REQUEST, mode)
    assert (caught.value.status, caught.value.tries) == (None, 1)


def test_within_cuts_an_await_short_and_says_so() -> None:
    async def run(seconds: float | None, sleep: float) -> tuple[bool, bool]:
        scope = within(seconds)
        try:
            async with scope:
                await asyncio.sleep(sleep)
        except TimeoutError:
            return True, scope.fired
        return False, scope.fired

    assert asyncio.run(run(0.01, 5.0)) == (True, True)
    assert asyncio.run(run(5.0, 0.0)) == (False, False)
    assert asyncio.run(run(None, 0.0)) == (False, False)


# --- headers that trickle in on a fresh connection (review finding 2) ---------------


@pytest.mark.parametrize("mode", MODES)
def test_headers_that_trickle_in_end_at_the_deadline_on_a_fresh_connection(mode: str) -> None:
    """A header line every 0.25 s for 20 s: each read is quick, so only a bound on the whole
    exchange (the connection's reads bounded from its first byte) ends it at the deadline."""
    with DripServer(seconds=20.0) as server:
        client = loopback_client(
            "compat/m",
            server.base_url + "/v1",
            retry=RetryPolicy(attempts=1, wait=0.0, timeout=1.0),
            timeout=httpx.Timeout(30.0, connect=2.0),
        )
        started = time.monotonic()
        with pytest.raises(DeadlineExceededError, match="waiting for the reply"):
            call(client, REQUEST, mode)
        assert time.monotonic() - started < 8.0


def test_a_stream_opened_through_the_trace_is_bounded_from_its_first_read() -> None:
    stream = Stream()
    watch_connections("connection.connect_tcp.started", {"host": "x"})
    watch_connections("connection.connect_tcp.complete", {"return_value": stream})
    watch_connections("connection.connect_tcp.complete", {"return_value": None})
    with reading_until(time.monotonic() + 5.0):
        stream.read(10, 60.0)
    (first,) = stream.timeouts
    assert 4.0 < (first or 0.0) <= 5.0


def test_reading_until_nests() -> None:
    stream = Stream()
    bound_reads(httpx.Response(200, extensions={"network_stream": stream}))
    with reading_until(time.monotonic() + 5.0):
        with reading_until(time.monotonic() + 50.0):
            stream.read(10, 60.0)
        stream.read(10, 60.0)
    inner, outer = stream.timeouts
    assert 49.0 < (inner or 0.0) <= 50.0
    assert 4.0 < (outer or 0.0) <= 5.0


def test_a_cut_cutoff_fails_reads_and_writes_at_once_until_cleared() -> None:
    stream = Stream()
    bound_reads(httpx.Response(200, extensions={"network_stream": stream}))
    cutoff = Cutoff()
    stream.read(10, 1.0)  # a thread not under the cutoff reads as before
    with cut_by(cutoff):
        assert not cut_short()
        stream.read(10, 1.0)
        cutoff.cut()
        assert cut_short()
        with pytest.raises(httpcore.ReadError, match="stopped"):
            stream.read(10, 1.0)
        cutoff.clear()
        stream.read(10, 1.0)
    assert not cut_short()
    assert len(stream.timeouts) == 3


def test_cutting_wakes_a_read_blocked_in_another_thread() -> None:
    """The blocked read's socket is shut down: it ends at once, not at its 30 s timeout."""
    with DripServer(seconds=20.0, every=10.0) as server, httpx.Client(timeout=30.0) as http:
        cutoff = Cutoff()
        caught: list[BaseException] = []

        def ask() -> None:
            with cut_by(cutoff):
                try:
                    with stream_until(http, "GET", server.base_url, deadline=time.monotonic() + 30):
                        pass
                except httpx.HTTPError as exc:
                    caught.append(exc)

        started = time.monotonic()
        thread = threading.Thread(target=ask)
        thread.start()
        time.sleep(0.5)
        cutoff.cut()
        thread.join(10.0)
        assert not thread.is_alive()
        assert time.monotonic() - started < 8.0
        assert len(caught) == 1
