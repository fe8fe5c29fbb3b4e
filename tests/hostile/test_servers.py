"""Hostile servers on 127.0.0.1: echoed keys, redirects to other origins, trickling, huge and bomb bodies.

Every case runs through both shells (`complete` and `acomplete`) against real
HTTP servers started here, and must end in the documented typed error (or the
right reply) without the key leaving the request headers to the configured
origin, within the call's deadline, and with memory bounded by the size limit.
"""

from __future__ import annotations

import asyncio
import gzip
import logging
import pickle
import socket
import time
import tracemalloc
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.engine.retry import RetryPolicy
from adapters.errors import (
    DeadlineExceededError,
    ModelCallError,
    RedirectError,
    ResponseDecodeError,
    ResponseTooLargeError,
    RetryableError,
)
from osharm_core import Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, TIMEOUT, call, loopback_client
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.adapters.provider_routes import anthropic_message, gemini_reply

HI = (Message("user", (TextPart("hi"),)),)

#: One model per way of sending the key: bearer token, x-api-key, x-goog-api-key.
MODELS = {
    "compat/echo-model": "/v1",
    "claude-sonnet-4-5": "",
    "gemini-2.5-pro": "",
}
_PATHS = {
    "compat/echo-model": r".*/chat/completions",
    "claude-sonnet-4-5": r"/v1/messages",
    "gemini-2.5-pro": r"/v1beta/models/.*",
}


def _success_body(model: str, text: str) -> dict[str, Any]:
    if model.startswith("claude"):
        return anthropic_message(text)
    if model.startswith("gemini"):
        return gemini_reply(text)
    return chat_completion(text)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A fresh loopback server per test (these tests leave connections in odd states)."""
    with LoopbackServer() as running:
        yield running


def _client(
    server: LoopbackServer,
    model: str = "compat/echo-model",
    max_response_bytes: int | None = None,
    **kw: Any,
) -> HttpModelClient:
    options: dict[str, Any] = {"retry": RetryPolicy(attempts=2, wait=0.0), **kw}
    client = loopback_client(model, server.base_url + MODELS[model], **options)
    if max_response_bytes is None:
        return client
    return HttpModelClient(
        client.provider,
        retry=client.retry,
        timeout=client.timeout,
        max_response_bytes=max_response_bytes,
    )


def _ask(client: HttpModelClient, mode: str, model: str = "compat/echo-model") -> Any:
    return call(client, ModelRequest(model=model, messages=HI), mode)


def _leaks(error: BaseException, caplog: pytest.LogCaptureFixture) -> list[str]:
    """Where the key shows up: the error's text, repr, fields, pickle, or this library's logs.

    (httpcore's own DEBUG trace prints raw reply headers; that logger is the user's to enable.)
    """
    places = {
        "str": str(error),
        "repr": repr(error),
        "fields": repr(vars(error)),
        "pickle": repr(pickle.loads(pickle.dumps(error)).__dict__),
        "logs": "\n".join(r.getMessage() for r in caplog.records if r.name.startswith("adapters")),
    }
    return [where for where, text in places.items() if FAKE_KEY in text]


# --- echoed keys -------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
def test_a_key_echoed_in_every_part_of_an_error_reply_is_redacted(
    server: LoopbackServer, model: str, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    echo = f"your key {FAKE_KEY} is bad"
    body = {"error": {"message": echo, "type": echo, "status": echo, "code": echo}}
    headers = {"x-request-id": FAKE_KEY, "request-id": FAKE_KEY, "x-goog-request-id": FAKE_KEY}
    server.enqueue(Reply(401, body, headers))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(ModelCallError) as caught:
        _ask(_client(server, model), mode, model)
    assert _leaks(caught.value, caplog) == []
    assert caught.value.request_id == "[redacted]"
    assert "[redacted]" in str(caught.value)


_HUGE = "A" * 5_000_000


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": _HUGE}},
        {"error": {"message": "no", "type": _HUGE, "status": _HUGE, "code": _HUGE}},
        {"error": _HUGE},
        {"message": _HUGE},
        _HUGE.encode(),
    ],
    ids=["message", "labels", "bare", "top-level", "text"],
)
def test_an_error_reply_s_words_are_cut_like_its_text(
    server: LoopbackServer, model: str, mode: str, body: object
) -> None:
    """A 5 MB message in an error's JSON (or its type, status or code) is cut as the raw-text
    fallback always was, to 500 characters and a note of the length, not copied into the error."""
    server.enqueue(Reply(401, body))
    with pytest.raises(ModelCallError) as caught:
        _ask(_client(server, model, retry=RetryPolicy(attempts=1)), mode, model)
    assert len(str(caught.value)) < 1_200
    assert len(caught.value.message) < 1_100
    assert "characters)" in str(caught.value) or str(caught.value).endswith(": no")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
def test_a_key_echoed_in_a_successful_reply_never_reaches_the_response(
    server: LoopbackServer, model: str, mode: str
) -> None:
    body = _success_body(model, f"DONE {FAKE_KEY}")
    body[FAKE_KEY] = {"nested": [FAKE_KEY, {"deeper": f"x{FAKE_KEY}x"}]}
    # The same key again, spelled with JSON escapes, must not slip through either.
    escaped = "".join(f"\\u{ord(c):04x}" for c in FAKE_KEY)
    payload = httpx.Response(200, json=body).content.replace(b'"x', f'"{escaped}'.encode(), 1)
    server.enqueue(Reply(200, payload, {"x-request-id": FAKE_KEY}))
    response = _ask(_client(server, model), mode, model)
    assert FAKE_KEY not in repr(response)
    assert FAKE_KEY not in repr(response.raw)
    assert response.text == "DONE [redacted]"


@pytest.mark.parametrize("mode", MODES)
def test_a_key_echoed_by_a_server_that_drops_the_connection_is_redacted(
    server: LoopbackServer, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    server.enqueue(*[Reply(500, {"error": {"message": FAKE_KEY * 3}}, drop=True)] * 2)
    caplog.set_level(logging.DEBUG)
    with pytest.raises(RetryableError) as caught:
        _ask(_client(server), mode)
    assert _leaks(caught.value, caplog) == []


# --- redirects ---------------------------------------------------------------------


def _other_host() -> str:
    """127.0.0.2 when this machine routes it to loopback (Linux does), else 127.0.0.1."""
    try:
        with socket.socket() as probe:
            probe.bind(("127.0.0.2", 0))
    except OSError:
        return "127.0.0.1"
    return "127.0.0.2"


class _Elsewhere(LoopbackServer):
    """A loopback server on another address (127.0.0.2 where available) that records everything."""

    def __init__(self) -> None:
        super().__init__()
        self._httpd.server_close()
        from tests.adapters.loopback import _RequestHandler, _Server

        self._httpd = _Server((_other_host(), 0), _RequestHandler)
        self._httpd.owner = self


def _ask_through_a_redirecting_client(server: LoopbackServer, model: str, mode: str) -> None:
    """One call through an httpx client of our own that would follow redirects (closed after)."""
    request = ModelRequest(model=model, messages=HI)
    if mode == "sync":
        with httpx.Client(follow_redirects=True, timeout=TIMEOUT) as given:
            _client(server, model, http_client=given).complete(request)
        return

    async def redirected() -> None:
        async with httpx.AsyncClient(follow_redirects=True, timeout=TIMEOUT) as given:
            await _client(server, model, http_client=given).acomplete(request)

    asyncio.run(redirected())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("status", [301, 302, 307, 308])
@pytest.mark.parametrize("model", MODELS)
def test_redirects_are_never_followed_even_by_a_client_that_would(
    server: LoopbackServer, model: str, status: int, mode: str
) -> None:
    with _Elsewhere() as elsewhere:
        target = f"{elsewhere.base_url}/steal?{FAKE_KEY}"
        server.enqueue(Reply(status, b"", {"location": target}))
        with pytest.raises(RedirectError) as caught:
            _ask_through_a_redirecting_client(server, model, mode)
        assert elsewhere.requests == []
        assert caught.value.status == status
        assert caught.value.tries == 1
        assert FAKE_KEY not in str(caught.value)
        assert "/steal?[redacted]" in str(caught.value)


# --- deadlines ---------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_trickling_body_is_cut_off_at_the_calls_deadline(
    server: LoopbackServer, mode: str
) -> None:
    # One byte every 50 ms: each read is well inside the 5 s read timeout. The 2 s deadline
    # leaves a loaded machine time for the 200 to arrive before it.
    server.enqueue(Reply(200, chat_completion("x" * 200), trickle=0.05))
    client = _client(server, retry=RetryPolicy(attempts=3, wait=0.0, timeout=2.0))
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError) as caught:
        _ask(client, mode)
    assert time.monotonic() - started < 6.0  # (the whole trickle takes 24 s)
    assert caught.value.status == 200
    assert caught.value.retryable is False


@pytest.mark.parametrize("mode", MODES)
def test_a_long_retry_after_is_not_waited_for_past_the_deadline(
    server: LoopbackServer, mode: str
) -> None:
    server.enqueue(Reply(429, {"error": {"message": "slow down"}}, {"retry-after": "10"}))
    client = _client(server, retry=RetryPolicy(attempts=5, wait=0.0, timeout=1.0))
    started = time.monotonic()
    with pytest.raises(RetryableError) as caught:
        _ask(client, mode)
    assert time.monotonic() - started < 5.0  # (the retry-after is 10 s)
    assert caught.value.tries == 1
    assert "deadline" in str(caught.value)


@pytest.mark.parametrize("mode", MODES)
def test_no_try_starts_after_the_deadline(server: LoopbackServer, mode: str) -> None:
    slow = Reply(503, {"error": {"message": "busy"}}, delay=0.4)
    server.enqueue(slow, slow, slow)
    client = _client(server, retry=RetryPolicy(attempts=10, wait=0.0, timeout=0.5))
    started = time.monotonic()
    with pytest.raises(ModelCallError):
        _ask(client, mode)
    assert time.monotonic() - started < 3.0
    assert len(server.requests) <= 2
    server.reset()


# --- sizes -------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_a_declared_length_over_the_limit_is_refused_before_reading(
    server: LoopbackServer, mode: str
) -> None:
    server.enqueue(Reply(200, chat_completion("hi"), declared_length=2 * 1024**3, hangup=False))
    with pytest.raises(ResponseTooLargeError) as caught:
        _ask(_client(server), mode)
    assert "2147483648" in str(caught.value)
    assert caught.value.retryable is False


def _zeros(total: int, piece: int = 1 << 20) -> Iterator[bytes]:
    for _ in range(total // piece):
        yield b"0" * piece


@pytest.mark.parametrize("mode", MODES)
def test_an_undeclared_huge_body_stops_at_the_limit_with_bounded_memory(
    server: LoopbackServer, mode: str
) -> None:
    server.enqueue(Reply(200, stream=lambda: _zeros(200 * 1024 * 1024)))
    client = _client(server, max_response_bytes=1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLargeError):
            _ask(client, mode)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 1024 * 1024


def _bomb(decoded: int, encoding: str) -> bytes:
    """`decoded` bytes of zeros, compressed (gzip or zlib-wrapped deflate), about 1000x smaller."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31 if encoding == "gzip" else 15)
    piece = b"\0" * (1 << 20)
    return b"".join([*(packer.compress(piece) for _ in range(decoded >> 20)), packer.flush()])


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    """A 256 MiB gzip bomb and a 256 MiB deflate bomb (each about 250 KB on the wire)."""
    return {encoding: _bomb(256 << 20, encoding) for encoding in ("gzip", "deflate")}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", ["gzip", "deflate"])
def test_a_compression_bomb_stops_at_the_limit_with_bounded_memory(
    server: LoopbackServer, bombs: dict[str, bytes], encoding: str, mode: str
) -> None:
    server.enqueue(Reply(200, bombs[encoding], {"content-encoding": encoding}))
    client = _client(server, max_response_bytes=4 * 1024 * 1024)
    tracemalloc.start()
    try:
        with pytest.raises(ResponseTooLargeError) as caught:
            _ask(client, mode)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "decompresses" in str(caught.value)
    assert peak < 32 * 1024 * 1024


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("encoding", ["gzip", "deflate", "raw-deflate"])
def test_compressed_replies_within_the_limit_still_decode(
    server: LoopbackServer, encoding: str, mode: str
) -> None:
    body = httpx.Response(200, json=chat_completion("DONE")).content
    if encoding == "gzip":
        packed = gzip.compress(body)
    elif encoding == "deflate":
        packed = zlib.compress(body)
    else:
        packer = zlib.compressobj(6, zlib.DEFLATED, -15)
        packed = packer.compress(body) + packer.flush()
    wire = encoding.removeprefix("raw-")
    server.enqueue(Reply(200, packed, {"content-encoding": wire}))
    assert _ask(_client(server), mode).text == "DONE"
    assert server.requests[-1].headers["accept-encoding"] == "gzip, deflate"


@pytest.mark.parametrize("mode", MODES)
def test_an_encoding_the_client_did_not_ask_for_is_a_typed_error(
    server: LoopbackServer, mode: str
) -> None:
    server.enqueue(Reply(200, b"\x8b\x00junk", {"content-encoding": "br"}))
    with pytest.raises(ResponseDecodeError, match="content-encoding 'br'"):
        _ask(_client(server), mode)


@pytest.mark.parametrize("mode", MODES)
def test_corrupt_compressed_data_is_a_typed_error(server: LoopbackServer, mode: str) -> None:
    server.enqueue(Reply(200, b"\x1f\x8b\x08\x00garbage-not-gzip", {"content-encoding": "gzip"}))
    with pytest.raises(ResponseDecodeError, match="not valid compressed data"):
        _ask(_client(server), mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_body_nested_past_the_json_decoders_depth_is_a_typed_error(
    server: LoopbackServer, mode: str
) -> None:
    server.enqueue(Reply(200, b"[" * 200_000 + b"]" * 200_000))
    with pytest.raises(ResponseDecodeError):
        _ask(_client(server, retry=RetryPolicy(attempts=1)), mode)


def test_max_response_bytes_must_be_a_positive_integer(server: LoopbackServer) -> None:
    for bad in (0, -1, True, 1.5):
        with pytest.raises(ValueError, match="max_response_bytes"):
            _client(server, max_response_bytes=bad)
