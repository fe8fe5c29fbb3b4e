"""The Anthropic Messages provider: request shape, sampling table, reply and error decoding."""

from __future__ import annotations

import base64
import itertools
from typing import Any

import pytest
from hypothesis import given

from adapters.contract import ModelRequest
from adapters.errors import (
    AuthenticationError,
    BadRequestError,
    ContextLengthError,
    ModelCallError,
    QuotaExceededError,
    ResponseDecodeError,
    RetryableError,
)
from adapters.providers.anthropic import (
    AnthropicProvider,
    media_type,
    render_messages,
    sampling_for,
)
from osharm_core import ImagePart, Message, TextPart
from tests.adapters.provider_routes import anthropic_error_body as error_body
from tests.strategies import provider_messages

KEY = "sk-ant-test-0123456789"

#: The reply example of the Messages API reference.
DOCUMENTED_REPLY: dict[str, Any] = {
    "content": [{"text": "Hi! My name is Claude.", "type": "text"}],
    "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
    "model": "claude-3-7-sonnet-20250219",
    "role": "assistant",
    "stop_reason": "end_turn",
    "stop_sequence": None,
    "type": "message",
    "usage": {"input_tokens": 2095, "output_tokens": 503},
}


def _request(
    messages: tuple[Message, ...], model: str = "claude-3-5-sonnet-20241022"
) -> ModelRequest:
    return ModelRequest(model=model, messages=messages, max_tokens=700, temperature=0.3, top_p=0.8)


def test_encode_builds_the_documented_call(screenshot: ImagePart) -> None:
    """System text goes top level, images become base64 blocks, headers carry key and version."""
    messages = (
        Message("system", (TextPart("You drive a desktop."),)),
        Message("user", (TextPart("What next?"), screenshot)),
    )
    call = AnthropicProvider(api_key=KEY).encode(_request(messages))
    assert call.method == "POST"
    assert call.url == "https://api.anthropic.com/v1/messages"
    assert call.headers["x-api-key"] == KEY
    assert call.headers["anthropic-version"] == "2023-06-01"
    assert call.headers["content-type"] == "application/json"
    assert call.json == {
        "model": "claude-3-5-sonnet-20241022",
        "max_tokens": 700,
        "system": "You drive a desktop.",
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What next?"},
                    {
                        "type": "image",
                        "source": {
                            "type": "base64",
                            "media_type": "image/png",
                            "data": screenshot.data,
                        },
                    },
                ],
            }
        ],
        "temperature": 0.3,
        "top_p": 0.8,
    }


def test_base_url_is_the_host_root() -> None:
    """A custom base URL is the host root, as in Anthropic's SDK; a trailing slash is fine."""
    provider = AnthropicProvider(api_key=KEY, base_url="http://127.0.0.1:9/")
    assert provider.encode(_request(())).url == "http://127.0.0.1:9/v1/messages"


def test_media_type_is_read_from_the_bytes() -> None:
    """An image declared PNG but holding JPEG bytes is sent as image/jpeg."""
    jpeg = base64.b64encode(b"\xff\xd8\xff\xe0" + bytes(20)).decode()
    webp = base64.b64encode(b"RIFF\x00\x00\x00\x00WEBPVP8 ").decode()
    assert media_type(ImagePart(jpeg)) == "image/jpeg"
    assert media_type(ImagePart(webp)) == "image/webp"
    assert media_type(ImagePart("AAAA", media_type="image/gif")) == "image/gif"


def test_history_alternates_and_drops_empty_text() -> None:
    """Consecutive same-role messages merge; blank text blocks, which Anthropic rejects, vanish."""
    messages = (
        Message("system", (TextPart("s1"),)),
        Message("user", (TextPart("a"),)),
        Message("user", (TextPart("  "), TextPart("b"))),
        Message("assistant", (TextPart(""),)),
        Message("assistant", (TextPart("c"),)),
        Message("user", (TextPart("d"),)),
    )
    system, turns = render_messages(messages)
    assert system == "s1"
    assert [(t["role"], [b["text"] for b in t["content"]]) for t in turns] == [
        ("user", ["a", "b"]),
        ("assistant", ["c"]),
        ("user", ["d"]),
    ]


@given(provider_messages())
def test_rendered_turns_always_satisfy_the_api(messages: tuple[Message, ...]) -> None:
    """Any conversation renders to turns that start with user, alternate, and hold no blank text."""
    _, turns = render_messages(messages)
    if turns:
        assert turns[0]["role"] == "user"
    for before, after in itertools.pairwise(turns):
        assert before["role"] != after["role"]
    for turn in turns:
        assert turn["content"]
        for block in turn["content"]:
            assert block["type"] != "text" or block["text"].strip()


@pytest.mark.parametrize(
    ("model", "sampling"),
    [
        ("claude-3-haiku-20240307", "both"),
        ("claude-3-5-sonnet-20241022", "both"),
        ("claude-3-7-sonnet-latest", "both"),
        ("claude-sonnet-4-20250514", "both"),
        ("claude-opus-4-0", "both"),
        ("claude-opus-4-1-20250805", "temperature"),
        ("claude-sonnet-4-5", "temperature"),
        ("claude-haiku-4-5-20251001", "temperature"),
        ("claude-opus-4-6", "temperature"),
        ("claude-opus-4-7", "none"),
        ("claude-opus-5", "none"),
        ("anthropic/claude-3-5-haiku-latest", "both"),
        ("mystery-model", "none"),
    ],
)
def test_sampling_table_per_family(model: str, sampling: str) -> None:
    """Each Claude family gets only the sampling parameters it accepts."""
    assert sampling_for(model) == sampling
    body = AnthropicProvider(api_key=KEY).encode(_request((), model)).json
    assert ("temperature" in body) == (sampling in ("both", "temperature"))
    assert ("top_p" in body) == (sampling == "both")
    assert body["max_tokens"] == 700


def test_sampling_override_wins_over_the_table() -> None:
    """An explicit `sampling` choice replaces the per-family table."""
    body = AnthropicProvider(api_key=KEY, sampling="none").encode(_request(())).json
    assert "temperature" not in body
    assert "top_p" not in body


def test_decode_reads_the_documented_reply() -> None:
    """The documented reply gives its text, token usage and model."""
    reply = AnthropicProvider(api_key=KEY).decode(_request(()), DOCUMENTED_REPLY)
    assert reply.text == "Hi! My name is Claude."
    assert reply.model == "claude-3-7-sonnet-20250219"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (
        2095,
        503,
        2598,
    )
    assert reply.raw is DOCUMENTED_REPLY


def test_decode_joins_text_blocks_and_skips_others() -> None:
    """Text blocks are concatenated in order; thinking and tool blocks are left out."""
    body = {
        **DOCUMENTED_REPLY,
        "content": [
            {"type": "thinking", "thinking": "hmm", "signature": "x"},
            {"type": "text", "text": "```python\n"},
            {"type": "text", "text": "pyautogui.click(1, 2)\n```"},
        ],
    }
    reply = AnthropicProvider(api_key=KEY).decode(_request(()), body)
    assert reply.text == "```python\npyautogui.click(1, 2)\n```"


@pytest.mark.parametrize(
    ("stop_reason", "refusal"),
    [("refusal", "refusal"), ("max_tokens", None), ("end_turn", None)],
)
def test_a_reply_without_text_is_an_empty_reply_with_its_stop_reason(
    stop_reason: str, refusal: str | None
) -> None:
    """No text block is an empty reply; the stop reason is kept, a refusal marked as one."""
    body = {**DOCUMENTED_REPLY, "content": [], "stop_reason": stop_reason}
    reply = AnthropicProvider(api_key=KEY).decode(_request(()), body)
    assert (reply.text, reply.finish_reason, reply.refusal) == ("", stop_reason, refusal)


@pytest.mark.parametrize("body", [{"type": "message"}, ["not", "an", "object"]])
def test_decode_without_a_content_list_is_a_typed_error(body: Any) -> None:
    """A body with no content list at all cannot be read: ResponseDecodeError."""
    with pytest.raises(ResponseDecodeError):
        AnthropicProvider(api_key=KEY).decode(_request(()), body)


@pytest.mark.parametrize(
    ("status", "body", "expected"),
    [
        (529, error_body("overloaded_error", "Overloaded"), RetryableError),
        (429, error_body("rate_limit_error", "slow down"), RetryableError),
        (500, error_body("api_error", "oops"), RetryableError),
        (
            400,
            error_body(
                "invalid_request_error", "prompt is too long: 208656 tokens > 200000 maximum"
            ),
            ContextLengthError,
        ),
        (
            400,
            error_body(
                "invalid_request_error",
                "input length and `max_tokens` exceed context limit: 178959 + 64000 > 200000, "
                "decrease input length or `max_tokens` and try again",
            ),
            ContextLengthError,
        ),
        (
            400,
            error_body(
                "invalid_request_error",
                "Your credit balance is too low to access the Anthropic API. Please go to "
                "Plans & Billing to upgrade or purchase credits.",
            ),
            QuotaExceededError,
        ),
        (402, error_body("billing_error", "payment details"), QuotaExceededError),
        # The request's bytes (Cloudflare's 32 MB limit), not its tokens: the engine makes it
        # a ServerLimitError (test_server_limits.py), the history is never silently dropped.
        (
            413,
            error_body("request_too_large", "Request exceeds the maximum size"),
            ModelCallError,
        ),
        (400, error_body("invalid_request_error", "messages: field required"), BadRequestError),
        (401, error_body("authentication_error", "invalid x-api-key"), AuthenticationError),
        (403, error_body("permission_error", "no access"), AuthenticationError),
        (404, error_body("not_found_error", "model: claude-9"), ModelCallError),
    ],
)
def test_error_classification(status: int, body: dict[str, Any], expected: type) -> None:
    """Each documented error type maps to the typed error the retry rules expect."""
    error = AnthropicProvider(api_key=KEY).error(status, {"request-id": "req_hdr"}, body, "")
    assert type(error) is expected
    assert error.status == status
    assert error.request_id == "req_hdr"
    assert body["error"]["message"] in str(error)


def test_overload_carries_retry_after_and_body_request_id() -> None:
    """A numeric retry-after is kept; without a request-id header the body's id is used."""
    error = AnthropicProvider(api_key=KEY).error(
        529, {"Retry-After": "12"}, error_body("overloaded_error", "Overloaded"), ""
    )
    assert isinstance(error, RetryableError)
    assert error.retry_after == 12.0
    assert error.request_id == "req_body"


def test_spend_limit_is_not_retried() -> None:
    """A 429 caused by the monthly spend limit is a QuotaExceededError, which waiting cannot fix."""
    body = error_body("rate_limit_error", "spend limit reached")
    body["error"]["details"] = {"error_code": "enforced_spend_limit_reached"}
    error = AnthropicProvider(api_key=KEY).error(429, {}, body, "")
    assert type(error) is QuotaExceededError


def test_non_json_error_keeps_the_text() -> None:
    """An HTML error page still gives a typed error with its text."""
    error = AnthropicProvider(api_key=KEY).error(502, {}, None, "<html>Bad Gateway</html>")
    assert isinstance(error, RetryableError)
    assert "Bad Gateway" in str(error)


def test_key_never_in_repr() -> None:
    """The provider's repr and the encoded call's repr hold no key."""
    provider = AnthropicProvider(api_key=KEY)
    assert KEY not in repr(provider)
    assert KEY not in repr(provider.encode(_request(())))


@pytest.mark.parametrize(
    ("model", "sampling"),
    [("claude-sonnet-²", "none"), ("claude-opus-٤", "none"), ("claude-3-５", "both")],
)
def test_a_model_name_with_non_ascii_digits_is_no_crash(model: str, sampling: str) -> None:
    """Digits `str.isdigit` accepts but are not ASCII (a superscript `int` refuses, other
    scripts' digits) are no version number: never a raw ValueError from encoding a request."""
    assert sampling_for(model) == sampling
    call = AnthropicProvider(api_key=KEY).encode(
        _request((Message("user", (TextPart("x"),)),), model)
    )
    assert call.json is not None
