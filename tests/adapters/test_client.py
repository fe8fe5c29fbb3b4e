"""The client engine: status handling, retries, the context-length fallback, keys kept secret.

Everything here runs over `httpx.MockTransport`, through both the sync and the
async shell; the real-server versions are in `test_loopback_openai.py`.
"""

from __future__ import annotations

import json
import logging
import pickle
import ssl
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import stamina
from hypothesis import given
from hypothesis import strategies as st
from stamina.instrumentation import RetryDetails, set_on_retry_hooks

from adapters.contract import HttpCall, ModelRequest, ProviderReply
from adapters.engine.client import (
    DEFAULT_TIMEOUT,
    Delivered,
    HttpModelClient,
    PendingCall,
    call_flow,
    interpret,
    shortened,
    transport_error,
)
from adapters.engine.retry import RetryPolicy
from adapters.errors import (
    AuthenticationError,
    BadRequestError,
    ContextLengthError,
    ModelCallError,
    ResponseDecodeError,
    RetryableError,
)
from adapters.providers.openai_chat import OpenAIChatProvider
from osharm_core import Continuation, ImagePart, Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, call
from tests.adapters.loopback import chat_completion

#: Every test here retries without waiting.
pytestmark = pytest.mark.usefixtures("instant_retries")

SYSTEM = Message("system", (TextPart("system prompt"),))
HISTORY = (
    SYSTEM,
    Message("user", (TextPart("first look"), ImagePart("AAAA"))),
    Message("assistant", (TextPart("first reply"),)),
    Message("user", (TextPart("second look"),)),
    Message("assistant", (TextPart("second reply"),)),
    Message("user", (TextPart("latest look"), ImagePart("BBBB"))),
)
REQUEST = ModelRequest(model="gpt-4o", messages=HISTORY)

Outcome = Callable[[httpx.Request], httpx.Response]


def ok(text: str = "the reply") -> Outcome:
    """A 200 completion with `text`."""
    return lambda _: httpx.Response(200, json=chat_completion(text))


def status(
    code: int, message: str = "failed", *, code_name: str | None = None, **headers: str
) -> Outcome:
    """An OpenAI-style error reply."""
    body = {"error": {"message": message, "type": "error", "code": code_name}}
    hdrs = {"x-request-id": f"req-{code}", **{k.replace("_", "-"): v for k, v in headers.items()}}
    return lambda _: httpx.Response(code, json=body, headers=hdrs)


def context_error() -> Outcome:
    """OpenAI's context_length_exceeded 400."""
    return status(400, "maximum context length is 8192 tokens", code_name="context_length_exceeded")


def raises(exc: Exception) -> Outcome:
    """A transport failure."""

    def fail(request: httpx.Request) -> httpx.Response:
        raise exc

    return fail


class Script:
    """A MockTransport handler answering from a list of outcomes, recording the requests."""

    def __init__(self, *outcomes: Outcome) -> None:
        self.outcomes = list(outcomes)
        self.seen: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        assert self.outcomes, "more requests than scripted outcomes"
        return self.outcomes.pop(0)(request)

    def bodies(self) -> list[Any]:
        """The JSON bodies sent, in order."""
        return [json.loads(r.content) for r in self.seen]


def client_for_script(
    script: Script, mode: str, *, key: str = FAKE_KEY, **kw: Any
) -> HttpModelClient:
    """An OpenAI chat client whose sync or async transport is `script`."""
    transport = httpx.MockTransport(script)
    provider = OpenAIChatProvider(base_url="https://api.test/v1", api_key=key)
    if mode == "sync":
        return HttpModelClient(provider, http_client=httpx.Client(transport=transport), **kw)
    return HttpModelClient(provider, async_http_client=httpx.AsyncClient(transport=transport), **kw)


# --- the pure pieces --------------------------------------------------------


def test_shortened_keeps_system_and_latest_user_message() -> None:
    """The fallback request holds only the system message and the latest user message."""
    shorter = shortened(REQUEST)
    assert shorter is not None
    assert shorter.messages == (SYSTEM, HISTORY[-1])
    assert (shorter.model, shorter.max_tokens) == (REQUEST.model, REQUEST.max_tokens)


def test_shortened_is_none_when_nothing_can_be_dropped() -> None:
    """A request that is already system + user (or has no user message) has no shorter form."""
    assert shortened(ModelRequest(model="m", messages=(SYSTEM, HISTORY[-1]))) is None
    assert shortened(ModelRequest(model="m", messages=(HISTORY[-1],))) is None
    assert shortened(ModelRequest(model="m", messages=(SYSTEM,))) is None


def test_shortened_drops_a_continuation() -> None:
    """The fallback starts a fresh conversation: no previous_response_id chain."""
    request = ModelRequest(
        model="m", messages=(SYSTEM, HISTORY[-1]), continuation=Continuation("resp_1", ("c1",))
    )
    shorter = shortened(request)
    assert shorter is not None
    assert shorter.continuation is None


@given(
    st.lists(
        st.builds(
            Message,
            st.sampled_from(["system", "user", "assistant"]),
            st.tuples(st.builds(TextPart, st.text(max_size=5))),
        ),
        max_size=8,
    )
)
def test_shortened_properties(messages: list[Message]) -> None:
    """The fallback has at most two messages, ends with the latest user message, keeps a leading system."""
    request = ModelRequest(model="m", messages=messages)
    shorter = shortened(request)
    if shorter is None:
        return
    users = [m for m in messages[1 if messages[0].role == "system" else 0 :] if m.role == "user"]
    assert len(shorter.messages) <= 2
    assert shorter.messages[-1] == users[-1]
    if messages[0].role == "system":
        assert shorter.messages[0] == messages[0]
    assert shorter.messages != tuple(messages)


def test_call_flow_is_driven_without_io() -> None:
    """The flow yields the encoded call, and returns the response for the reply sent back."""
    provider = OpenAIChatProvider(api_key=FAKE_KEY)
    flow = call_flow(provider, REQUEST)
    pending = next(flow)
    assert pending.request == REQUEST
    assert not pending.fallback
    reply = ProviderReply(text="hi", model="gpt-4o-x", raw={"a": 1})
    with pytest.raises(StopIteration) as stop:
        flow.send(Delivered(reply, tries=3))
    response = stop.value.value
    assert (response.text, response.model, response.tries, response.context_fallback) == (
        "hi",
        "gpt-4o-x",
        3,
        False,
    )


def test_call_flow_falls_back_once_on_context_length() -> None:
    """A context-length error makes the flow ask once more with the shortened request, then give up."""
    flow = call_flow(OpenAIChatProvider(api_key=FAKE_KEY), REQUEST)
    next(flow)
    pending = flow.throw(ContextLengthError("too long", provider="openai"))
    assert pending.fallback
    assert pending.request.messages == (SYSTEM, HISTORY[-1])
    with pytest.raises(ContextLengthError, match="still too long"):
        flow.throw(ContextLengthError("still too long", provider="openai"))


def pending_call(headers: dict[str, str] | None = None) -> PendingCall:
    """A pending call with an authorization header holding the fake key."""
    hdrs = {"authorization": f"Bearer {FAKE_KEY}", **(headers or {})}
    return PendingCall(REQUEST, HttpCall(method="POST", url="https://x.test", headers=hdrs))


def test_interpret_fills_in_request_id_status_and_retry_after() -> None:
    """An error the provider built is completed from the reply: request id, status, Retry-After."""
    headers = {"x-request-id": "req-9", "retry-after": "40"}
    with pytest.raises(RetryableError) as caught:
        interpret(
            OpenAIChatProvider(),
            pending_call(),
            429,
            headers,
            b"{}",
            now=__import__("datetime").datetime.now(),
        )
    assert (caught.value.status, caught.value.request_id, caught.value.retry_after) == (
        429,
        "req-9",
        40.0,
    )


@pytest.mark.parametrize("content", [b"", b"{not json", b"\xff\xfe", b"[1, 2"])
def test_interpret_a_2xx_that_is_not_json_is_a_decode_error(content: bytes) -> None:
    """A 200 whose body is empty or not JSON is a ResponseDecodeError carrying the request id."""
    with pytest.raises(ResponseDecodeError) as caught:
        interpret(
            OpenAIChatProvider(), pending_call(), 200, {"x-request-id": "r1"}, content, now=None
        )  # type: ignore[arg-type]
    assert (caught.value.request_id, caught.value.status) == ("r1", 200)


def test_interpret_turns_a_provider_crash_into_a_decode_error() -> None:
    """A provider whose decode trips over an odd shape gives a ResponseDecodeError, not a KeyError."""

    class Fragile(OpenAIChatProvider):
        def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
            return ProviderReply(text=body["missing"], model="m")

    with pytest.raises(ResponseDecodeError, match="KeyError"):
        interpret(Fragile(), pending_call(), 200, {}, b"{}", now=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("exc", "retryable"),
    [
        (httpx.ConnectError("[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed"), True),
        (httpx.ConnectError("[Errno 111] Connection refused"), True),
        (httpx.ConnectTimeout("timed out"), True),
        (httpx.ReadTimeout("timed out"), True),
        (httpx.WriteTimeout("timed out"), True),
        (httpx.PoolTimeout("timed out"), True),
        (httpx.ReadError("reset by peer"), True),
        (
            httpx.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            ),
            True,
        ),
        (httpx.ProxyError("proxy said no"), True),
        (httpx.UnsupportedProtocol("Request URL has an unsupported protocol 'ftp://'"), False),
        (httpx.LocalProtocolError("bad header"), False),
    ],
)
def test_transport_errors_are_classified(exc: httpx.RequestError, retryable: bool) -> None:
    """Timeouts, connection, TLS and dropped-connection failures are retryable; local mistakes are not."""
    error = transport_error("openai", exc)
    assert error.retryable is retryable
    assert type(exc).__name__ in str(error)


# --- the shells over MockTransport -----------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("outcomes", "tries"),
    [
        ([ok()], 1),
        ([status(429, "slow down"), ok()], 2),
        ([status(500), status(502), status(503), status(504), ok()], 5),
        ([status(529, "overloaded"), ok()], 2),
        ([status(400, "bad"), ok()], 2),
        ([raises(httpx.ReadTimeout("timed out")), ok()], 2),
        ([raises(httpx.ConnectError("[SSL] handshake failed")), ok()], 2),
        ([raises(httpx.RemoteProtocolError("peer closed connection")), ok()], 2),
    ],
    ids=["ok", "429", "5xx", "529", "400", "timeout", "tls", "dropped"],
)
def test_retried_failures_end_in_the_reply(mode: str, outcomes: list[Outcome], tries: int) -> None:
    """Each retryable failure is tried again; the reply comes back with the number of tries."""
    script = Script(*outcomes)
    response = call(client_for_script(script, mode), REQUEST, mode)
    assert (response.text, response.tries, response.context_fallback) == ("the reply", tries, False)
    assert len(script.seen) == tries


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (status(401, "Incorrect API key provided"), AuthenticationError),
        (status(403, "forbidden"), AuthenticationError),
        (status(404, "no such model"), ModelCallError),
        (status(422, "unprocessable"), ModelCallError),
        (status(429, "quota", code_name="insufficient_quota"), ModelCallError),
        (lambda _: httpx.Response(200, content=b"{malformed"), ResponseDecodeError),
        (lambda _: httpx.Response(200, json={"choices": []}), ResponseDecodeError),
        (raises(httpx.UnsupportedProtocol("no scheme")), ModelCallError),
    ],
    ids=["401", "403", "404", "422", "quota", "malformed", "no-choices", "bad-url"],
)
def test_other_failures_raise_at_once(mode: str, outcome: Outcome, expected: type) -> None:
    """Errors that are not retried raise after one try, typed, with status and request id."""
    script = Script(outcome)
    with pytest.raises(expected) as caught:
        call(client_for_script(script, mode), REQUEST, mode)
    assert (caught.value.tries, caught.value.retryable) == (1, False)
    assert len(script.seen) == 1


@pytest.mark.parametrize("mode", MODES)
def test_error_carries_status_message_and_request_id(mode: str) -> None:
    """The raised error names the provider, the HTTP status, the provider's message and the request id."""
    with pytest.raises(AuthenticationError) as caught:
        call(client_for_script(Script(status(401, "Incorrect API key")), mode), REQUEST, mode)
    error = caught.value
    assert (error.provider, error.status, error.message, error.request_id) == (
        "openai",
        401,
        "Incorrect API key",
        "req-401",
    )
    assert str(error) == "openai HTTP 401: Incorrect API key (request id req-401)"


@pytest.mark.parametrize("mode", MODES)
def test_bad_request_not_retried_when_switched_off(mode: str) -> None:
    """With retry_bad_request=False a 400 raises a BadRequestError after one try."""
    client = client_for_script(
        Script(status(400, "bad")), mode, retry=RetryPolicy(retry_bad_request=False)
    )
    with pytest.raises(BadRequestError):
        call(client, REQUEST, mode)


@pytest.mark.parametrize("mode", MODES)
def test_retries_stop_after_the_policy_attempts(mode: str) -> None:
    """A server that keeps failing gets exactly `attempts` tries, then the last error is raised."""
    script = Script(*[status(503, "busy")] * 3)
    with pytest.raises(RetryableError) as caught:
        call(client_for_script(script, mode, retry=RetryPolicy(attempts=3)), REQUEST, mode)
    assert (caught.value.tries, caught.value.status) == (3, 503)


@pytest.mark.parametrize("mode", MODES)
def test_context_fallback_uses_system_and_latest_user(
    mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A context-length error is retried once with the system and latest user message; the response and the log say so."""
    script = Script(context_error(), ok("short answer"))
    with caplog.at_level(logging.WARNING, logger="adapters.engine.client"):
        response = call(client_for_script(script, mode), REQUEST, mode)
    assert any("retrying once" in r.getMessage() for r in caplog.records)
    assert (response.text, response.tries, response.context_fallback) == ("short answer", 2, True)
    first, second = script.bodies()
    assert len(first["messages"]) == 6
    assert [m["role"] for m in second["messages"]] == ["system", "user"]
    assert second["messages"][1]["content"][0]["text"] == "latest look"


@pytest.mark.parametrize("mode", MODES)
def test_context_fallback_that_fails_raises_the_typed_error(mode: str) -> None:
    """When the shortened request is too long as well, the ContextLengthError propagates."""
    with pytest.raises(ContextLengthError) as caught:
        call(client_for_script(Script(context_error(), context_error()), mode), REQUEST, mode)
    assert caught.value.tries == 2


@pytest.mark.parametrize("mode", MODES)
def test_context_error_with_nothing_to_drop_raises_at_once(mode: str) -> None:
    """An already minimal request is not sent again."""
    request = ModelRequest(model="gpt-4o", messages=(SYSTEM, HISTORY[-1]))
    with pytest.raises(ContextLengthError) as caught:
        call(client_for_script(Script(context_error()), mode), request, mode)
    assert caught.value.tries == 1


@pytest.mark.parametrize("mode", MODES)
def test_tries_count_every_attempt_across_the_fallback(mode: str) -> None:
    """Retries before and after the fallback all count towards `tries`."""
    script = Script(status(429), context_error(), status(503), ok())
    response = call(client_for_script(script, mode), REQUEST, mode)
    assert (response.tries, response.context_fallback) == (4, True)


@pytest.mark.parametrize("mode", MODES)
def test_every_request_carries_the_timeouts(mode: str) -> None:
    """Each request carries the client's timeouts (connect 10 s, read 120 s by default)."""
    script = Script(ok(), ok())
    call(client_for_script(script, mode), REQUEST, mode)
    custom = httpx.Timeout(3.0, connect=1.0)
    call(client_for_script(script, mode, timeout=custom), REQUEST, mode)
    first, second = (r.extensions["timeout"] for r in script.seen)
    assert first == {"connect": 10.0, "read": 120.0, "write": 120.0, "pool": 120.0}
    assert second == {"connect": 1.0, "read": 3.0, "write": 3.0, "pool": 3.0}


@pytest.mark.parametrize("mode", MODES)
def test_a_timeout_in_seconds_reaches_every_request(mode: str) -> None:
    """timeout=30 (seconds, as httpx and the openai SDK take it) used to fail each call with a
    raw AttributeError; it is now 30 s for every phase of every request."""
    script = Script(ok())
    call(client_for_script(script, mode, timeout=30), REQUEST, mode)
    assert script.seen[0].extensions["timeout"] == dict.fromkeys(
        ("connect", "read", "write", "pool"), 30.0
    )


@pytest.mark.parametrize("mode", MODES)
def test_wire_model_override(mode: str) -> None:
    """A client built with `model=` sends that name whatever the request says."""
    script = Script(ok())
    call(client_for_script(script, mode, model="llama3.2-vision"), REQUEST, mode)
    assert script.bodies()[0]["model"] == "llama3.2-vision"


def test_default_clients_are_built_lazily_with_tls_verification_and_timeouts() -> None:
    """No httpx client exists until the first call; the built one verifies TLS and has the timeouts."""
    client = HttpModelClient(OpenAIChatProvider(api_key=FAKE_KEY))
    assert client._own_client is None
    assert len(client._own_async) == 0
    built = client._client()
    assert built.timeout == DEFAULT_TIMEOUT
    pool = built._transport._pool  # type: ignore[attr-defined]
    assert pool._ssl_context.verify_mode == ssl.CERT_REQUIRED
    assert pool._ssl_context.check_hostname
    client.close()
    assert client._own_client is None


def test_a_given_http_client_is_used_and_never_closed() -> None:
    """A client passed in is the one used, and close() leaves it open for its owner."""
    given_client = httpx.Client(transport=httpx.MockTransport(Script(ok())))
    with HttpModelClient(OpenAIChatProvider(api_key=FAKE_KEY), http_client=given_client) as client:
        client.complete(REQUEST)
    assert not given_client.is_closed


# --- retry waits as stamina sees them ---------------------------------------


@pytest.fixture
def retry_log() -> Iterator[list[RetryDetails]]:
    """The retries stamina schedules, as its instrumentation reports them."""
    seen: list[RetryDetails] = []
    set_on_retry_hooks([seen.append])
    try:
        yield seen
    finally:
        set_on_retry_hooks(None)


@pytest.mark.parametrize("mode", MODES)
def test_real_waits_follow_the_policy_and_retry_after(
    mode: str, retry_log: list[RetryDetails]
) -> None:
    """Outside stamina's test mode the waits are the policy's, or a longer Retry-After up to the cap."""
    script = Script(
        status(503),
        status(429, retry_after_ms="120"),
        status(429, retry_after="9999"),
        ok(),
    )
    policy = RetryPolicy(wait=0.01, max_retry_after=0.05)
    with stamina.set_testing(False):
        response = call(client_for_script(script, mode, retry=policy), REQUEST, mode)
    assert response.tries == 4
    waits = [round(d.wait_for, 3) for d in retry_log]
    assert waits == [0.01, 0.05, 0.05]
    assert [type(d.caused_by) for d in retry_log] == [RetryableError] * 3
    assert [d.caused_by.retry_after for d in retry_log] == [None, 0.12, 9999.0]  # type: ignore[attr-defined]


# --- keys never leak --------------------------------------------------------

ECHO = f"Incorrect API key provided: {FAKE_KEY}; header was Bearer {FAKE_KEY}"

LEAKY_PATHS: dict[str, list[Outcome]] = {
    "401-echo": [status(401, ECHO)],
    "429-exhausted": [status(429, ECHO)] * 2,
    "400-exhausted": [status(400, ECHO)] * 2,
    "5xx-text-body": [lambda _: httpx.Response(502, text=f"<html>{ECHO}</html>")] * 2,
    "context-twice": [context_error(), status(400, ECHO, code_name="context_length_exceeded")],
    "malformed-json": [lambda _: httpx.Response(200, content=b"{" + ECHO.encode())],
    "no-choices": [lambda _: httpx.Response(200, json={"choices": [], "echo": ECHO})],
    "transport": [raises(httpx.ConnectError(ECHO))] * 2,
    "timeout": [raises(httpx.ReadTimeout(ECHO))] * 2,
    "404": [status(404, ECHO)],
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("path", sorted(LEAKY_PATHS))
def test_the_key_never_appears_in_errors_or_logs(
    mode: str, path: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On every error path, even when the server echoes it, the key is absent from the error and the logs."""
    caplog.set_level(logging.DEBUG)
    client = client_for_script(Script(*LEAKY_PATHS[path]), mode, retry=RetryPolicy(attempts=2))
    with pytest.raises(ModelCallError) as caught:
        call(client, REQUEST, mode)
    error = caught.value
    texts = [
        str(error),
        repr(error),
        error.message,
        repr(client),
        repr(pickle.loads(pickle.dumps(error))),
    ]
    chained = error.__cause__ or error.__context__
    if chained is not None:
        texts += [str(chained), repr(chained)]
    texts += [r.getMessage() for r in caplog.records] + [repr(r.__dict__) for r in caplog.records]
    assert all(FAKE_KEY not in t for t in texts)


@pytest.mark.parametrize("mode", MODES)
def test_the_key_never_appears_in_a_response(mode: str, caplog: pytest.LogCaptureFixture) -> None:
    """A successful call's response, its repr and the logs do not hold the key."""
    caplog.set_level(logging.DEBUG)
    response = call(client_for_script(Script(status(429), ok()), mode), REQUEST, mode)
    texts = [repr(response), json.dumps(dict(response.raw)), response.text]
    texts += [r.getMessage() for r in caplog.records] + [repr(r.__dict__) for r in caplog.records]
    assert all(FAKE_KEY not in t for t in texts)


def test_errors_pickle_with_their_fields() -> None:
    """Errors survive pickling (multiprocessing runners) with every field."""
    error = RetryableError(
        "busy", provider="openai", status=503, request_id="r", retry_after=3.0, tries=4
    )
    copy = pickle.loads(pickle.dumps(error))
    assert type(copy) is RetryableError
    assert (copy.message, copy.status, copy.request_id, copy.retry_after, copy.tries) == (
        "busy",
        503,
        "r",
        3.0,
        4,
    )
    assert str(copy) == str(error)
