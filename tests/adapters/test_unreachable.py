"""A model URL where nothing answers: a closed port or a host name that does not resolve.

Such a call is tried again twice, half a second apart, then ends in a
`ServerUnreachableError` whose one line names the URL and what to check,
instead of nine 30 s waits. The closed port is a real one on 127.0.0.1 (bound,
never listening, so the kernel refuses it and no one else gets it); the host
name ends in `.invalid`, which RFC 6761 reserves for names that never
resolve and tells resolvers to refuse at once: the tests' resolver does that
locally, so no lookup ever leaves the machine.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from stamina.instrumentation import RetryDetails, set_on_retry_hooks

from adapters.contract import ModelRequest
from adapters.engine.flow import transport_error
from adapters.engine.retry import UNREACHABLE_RETRIES, RetryPolicy, next_wait
from adapters.errors import RetryableError, ServerUnreachableError
from osharm_core import Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, call, loopback_client

REQUEST = ModelRequest(model="compat/m", messages=(Message("user", (TextPart("hi"),)),))
NOWHERE = "nowhere.invalid"


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections: bound (so no one else takes it), never listening."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        yield held.getsockname()[1]


@pytest.fixture
def invalid_names_fail(monkeypatch: pytest.MonkeyPatch) -> None:
    """Names under `.invalid` fail to resolve at once, here (RFC 6761), as a careful resolver does."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name.rstrip(".").endswith(".invalid"):
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)


@pytest.fixture
def waits() -> Iterator[list[float]]:
    """The waits stamina takes before each retry, as the policy's hook asked for them."""
    seen: list[float] = []

    def hook(details: RetryDetails) -> None:
        seen.append(details.wait_for)

    set_on_retry_hooks([hook])
    yield seen
    set_on_retry_hooks(None)


def unreachable(base: str, mode: str, waits: list[float]) -> str:
    """The one line of the error a call to `base` ends in, after the policy's quick retries."""
    with pytest.raises(ServerUnreachableError) as caught:
        call(loopback_client("compat/m", base, retry=RetryPolicy()), REQUEST, mode)
    assert (caught.value.tries, waits) == (1 + UNREACHABLE_RETRIES, [0.5] * UNREACHABLE_RETRIES)
    text = str(caught.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("mode", MODES)
def test_a_closed_port_is_tried_three_times_quickly_then_named(
    closed_port: int, mode: str, waits: list[float]
) -> None:
    """Connection refused is retried twice with 0.5 s waits (not nine 30 s ones), then a
    ServerUnreachableError names the URL and says to check the server is running and its port."""
    base = f"http://127.0.0.1:{closed_port}/v1"
    text = unreachable(base, mode, waits)
    assert f"{base}/chat/completions" in text
    assert "connection refused" in text
    assert "running" in text
    assert "port" in text
    assert FAKE_KEY not in text


@pytest.mark.usefixtures("invalid_names_fail")
@pytest.mark.parametrize("mode", MODES)
def test_a_host_name_that_does_not_resolve_is_tried_three_times_then_named(
    mode: str, waits: list[float]
) -> None:
    """A name-resolution failure is retried twice, quickly, then a ServerUnreachableError
    names the URL and says to check the host name."""
    text = unreachable(f"http://{NOWHERE}:8000/v1", mode, waits)
    assert NOWHERE in text
    assert "host name" in text
    assert "does not resolve" in text


@pytest.mark.parametrize("mode", MODES)
def test_a_policy_of_one_try_is_kept_for_an_unreachable_server(
    closed_port: int, mode: str, waits: list[float]
) -> None:
    """RetryPolicy(attempts=1) tries once, unreachable or not."""
    base = f"http://127.0.0.1:{closed_port}/v1"
    with pytest.raises(ServerUnreachableError) as caught:
        call(loopback_client("compat/m", base, retry=RetryPolicy(attempts=1)), REQUEST, mode)
    assert (caught.value.tries, waits) == (1, [])


def test_a_shorter_policy_wait_is_kept_and_the_error_stays_retryable() -> None:
    """The unreachable wait is the policy's when that is shorter, and the error is still a
    RetryableError (a connection failure, as before) for code that catches those."""
    error = ServerUnreachableError("refused", provider="p")
    assert next_wait(RetryPolicy(wait=0.1), error) == 0.1
    assert next_wait(RetryPolicy(), error) == 0.5
    assert isinstance(error, RetryableError)
    assert error.retryable


def test_other_connect_failures_keep_the_reference_policy() -> None:
    """A connect error that is not a refusal or a lookup failure (TLS, a reset) stays a plain
    RetryableError, waited for 30 s as the reference does."""
    request = httpx.Request("POST", "https://x.test/v1/chat/completions")
    try:
        try:
            raise ConnectionResetError(104, "Connection reset by peer")
        except ConnectionResetError as low:
            raise httpx.ConnectError("reset", request=request) from low
    except httpx.ConnectError as exc:
        error = transport_error("openai", exc, url=str(request.url))
    assert type(error) is RetryableError
    assert next_wait(RetryPolicy(), error) == 30.0
