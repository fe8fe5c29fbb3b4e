"""OpenAI chat, compatible servers and Azure against a real HTTP server on 127.0.0.1.

Each scripted fault ends in the right reply after the right number of tries,
or in the right typed error, through both the sync and the async shell, with
short timeouts so nothing can hang.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
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
from osharm_core import ImagePart, Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, TIMEOUT, call, loopback_client
from tests.adapters.loopback import LoopbackServer, Received, Reply, chat_completion, openai_error

#: Every test here retries without waiting.
pytestmark = pytest.mark.usefixtures("instant_retries")

MESSAGES = (
    Message("system", (TextPart("You control a desktop."),)),
    Message("user", (TextPart("old screen"), ImagePart("iVBORw0KGgo="))),
    Message("assistant", (TextPart("```python\npyautogui.click(1, 1)\n```"),)),
    Message("user", (TextPart("new screen"), ImagePart("iVBORw0KGgo="))),
)
REQUEST = ModelRequest(model="compat/loopback-model", messages=MESSAGES)


def make_client(server: LoopbackServer, **kw: object) -> HttpModelClient:
    """A compat/ client pointed at the loopback server's /v1."""
    return loopback_client("compat/loopback-model", f"{server.base_url}/v1", **kw)


@dataclass(frozen=True)
class Case:
    """A scripted sequence of replies and how the call must end."""

    replies: tuple[Reply, ...]
    tries: int
    error: type[ModelCallError] | None = None
    fallback: bool = False
    attempts: int = 10
    read_timeout: float | None = None
    retry_bad_request: bool = True


OK = Reply(200, chat_completion("final answer"))
CONTEXT = openai_error(
    400, "This model's maximum context length is 8192 tokens.", code="context_length_exceeded"
)

CASES = {
    "429-retry-after": Case(
        (Reply(429, openai_error(429, "slow").body, {"retry-after": "2"}), OK), 2
    ),
    "429-no-retry-after": Case((openai_error(429, "rate limited"), OK), 2),
    "500-503-504": Case(
        (openai_error(500, "boom"), openai_error(503, "busy"), openai_error(504, "gw"), OK), 4
    ),
    "502-html": Case((Reply(502, "<html>bad gateway</html>"), OK), 2),
    "dropped-mid-response": Case((Reply(200, chat_completion("lost"), drop=True), OK), 2),
    "hangup-before-reply": Case((Reply(hangup=True), OK), 2),
    "slow-past-read-timeout": Case(
        (Reply(200, chat_completion("late"), delay=0.6), OK), 2, read_timeout=0.2
    ),
    "context-fallback": Case((CONTEXT, OK), 2, fallback=True),
    "context-twice": Case((CONTEXT, CONTEXT), 2, error=ContextLengthError),
    "malformed-json": Case((Reply(200, b'{"choices": [ {'),), 1, error=ResponseDecodeError),
    "empty-choices": Case(
        (Reply(200, {"choices": [], "model": "m"}),), 1, error=ResponseDecodeError
    ),
    "401": Case(
        (openai_error(401, "Incorrect API key provided", code="invalid_api_key"),),
        1,
        error=AuthenticationError,
    ),
    "404": Case(
        (openai_error(404, "model not found", code="model_not_found"),), 1, error=ModelCallError
    ),
    "422": Case((openai_error(422, "unprocessable"),), 1, error=ModelCallError),
    "400-retried": Case((openai_error(400, "bad image"), OK), 2),
    "400-not-retried": Case(
        (openai_error(400, "bad image"),), 1, error=BadRequestError, retry_bad_request=False
    ),
    "503-exhausted": Case((openai_error(503, "busy"),) * 3, 3, error=RetryableError, attempts=3),
    "timeouts-exhausted": Case(
        (Reply(200, chat_completion("late"), delay=0.5),) * 2,
        2,
        error=RetryableError,
        attempts=2,
        read_timeout=0.15,
    ),
}


def play(server: LoopbackServer, case: Case, mode: str) -> tuple[object, ...]:
    """Run one case; a summary of how it ended (for parity checks)."""
    server.enqueue(*case.replies)
    timeout = httpx.Timeout(case.read_timeout or 5.0, connect=2.0)
    policy = RetryPolicy(attempts=case.attempts, retry_bad_request=case.retry_bad_request)
    client = make_client(server, retry=policy, timeout=timeout)
    try:
        response = call(client, REQUEST, mode)
    except ModelCallError as error:
        return (type(error).__name__, error.tries, error.status)
    return (response.text, response.tries, response.context_fallback)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(CASES))
def test_scripted_faults_end_right(server: LoopbackServer, name: str, mode: str) -> None:
    """Each fault ends in the reply after the expected tries, or in the expected typed error."""
    case = CASES[name]
    outcome = play(server, case, mode)
    if case.error is None:
        assert outcome == ("final answer", case.tries, case.fallback)
    else:
        assert outcome[:2] == (case.error.__name__, case.tries)
    assert len(server.requests) == case.tries


def test_sync_and_async_end_alike(server: LoopbackServer) -> None:
    """The same scripted server gives the same outcome through both shells, case by case."""
    quick = [n for n, c in CASES.items() if c.read_timeout is None]
    sync = [play(server, CASES[n], "sync") for n in quick]
    asynchronous = [play(server, CASES[n], "async") for n in quick]
    assert sync == asynchronous


@pytest.mark.parametrize("mode", MODES)
def test_what_the_server_receives(server: LoopbackServer, mode: str) -> None:
    """The wire request: path, bearer key, JSON body with the model name after the prefix."""
    response = call(make_client(server), REQUEST, mode)
    (received,) = server.requests
    assert (received.method, received.path) == ("POST", "/v1/chat/completions")
    assert received.headers["authorization"] == f"Bearer {FAKE_KEY}"
    body = received.json()
    assert body["model"] == "loopback-model"
    assert [m["role"] for m in body["messages"]] == ["system", "user", "assistant", "user"]
    assert (response.text, response.model, response.usage.total_tokens) == (
        "loopback reply",
        "gpt-4o-loopback",
        14,
    )


@pytest.mark.parametrize("mode", MODES)
def test_context_fallback_sends_system_and_latest_user(server: LoopbackServer, mode: str) -> None:
    """After a context-length error the second request holds only the system and the latest user message."""
    server.enqueue(CONTEXT, OK)
    response = call(make_client(server), REQUEST, mode)
    assert response.context_fallback
    first, second = (r.json()["messages"] for r in server.requests)
    assert len(first) == 4
    assert [m["content"][0]["text"] for m in second] == ["You control a desktop.", "new screen"]


@pytest.mark.parametrize("mode", MODES)
def test_retry_after_reaches_the_error(server: LoopbackServer, mode: str) -> None:
    """A 429's Retry-After is parsed onto the error the retry decision sees."""
    server.enqueue(
        Reply(429, openai_error(429, "slow").body, {"retry-after": "7", "x-request-id": "rl-1"})
    )
    with pytest.raises(RetryableError) as caught:
        call(make_client(server, retry=RetryPolicy(attempts=1)), REQUEST, mode)
    assert (caught.value.retry_after, caught.value.request_id, caught.value.status) == (
        7.0,
        "rl-1",
        429,
    )


@pytest.mark.parametrize("mode", MODES)
def test_azure_over_loopback(server: LoopbackServer, mode: str) -> None:
    """Azure's deployment path, api-version query and api-key header reach the server."""
    client = loopback_client("azure/my-gpt4o", server.base_url)
    response = call(client, ModelRequest(model="gpt-4o", messages=MESSAGES), mode)
    (received,) = server.requests
    assert received.path == "/openai/deployments/my-gpt4o/chat/completions"
    assert received.query.startswith("api-version=")
    assert received.headers["api-key"] == FAKE_KEY
    assert "authorization" not in received.headers
    assert "model" not in received.json()
    assert response.text == "loopback reply"


def _azure_versions(received: Received) -> Reply:
    """Azure as it treats a reasoning deployment: the GA api-version is refused."""
    if "api-version=2024-10-21" in received.query:
        message = "Model {modelName} is enabled only for api versions 2024-12-01-preview and later"
        return Reply(400, {"error": {"code": "BadRequest", "message": message}})
    return Reply(200, chat_completion("reasoned"))


@pytest.fixture
def azure_reasoning(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackServer]:
    """A loopback Azure refusing the GA api-version, with no AZURE_OPENAI_API_VERSION set."""
    monkeypatch.delenv("AZURE_OPENAI_API_VERSION", raising=False)
    with LoopbackServer() as azure:
        azure.route("POST", r".*/chat/completions", _azure_versions)
        yield azure


@pytest.mark.parametrize("deployment", ["o3-mini", "o4-mini", "gpt-5", "gpt-5-mini"])
def test_azure_reasoning_deployments_get_a_version_that_takes_them(
    azure_reasoning: LoopbackServer, deployment: str
) -> None:
    """With no version set, a reasoning deployment is sent 2025-04-01-preview (Azure's
    reasoning-model page lists it for the o-series), not the GA 2024-10-21 it refuses."""
    client = loopback_client(f"azure/{deployment}", azure_reasoning.base_url)
    response = call(client, ModelRequest(model=deployment, messages=MESSAGES), "sync")
    assert response.text == "reasoned"
    (received,) = azure_reasoning.requests
    assert received.query == "api-version=2025-04-01-preview"


def test_azure_refused_version_is_not_retried_and_names_the_setting(
    azure_reasoning: LoopbackServer,
) -> None:
    """A deployment whose name does not say it reasons gets the GA version; Azure's 400 about the
    version is a ModelCallError after one try (it was a bad request retried ten times) that
    names AZURE_OPENAI_API_VERSION and the api_version argument."""
    client = loopback_client("azure/prod-reasoner", azure_reasoning.base_url)
    with pytest.raises(ModelCallError) as caught:
        call(client, ModelRequest(model="prod-reasoner", messages=MESSAGES), "sync")
    assert type(caught.value) is ModelCallError
    assert caught.value.tries == 1
    assert "AZURE_OPENAI_API_VERSION" in str(caught.value)
    assert "api_version=" in str(caught.value)
    assert "2024-12-01-preview" in str(caught.value)
    assert len(azure_reasoning.requests) == 1


@pytest.mark.parametrize("mode", MODES)
def test_openrouter_error_in_a_200_is_retried_as_its_code(
    server: LoopbackServer, mode: str
) -> None:
    """OpenRouter sends an error that happens after the model started as HTTP 200 with
    {"error": {"code": 502, ...}}: it is retried as a 502 would be (it was a non-retried
    "reply has no choices" that lost the message)."""
    body = {
        "error": {
            "code": 502,
            "message": "Upstream provider returned an invalid response",
            "metadata": {"provider_name": "Together"},
        },
        "user_id": "user_x",
    }
    server.enqueue(Reply(200, body), OK)
    client = loopback_client("openrouter/qwen/qwen2.5-vl-72b-instruct", f"{server.base_url}/v1")
    response = call(client, REQUEST, mode)
    assert (response.text, response.tries) == ("final answer", 2)


@pytest.mark.parametrize(
    ("code", "message", "error"),
    [
        (401, "User not found.", AuthenticationError),
        (429, "Rate limit exceeded upstream", RetryableError),
        (502, "Upstream provider returned an invalid response", RetryableError),
    ],
)
def test_openrouter_error_in_a_200_keeps_its_message(
    server: LoopbackServer, code: int, message: str, error: type[ModelCallError]
) -> None:
    """The typed error an HTTP reply with that code would be, with the provider's message."""
    server.enqueue(Reply(200, {"error": {"code": code, "message": message}}))
    client = loopback_client(
        "openrouter/qwen/qwen2.5-vl-72b-instruct",
        f"{server.base_url}/v1",
        retry=RetryPolicy(attempts=1),
    )
    with pytest.raises(error) as caught:
        call(client, REQUEST, "sync")
    assert type(caught.value) is error
    assert message in str(caught.value)
    assert f"error {code} in an HTTP 200 reply" in str(caught.value)


def _echo_key(received: Received) -> Reply:
    """A server that puts the caller's credentials into its error message."""
    return openai_error(401, f"bad credentials: {received.headers.get('authorization')}")


@pytest.mark.parametrize("mode", MODES)
def test_echoed_key_is_redacted(server: LoopbackServer, mode: str) -> None:
    """A server that echoes the key back does not get it into the raised error."""
    server.route("POST", r"/echo/v1/chat/completions", _echo_key)
    client = loopback_client("compat/m", f"{server.base_url}/echo/v1")
    with pytest.raises(AuthenticationError) as caught:
        call(client, REQUEST, mode)
    assert FAKE_KEY not in str(caught.value)
    assert "[redacted]" in caught.value.message


def test_default_async_client_survives_new_event_loops(
    server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One async pool per event loop, each closed when its loop ends: 30 asyncio.run steps leave none open."""
    built: list[httpx.AsyncClient] = []
    original = HttpModelClient._new_async_client

    def recording(self: HttpModelClient) -> httpx.AsyncClient:
        built.append(original(self))
        return built[-1]

    monkeypatch.setattr(HttpModelClient, "_new_async_client", recording)
    client = HttpModelClient(
        OpenAIChatProvider(base_url=f"{server.base_url}/v1", api_key=FAKE_KEY), timeout=TIMEOUT
    )
    for _ in range(30):
        assert asyncio.run(client.acomplete(REQUEST)).text == "loopback reply"
    assert len(built) == 30
    assert all(c.is_closed for c in built)
    with client:
        assert client.complete(REQUEST).text == "loopback reply"

    async def twice_then_close() -> None:
        await client.acomplete(REQUEST)
        await client.acomplete(REQUEST)
        await client.aclose()

    asyncio.run(twice_then_close())
    assert len(built) == 31
    assert built[-1].is_closed
    assert client._own_client is None
    assert len(client._own_async) == 0


@pytest.mark.anyio
async def test_concurrent_calls_share_one_client(server: LoopbackServer) -> None:
    """Many concurrent async calls through one client all get their reply."""
    server.default_delay = 0.05
    try:
        async with make_client(server) as client:
            replies = await asyncio.gather(*(client.acomplete(REQUEST) for _ in range(16)))
    finally:
        server.default_delay = 0.0
    assert [r.text for r in replies] == ["loopback reply"] * 16
    assert len(server.requests) == 16
