"""Anthropic, Gemini and Responses through the real engine and a real HTTP server on 127.0.0.1.

Every scenario runs twice, through `complete` and through `acomplete`, and
must end the same way: the right reply after the right number of tries, or the
right typed error.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from adapters.contract import ModelRequest, ModelResponse
from adapters.engine.client import HttpModelClient
from adapters.engine.retry import RetryPolicy, next_wait
from adapters.errors import (
    AuthenticationError,
    BadRequestError,
    QuotaExceededError,
    RetryableError,
    SafetyCheckPending,
)
from osharm_core import Continuation, ImagePart, Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, call, loopback_client, png_part
from tests.adapters.loopback import LoopbackServer, Reply, chat_completion
from tests.adapters.provider_routes import (
    AnthropicSimulator,
    GeminiSimulator,
    ResponsesSimulator,
    anthropic_error,
    computer_call,
    gemini_error,
    install,
    output_message,
    reasoning,
)

pytestmark = pytest.mark.usefixtures("instant_retries")


@pytest.fixture(scope="session")
def simulators(
    loopback_server: LoopbackServer,
) -> tuple[AnthropicSimulator, GeminiSimulator, ResponsesSimulator]:
    """The provider routes, installed once on the session's loopback server."""
    return install(loopback_server)


@pytest.fixture
def cua(
    server: LoopbackServer,
    simulators: tuple[AnthropicSimulator, GeminiSimulator, ResponsesSimulator],
) -> Iterator[ResponsesSimulator]:
    """The Responses simulator, with no scripted outputs or stored responses."""
    simulators[2].reset()
    yield simulators[2]
    simulators[2].reset()


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Which shell drives the call."""
    return str(request.param)


def _history(image: ImagePart) -> tuple[Message, ...]:
    return (
        Message("system", (TextPart("You operate a desktop."),)),
        Message("user", (TextPart("What next?"), image)),
        Message("assistant", (TextPart("```python\npyautogui.click(1, 2)\n```"),)),
        Message("user", (TextPart("What next?"), image)),
    )


#: A one-message conversation.
HI = (Message("user", (TextPart("hi"),)),)


def _client(model: str, base_url: str, *, retry_bad_request: bool = True) -> HttpModelClient:
    retry = RetryPolicy(attempts=4, retry_bad_request=retry_bad_request)
    return loopback_client(model, base_url, retry=retry)


def _ask(
    server: LoopbackServer, model: str, messages: tuple[Message, ...], mode: str, **fields: Any
) -> ModelResponse:
    """One request for `model` to the loopback server's host root, through the `mode` shell."""
    request = ModelRequest(model=model, messages=messages, **fields)
    return call(_client(model, server.base_url), request, mode)


def _no_key(error: BaseException) -> None:
    assert FAKE_KEY not in str(error)
    assert FAKE_KEY not in repr(error)


# --- Anthropic -------------------------------------------------------------------


@pytest.mark.usefixtures("simulators")
def test_anthropic_reply(server: LoopbackServer, screenshot: ImagePart, mode: str) -> None:
    """A Claude 4.5 request passes the server's checks (one sampler) and its reply comes back."""
    response = _ask(server, "claude-sonnet-4-5", _history(screenshot), mode)
    assert response.text == AnthropicSimulator.text
    assert response.tries == 1
    assert response.usage.total_tokens == 25
    (received,) = server.requests
    assert received.path == "/v1/messages"
    assert received.headers["x-api-key"] == FAKE_KEY
    body = received.json()
    assert "top_p" not in body
    assert body["temperature"] == 0.5


@pytest.mark.usefixtures("simulators")
def test_anthropic_overload_is_retried(server: LoopbackServer, mode: str) -> None:
    """Two 529 overloaded replies are retried; the third try answers."""
    server.enqueue(
        anthropic_error(529, "overloaded_error", "Overloaded"),
        anthropic_error(529, "overloaded_error", "Overloaded", **{"retry-after": "1"}),
    )
    response = _ask(server, "claude-3-5-sonnet-latest", HI, mode)
    assert response.tries == 3
    assert response.text == AnthropicSimulator.text
    assert len(server.requests) == 3


@pytest.mark.usefixtures("simulators")
@pytest.mark.parametrize(
    "message",
    [
        "prompt is too long: 208656 tokens > 200000 maximum",
        # The prompt fits, but not with max_tokens on top (the window counts both).
        "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, "
        "decrease input length or `max_tokens` and try again",
    ],
)
def test_anthropic_prompt_too_long_falls_back(
    server: LoopbackServer, screenshot: ImagePart, mode: str, message: str
) -> None:
    """A 400 about the context window retries once with the system and the latest user message
    only (the "exceed context limit" one was retried as a bad request ten times, unshortened)."""
    server.enqueue(anthropic_error(400, "invalid_request_error", message))
    response = _ask(server, "claude-3-7-sonnet-latest", _history(screenshot), mode)
    assert response.context_fallback is True
    assert response.tries == 2
    first, second = (r.json() for r in server.requests)
    assert len(first["messages"]) == 3
    assert len(second["messages"]) == 1
    assert second["system"] == "You operate a desktop."


@pytest.mark.usefixtures("simulators")
def test_anthropic_bad_key_fails_at_once(server: LoopbackServer, mode: str) -> None:
    """A 401 is an AuthenticationError after one try, with the request id and without the key."""
    server.enqueue(anthropic_error(401, "authentication_error", f"invalid x-api-key {FAKE_KEY}"))
    with pytest.raises(AuthenticationError) as caught:
        _ask(server, "claude-3-5-haiku-latest", HI, mode)
    assert caught.value.tries == 1
    assert caught.value.request_id == "req_401"
    _no_key(caught.value)


@pytest.mark.usefixtures("simulators")
@pytest.mark.parametrize(
    ("status", "kind", "message"),
    [
        (
            400,
            "invalid_request_error",
            "Your credit balance is too low to access the Anthropic API. Please go to Plans & "
            "Billing to upgrade or purchase credits.",
        ),
        (402, "billing_error", "There is an issue with your payment details."),
    ],
)
def test_anthropic_used_up_credit_is_a_quota_error_not_retried(
    server: LoopbackServer, mode: str, status: int, kind: str, message: str
) -> None:
    """A spent balance (a 400 invalid_request_error) or a billing_error is a QuotaExceededError
    after one try, as OpenAI's insufficient_quota is (it was a bad request retried ten times)."""
    server.enqueue(anthropic_error(status, kind, message))
    with pytest.raises(QuotaExceededError, match=r"credit|payment") as caught:
        _ask(server, "claude-sonnet-4-5", HI, mode)
    assert (caught.value.status, caught.value.tries) == (status, 1)
    assert len(server.requests) == 1


@pytest.mark.parametrize("value", ["inf", "1e999", "nan", "-inf"])
@pytest.mark.parametrize(
    ("model", "reply"),
    [
        ("claude-sonnet-4-5", anthropic_error(529, "overloaded_error", "Overloaded")),
        ("gemini-2.5-flash", gemini_error(503, "UNAVAILABLE", "The model is overloaded.")),
    ],
)
def test_an_unreadable_retry_after_counts_as_absent(
    server: LoopbackServer, model: str, reply: Reply, value: str
) -> None:
    """`Retry-After: inf` (or 1e999, nan) is no wait at all, as the README says, for the providers
    that read the header themselves too: the retry waits RetryPolicy.wait, not the 120 s cap."""
    server.enqueue(dataclasses.replace(reply, headers={**reply.headers, "retry-after": value}))
    client = loopback_client(model, server.base_url, retry=RetryPolicy(attempts=1))
    request = ModelRequest(model=model, messages=HI)
    with pytest.raises(RetryableError) as caught:
        call(client, request, "sync")
    assert caught.value.retry_after is None
    assert next_wait(RetryPolicy(), caught.value) == 30.0


def test_a_gemini_retry_delay_too_long_for_a_float_counts_as_absent(server: LoopbackServer) -> None:
    """A `RetryInfo.retryDelay` of 400 digits (a float overflows to inf) is no wait."""
    retry_info = [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "9" * 400 + "s"}
    ]
    server.enqueue(
        gemini_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted", retry_info)
    )
    client = loopback_client("gemini-2.5-flash", server.base_url, retry=RetryPolicy(attempts=1))
    with pytest.raises(RetryableError) as caught:
        call(client, ModelRequest(model="gemini-2.5-flash", messages=HI), "sync")
    assert caught.value.retry_after is None


# --- Gemini ----------------------------------------------------------------------


@pytest.mark.usefixtures("simulators")
def test_gemini_reply(server: LoopbackServer, screenshot: ImagePart, mode: str) -> None:
    """A Gemini request with a screenshot passes the server's checks; the key is only in a header."""
    response = _ask(server, "gemini-2.5-flash", _history(screenshot), mode, max_tokens=321)
    assert response.text == GeminiSimulator.text
    assert response.model == "gemini-2.5-flash"
    (received,) = server.requests
    assert received.path == "/v1beta/models/gemini-2.5-flash:generateContent"
    assert received.query == ""
    assert received.headers["x-goog-api-key"] == FAKE_KEY
    assert received.json()["generationConfig"]["maxOutputTokens"] == 321


@pytest.mark.usefixtures("simulators")
def test_gemini_blocked_prompt_is_an_empty_refusal(server: LoopbackServer, mode: str) -> None:
    """A blocked prompt is an empty reply after one try, refused for the block reason."""
    server.enqueue(Reply(200, {"promptFeedback": {"blockReason": "PROHIBITED_CONTENT"}}))
    response = _ask(server, "gemini-2.0-flash", HI, mode)
    assert (response.text, response.tries) == ("", 1)
    assert response.finish_reason == response.refusal == "PROHIBITED_CONTENT"
    assert len(server.requests) == 1


@pytest.mark.usefixtures("simulators")
def test_gemini_unavailable_then_answer(server: LoopbackServer, mode: str) -> None:
    """503 UNAVAILABLE and 429 RESOURCE_EXHAUSTED are retried until the model answers."""
    retry_info = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "2s"}]
    server.enqueue(
        gemini_error(503, "UNAVAILABLE", "The model is overloaded. Please try again later."),
        gemini_error(429, "RESOURCE_EXHAUSTED", "Resource has been exhausted", retry_info),
    )
    response = _ask(server, "gemini-2.0-flash", HI, mode)
    assert response.tries == 3
    assert response.text == GeminiSimulator.text


@pytest.mark.usefixtures("simulators")
def test_gemini_token_limit_falls_back(
    server: LoopbackServer, screenshot: ImagePart, mode: str
) -> None:
    """A token-limit INVALID_ARGUMENT retries once with the shortened conversation."""
    server.enqueue(
        gemini_error(
            400,
            "INVALID_ARGUMENT",
            "The input token count (1200293) exceeds the maximum number of tokens allowed (1048576).",
        )
    )
    response = _ask(server, "gemini-2.5-pro", _history(screenshot), mode)
    assert response.context_fallback is True
    assert [len(r.json()["contents"]) for r in server.requests] == [3, 1]


@pytest.mark.parametrize("model", ["gemini-2.5-pro", "gemini-computer/gemini-3.5-flash"])
def test_gemini_thoughts_without_candidate_tokens_are_the_output(
    server: LoopbackServer, model: str
) -> None:
    """A thinking model that spent all its output on thoughts sends no candidatesTokenCount
    (protobuf JSON leaves zeros out): that count is 0 and the output is the thoughts, so the
    step's cost is known (it was None, and a dollar cap ended the episode)."""
    body = {
        "candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": 1200,
            "totalTokenCount": 2699,
            "thoughtsTokenCount": 1499,
        },
        "modelVersion": "gemini-2.5-pro",
    }
    server.enqueue(Reply(200, body))
    request = ModelRequest(model=model, messages=HI)
    response = call(loopback_client(model, server.base_url), request, "sync")
    assert response.usage.input_tokens == 1200
    assert (response.usage.output_tokens, response.usage.reasoning_tokens) == (1499, 1499)


@pytest.mark.parametrize(
    "metadata",
    [
        {"promptTokenCount": 1000, "thoughtsTokenCount": -5},
        {"promptTokenCount": 1000, "thoughtsTokenCount": 10**400},
        {"promptTokenCount": 1000, "thoughtsTokenCount": "8000"},
        {"promptTokenCount": 1000, "totalTokenCount": 9000},
        {"promptTokenCount": 1000, "thoughtsTokenCount": 10, "totalTokenCount": 9000},
    ],
)
def test_gemini_left_out_candidate_tokens_are_unknown_when_the_other_counts_disagree(
    server: LoopbackServer, metadata: dict[str, Any]
) -> None:
    """A missing candidatesTokenCount is 0 only when the other counts vouch for it: with an
    unreadable thoughtsTokenCount, or a total the prompt and thoughts do not add up to, the
    output is unknown (a known 0 would understate the step's cost under a dollar cap)."""
    body = {"candidates": [{"content": {"role": "model", "parts": [{"text": "WAIT"}]}}]}
    server.enqueue(Reply(200, {**body, "usageMetadata": metadata}))
    request = ModelRequest(model="gemini-2.5-pro", messages=HI)
    response = call(loopback_client("gemini-2.5-pro", server.base_url), request, "sync")
    assert response.usage.output_tokens is None


def test_gemini_tool_use_prompt_tokens_count_in_the_check_of_the_total(
    server: LoopbackServer,
) -> None:
    body = {
        "candidates": [{"content": {"role": "model", "parts": [{"text": "WAIT"}]}}],
        "usageMetadata": {
            "promptTokenCount": 1000,
            "toolUsePromptTokenCount": 50,
            "thoughtsTokenCount": 20,
            "totalTokenCount": 1070,
        },
    }
    server.enqueue(Reply(200, body))
    request = ModelRequest(model="gemini-2.5-pro", messages=HI)
    response = call(loopback_client("gemini-2.5-pro", server.base_url), request, "sync")
    assert response.usage.output_tokens == 20


def test_gemini_usage_without_metadata_stays_unreported(server: LoopbackServer) -> None:
    """No usageMetadata at all is still no count, never a guessed 0."""
    body = {"candidates": [{"content": {"role": "model", "parts": [{"text": "WAIT"}]}}]}
    server.enqueue(Reply(200, body))
    request = ModelRequest(model="gemini-2.5-pro", messages=HI)
    response = call(loopback_client("gemini-2.5-pro", server.base_url), request, "sync")
    assert response.usage.output_tokens is None


# --- Responses (computer-use-preview) -----------------------------------------------


def _cua(messages: tuple[Message, ...], continuation: Continuation | None = None) -> ModelRequest:
    return ModelRequest(model="computer-use-preview", messages=messages, continuation=continuation)


def _cua_client(server: LoopbackServer, *, retry_bad_request: bool = True) -> HttpModelClient:
    return _client(
        "computer-use-preview", f"{server.base_url}/v1", retry_bad_request=retry_bad_request
    )


def test_responses_chain_across_two_calls(
    server: LoopbackServer, cua: ResponsesSimulator, screenshot: ImagePart, mode: str
) -> None:
    """The second call continues the first with previous_response_id and the new screenshot."""
    cua.script(
        [
            reasoning("Open the menu."),
            computer_call("call_1", {"type": "click", "button": "left", "x": 40, "y": 60}),
        ],
        [output_message("The settings are saved.")],
    )
    client = _cua_client(server)
    first = call(client, _cua(_history(screenshot)), mode)
    assert first.text == "Open the menu.\n\n```python\npyautogui.click(40, 60)\n```"
    assert first.continuation is not None
    assert first.continuation.call_ids == ("call_1",)

    after = png_part(1280, 800, "navy")
    messages = (*_history(screenshot)[:-1], Message("user", (TextPart("What next?"), after)))
    second = call(client, _cua(messages, first.continuation), mode)
    assert second.text == "The settings are saved.\n\nDONE"
    assert second.continuation == Continuation(response_id="resp_2")
    body = server.requests[1].json()
    assert body["previous_response_id"] == first.continuation.response_id
    assert body["input"] == [
        {
            "type": "computer_call_output",
            "call_id": "call_1",
            "output": {"type": "computer_screenshot", "image_url": after.data_url},
        }
    ]
    assert (body["tools"][0]["display_width"], body["tools"][0]["display_height"]) == (1280, 800)


def test_responses_safety_checks_are_never_acknowledged(
    server: LoopbackServer, cua: ResponsesSimulator, screenshot: ImagePart, mode: str
) -> None:
    """A pending safety check is surfaced, its action withheld, and the chain not continued for the user."""
    check = {"id": "sc_1", "code": "irrelevant_domain", "message": "This page is off task."}
    cua.script([computer_call("call_1", {"type": "type", "text": "hunter2"}, [check])])
    client = _cua_client(server)
    first = call(client, _cua(_history(screenshot)), mode)
    assert first.continuation is not None
    assert first.continuation.safety_checks == (
        ("sc_1", "irrelevant_domain", "This page is off task."),
    )
    assert "irrelevant_domain" in first.text
    assert first.text.endswith("FAIL")
    assert "hunter2" not in first.text
    with pytest.raises(SafetyCheckPending):
        call(client, _cua(_history(screenshot), first.continuation), mode)
    fresh = call(client, _cua(_history(screenshot)), mode)
    assert fresh.text.endswith("DONE")
    assert len(server.requests) == 2
    for received in server.requests:
        assert "acknowledged_safety_checks" not in json.dumps(received.json())
        assert "previous_response_id" not in received.json()


def test_the_simulated_api_refuses_unacknowledged_checks(
    server: LoopbackServer, cua: ResponsesSimulator, screenshot: ImagePart
) -> None:
    """The simulator enforces the API rule the provider guards against (a 400, not retried here)."""
    cua.script(
        [computer_call("call_1", {"type": "wait"}, [{"id": "sc_9", "code": "x", "message": "y"}])]
    )
    client = _cua_client(server, retry_bad_request=False)
    first = client.complete(_cua(_history(screenshot)))
    assert first.continuation is not None
    unchecked = attrs.evolve(first.continuation, safety_checks=())
    with pytest.raises(BadRequestError, match="acknowledged") as caught:
        client.complete(_cua(_history(screenshot), unchecked))
    assert caught.value.tries == 1


# --- empty replies ---------------------------------------------------------------

EMPTY_REPLIES = {
    "openai-chat": ("compat/empty-model", "/v1", chat_completion(None), "stop", None),
    "openai-content-filter": (
        "gpt-4o",
        "/v1",
        {
            "model": "gpt-4o",
            "choices": [
                {"index": 0, "message": {"content": None}, "finish_reason": "content_filter"}
            ],
        },
        "content_filter",
        "content_filter",
    ),
    "responses": (
        "computer-use-preview",
        "/v1",
        {
            "id": "resp_empty",
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "model": "computer-use-preview",
            "output": [{"type": "reasoning", "id": "rs_1", "summary": []}],
        },
        "max_output_tokens",
        None,
    ),
    "anthropic": (
        "claude-sonnet-4-5",
        "",
        {"type": "message", "model": "claude-sonnet-4-5", "content": [], "stop_reason": "refusal"},
        "refusal",
        "refusal",
    ),
    "gemini": (
        "gemini-2.5-pro",
        "",
        {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]},
        "MAX_TOKENS",
        None,
    ),
}


@pytest.mark.parametrize("name", sorted(EMPTY_REPLIES))
def test_an_empty_reply_is_returned_with_its_finish_reason(
    server: LoopbackServer, name: str, mode: str
) -> None:
    """A 200 with no text is a reply after one try, not an error: finish reason and refusal kept."""
    model, suffix, body, finish_reason, refusal = EMPTY_REPLIES[name]
    server.enqueue(Reply(200, body))
    client = loopback_client(model, server.base_url + suffix, retry=RetryPolicy(attempts=4))
    response = call(client, ModelRequest(model=model, messages=HI), mode)
    assert (response.text, response.tries) == ("", 1)
    assert (response.finish_reason, response.refusal) == (finish_reason, refusal)
    assert len(server.requests) == 1
