"""The Responses API provider for computer-use-preview: chaining, conversion, safety checks."""

from __future__ import annotations

import base64
import json
import struct
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st
from returns.result import Success

from adapters.contract import ModelRequest
from adapters.engine.retry import NO_RETRIES
from adapters.errors import (
    ConfigurationError,
    ContextLengthError,
    ModelCallError,
    ResponseDecodeError,
    RetryableError,
    SafetyCheckPending,
)
from adapters.providers.computer_use import to_computer_13, to_pyautogui
from adapters.providers.responses import ResponsesProvider, png_size, quote_thought
from osharm_core import Continuation, ImagePart, Message, TextPart
from osharm_core.parsing import parse_actions_from_string, parse_code_from_string
from osharm_core.vocabulary import validate_computer_13
from tests.adapters.helpers import call, loopback_client, png_part
from tests.adapters.loopback import LoopbackServer, Reply
from tests.adapters.provider_routes import computer_call, output_message, reasoning
from tests.strategies import any_text, cua_actions, disguised_special_words, safety_check_values

KEY = "sk-proj-test-0123456789"
MODEL = "computer-use-preview"

#: The shape of the computer-use guide's first reply: a reasoning summary and one click.
DOCUMENTED_REPLY: dict[str, Any] = {
    "id": "resp_67cc0001",
    "object": "response",
    "status": "completed",
    "model": "computer-use-preview-2025-03-11",
    "output": [
        {
            "type": "reasoning",
            "id": "rs_67cc0002",
            "summary": [{"type": "summary_text", "text": "Clicking on the browser address bar."}],
        },
        {
            "type": "computer_call",
            "id": "cu_67cc0003",
            "call_id": "call_zw3",
            "action": {"type": "click", "button": "left", "x": 156, "y": 50},
            "pending_safety_checks": [],
            "status": "completed",
        },
    ],
    "usage": {"input_tokens": 1200, "output_tokens": 40, "total_tokens": 1240},
}


def _conversation(image: ImagePart | None) -> tuple[Message, ...]:
    parts: tuple[TextPart | ImagePart, ...] = (TextPart("Given the screenshot, what next?"),)
    return (
        Message("system", (TextPart("You operate an Ubuntu desktop."),)),
        Message("user", parts + ((image,) if image else ())),
        Message("assistant", (TextPart("```python\npyautogui.click(1, 2)\n```"),)),
        Message("user", parts + ((image,) if image else ())),
    )


def _request(
    messages: tuple[Message, ...] = (),
    *,
    continuation: Continuation | None = None,
    action_space: str = "pyautogui",
) -> ModelRequest:
    return ModelRequest(
        model=MODEL, messages=messages, continuation=continuation, action_space=action_space
    )


def _reply(*items: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"id": "resp_2", "status": "completed", "model": MODEL, "output": list(items), **extra}


def test_first_request_sends_the_whole_history(screenshot: ImagePart) -> None:
    """Without a continuation: instructions, input_text/input_image user parts, output_text assistant parts."""
    call = ResponsesProvider(api_key=KEY).encode(_request(_conversation(screenshot)))
    assert call.url == "https://api.openai.com/v1/responses"
    assert call.headers["authorization"] == f"Bearer {KEY}"
    body = call.json
    assert body["model"] == MODEL
    assert body["instructions"] == "You operate an Ubuntu desktop."
    assert body["truncation"] == "auto"
    assert body["reasoning"] == {"summary": "concise"}
    assert body["tools"] == [
        {
            "type": "computer_use_preview",
            "display_width": 1920,
            "display_height": 1080,
            "environment": "linux",
        }
    ]
    assert "previous_response_id" not in body
    user = {
        "role": "user",
        "content": [
            {"type": "input_text", "text": "Given the screenshot, what next?"},
            {"type": "input_image", "image_url": screenshot.data_url, "detail": "high"},
        ],
    }
    assistant = {
        "role": "assistant",
        "content": [{"type": "output_text", "text": "```python\npyautogui.click(1, 2)\n```"}],
    }
    assert body["input"] == [user, assistant, user]


def test_display_size_comes_from_the_latest_screenshot() -> None:
    """The tool's display size is the PNG's own size; without a screenshot, the configured one."""
    provider = ResponsesProvider(api_key=KEY, display=(1280, 720), environment="ubuntu")
    tool = provider.encode(_request(_conversation(png_part(800, 600)))).json["tools"][0]
    assert (tool["display_width"], tool["display_height"], tool["environment"]) == (
        800,
        600,
        "ubuntu",
    )
    tool = provider.encode(_request(_conversation(None))).json["tools"][0]
    assert (tool["display_width"], tool["display_height"]) == (1280, 720)


def test_continuation_answers_each_call_with_the_current_screenshot(screenshot: ImagePart) -> None:
    """A continued chain sends previous_response_id and one computer_call_output per pending call."""
    current = png_part(1920, 1080)
    messages = (*_conversation(screenshot)[:-1], Message("user", (TextPart("next"), current)))
    continuation = Continuation(response_id="resp_1", call_ids=("call_a", "call_b"))
    body = ResponsesProvider(api_key=KEY).encode(_request(messages, continuation=continuation)).json
    assert body["previous_response_id"] == "resp_1"
    assert body["instructions"] == "You operate an Ubuntu desktop."
    assert body["input"] == [
        {
            "type": "computer_call_output",
            "call_id": call_id,
            "output": {"type": "computer_screenshot", "image_url": current.data_url},
        }
        for call_id in ("call_a", "call_b")
    ]
    assert "acknowledged_safety_checks" not in json.dumps(body)


def test_continuation_can_resend_the_user_text(screenshot: ImagePart) -> None:
    """With resend_user_text the latest user text follows the call outputs."""
    continuation = Continuation(response_id="resp_1", call_ids=("call_a",))
    provider = ResponsesProvider(api_key=KEY, resend_user_text=True, reasoning_summary=None)
    body = provider.encode(_request(_conversation(screenshot), continuation=continuation)).json
    assert "reasoning" not in body
    assert body["input"][-1] == {
        "role": "user",
        "content": [{"type": "input_text", "text": "Given the screenshot, what next?"}],
    }


def test_continuation_without_calls_sends_the_latest_user_message(screenshot: ImagePart) -> None:
    """After a reply with no computer_call, the chain continues with the new user message."""
    continuation = Continuation(response_id="resp_1")
    body = (
        ResponsesProvider(api_key=KEY)
        .encode(_request(_conversation(screenshot), continuation=continuation))
        .json
    )
    assert body["previous_response_id"] == "resp_1"
    assert [item["role"] for item in body["input"]] == ["user"]
    assert body["input"][0]["content"][1]["type"] == "input_image"


def test_continuation_needs_a_screenshot() -> None:
    """Pending calls cannot be answered without a screenshot: a ConfigurationError says so."""
    continuation = Continuation(response_id="resp_1", call_ids=("call_a",))
    with pytest.raises(ConfigurationError, match="screenshot"):
        ResponsesProvider(api_key=KEY).encode(
            _request(_conversation(None), continuation=continuation)
        )


def test_unknown_action_space_is_refused_before_any_call() -> None:
    """Only pyautogui and computer_13 are conversion targets."""
    with pytest.raises(ConfigurationError, match="computer_13"):
        ResponsesProvider(api_key=KEY).encode(_request(action_space="som_tags"))


def test_documented_reply_becomes_pyautogui_code() -> None:
    """The reasoning summary is the thought, the click one python block; the chain position is kept."""
    reply = ResponsesProvider(api_key=KEY).decode(_request(), DOCUMENTED_REPLY)
    assert reply.text == (
        "Clicking on the browser address bar.\n\n```python\npyautogui.click(156, 50)\n```"
    )
    assert reply.continuation == Continuation(response_id="resp_67cc0001", call_ids=("call_zw3",))
    assert reply.model == "computer-use-preview-2025-03-11"
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (
        1200,
        40,
        1240,
    )
    assert reply.raw is DOCUMENTED_REPLY


def test_documented_reply_becomes_computer_13_json() -> None:
    """In the computer_13 space every converted action is one json block."""
    reply = ResponsesProvider(api_key=KEY).decode(
        _request(action_space="computer_13"), DOCUMENTED_REPLY
    )
    action = {"action_type": "CLICK", "x": 156, "y": 50, "button": "left", "num_clicks": 1}
    assert reply.text == (
        f"Clicking on the browser address bar.\n\n```json\n{json.dumps(action)}\n```"
    )


@pytest.mark.parametrize(
    ("space", "done"),
    [("pyautogui", "DONE"), ("computer_13", "```json\nDONE\n```")],
)
def test_final_message_is_done(space: str, done: str) -> None:
    """A reply with only a message (no computer_call) is its text, then DONE (a json block for computer_13)."""
    body = _reply(output_message("The file is saved."))
    reply = ResponsesProvider(api_key=KEY).decode(_request(action_space=space), body)
    assert reply.text == f"The file is saved.\n\n{done}"
    assert reply.continuation == Continuation(response_id="resp_2")


def test_several_calls_and_waits_share_one_block() -> None:
    """Calls are joined in order with short pauses; a wait among them becomes a sleep."""
    body = _reply(
        computer_call("c1", {"type": "click", "button": "left", "x": 1, "y": 2}),
        computer_call("c2", {"type": "wait"}),
        computer_call("c3", {"type": "screenshot"}),
        computer_call("c4", {"type": "type", "text": "hello"}),
    )
    reply = ResponsesProvider(api_key=KEY).decode(_request(), body)
    assert reply.text == (
        "```python\npyautogui.click(1, 2)\ntime.sleep(0.5)\ntime.sleep(2)\ntime.sleep(0.5)\n"
        "pyautogui.typewrite('hello')\n```"
    )
    assert reply.continuation is not None
    assert reply.continuation.call_ids == ("c1", "c2", "c3", "c4")


def test_batched_actions_are_read_too() -> None:
    """A computer_call carrying an `actions` list converts every action in it."""
    item = computer_call("c1", {"type": "wait"})
    del item["action"]
    item["actions"] = [{"type": "move", "x": 3, "y": 4}, {"type": "keypress", "keys": ["ENTER"]}]
    reply = ResponsesProvider(api_key=KEY).decode(_request(), _reply(item))
    assert "pyautogui.moveTo(3, 4)\ntime.sleep(0.5)\npyautogui.press('enter')" in reply.text


@pytest.mark.parametrize("tool", ["computer_use_preview", "computer"])
@pytest.mark.parametrize("call_id", [None, 7, "", ["c1"]])
def test_a_call_without_a_call_id_is_refused(tool: str, call_id: object) -> None:
    """A computer_call the next request could not answer is a decode error naming it, never
    actions that run and leave the chain broken."""
    item = computer_call("c1", {"type": "type", "text": "rm -rf ~"})
    if call_id is None:
        del item["call_id"]
    else:
        item["call_id"] = call_id
    body = _reply(computer_call("c0", {"type": "click", "x": 1, "y": 1}), item)
    with pytest.raises(ResponseDecodeError, match=r"computer_call 2 \(id 'cu_c1'\) has no call_id"):
        ResponsesProvider(api_key=KEY, tool=tool).decode(_request(), body)


def test_a_repeated_call_id_is_refused() -> None:
    """Two computer_calls with one call_id cannot both be answered: the reply is refused."""
    second = computer_call("c1", {"type": "type", "text": "x"}) | {"id": "cu_other"}
    body = _reply(computer_call("c1", {"type": "click", "x": 1, "y": 1}), second)
    with pytest.raises(
        ResponseDecodeError, match="computer_call 2 \\(id 'cu_other'\\) repeats call_id 'c1'"
    ):
        ResponsesProvider(api_key=KEY, tool="computer").decode(_request(), body)


@pytest.mark.parametrize(
    ("space", "text"),
    [("pyautogui", "WAIT"), ("computer_13", '```json\n{"action_type": "WAIT"}\n```')],
)
@pytest.mark.parametrize("action", [{"type": "wait"}, {"type": "screenshot"}])
def test_only_waiting_or_looking_is_wait(space: str, text: str, action: dict[str, Any]) -> None:
    """A reply that only waits or asks for a screenshot is WAIT: the next step sends one anyway."""
    reply = ResponsesProvider(api_key=KEY).decode(
        _request(action_space=space), _reply(computer_call("c", action))
    )
    assert reply.text == text


@pytest.mark.parametrize("space", ["pyautogui", "computer_13"])
def test_pending_safety_checks_are_surfaced_and_the_flagged_action_withheld(space: str) -> None:
    """Pending checks land in the continuation, the text and raw; the flagged action is replaced by FAIL."""
    check = {
        "id": "sc_1",
        "code": "malicious_instructions",
        "message": "Odd instructions on screen.",
    }
    body = _reply(computer_call("c1", {"type": "click", "button": "left", "x": 5, "y": 5}, [check]))
    reply = ResponsesProvider(api_key=KEY).decode(_request(action_space=space), body)
    assert reply.continuation is not None
    assert reply.continuation.safety_checks == (
        ("sc_1", "malicious_instructions", "Odd instructions on screen."),
    )
    assert "malicious_instructions" in reply.text
    assert "not acknowledged" in reply.text
    assert reply.text.endswith("\n\nFAIL" if space == "pyautogui" else "\n\n```json\nFAIL\n```")
    assert "click" not in reply.text
    assert "CLICK" not in reply.text
    assert reply.raw["output"][0]["pending_safety_checks"] == [check]


@given(
    st.sampled_from(["computer_use_preview", "computer"]),
    st.sampled_from(["pyautogui", "computer_13"]),
    safety_check_values,
)
def test_any_safety_check_present_withholds_the_action(
    tool: str, space: str, checks: object
) -> None:
    """Fail closed: any pending_safety_checks that is not empty (a check with no id or an
    id that is not a string, a non-object, one object in place of the list) is pending:
    the click is withheld for FAIL, and continuing the chain raises SafetyCheckPending."""
    item = computer_call("c1", {"type": "click", "button": "left", "x": 5, "y": 5})
    item["pending_safety_checks"] = checks
    provider = ResponsesProvider(api_key=KEY, tool=tool)
    model = MODEL if tool == "computer_use_preview" else "gpt-5.4"
    request = ModelRequest(
        model=model, messages=_conversation(png_part(1280, 800)), action_space=space
    )
    reply = provider.decode(request, _reply(item))
    assert reply.continuation is not None
    if not checks:
        assert not reply.continuation.safety_checks
        assert "click" in reply.text.lower()
        return
    assert reply.continuation.safety_checks
    for check in reply.continuation.safety_checks:
        assert all(isinstance(field, str) for field in check)
    assert reply.text.endswith("\n\nFAIL" if space == "pyautogui" else "\n\n```json\nFAIL\n```")
    assert "pyautogui.click" not in reply.text
    assert "CLICK" not in reply.text
    with pytest.raises(SafetyCheckPending):
        provider.encode(attrs.evolve(request, continuation=reply.continuation))


def test_continuing_past_a_pending_safety_check_is_refused(screenshot: ImagePart) -> None:
    """A continuation that still has pending checks raises SafetyCheckPending; nothing is sent."""
    continuation = Continuation(
        response_id="resp_1",
        call_ids=("call_a",),
        safety_checks=(("sc_1", "sensitive_domain", "Banking site."),),
    )
    with pytest.raises(SafetyCheckPending, match="sensitive_domain") as caught:
        ResponsesProvider(api_key=KEY).encode(
            _request(_conversation(screenshot), continuation=continuation)
        )
    assert caught.value.checks == continuation.safety_checks
    # A safety stop is never a call failure that a retrying loop would rerun.
    assert not isinstance(caught.value, ModelCallError)


def test_a_failed_response_s_message_is_cut() -> None:
    """A 200 reply whose error message is 5 MB gives an error of a few hundred characters."""
    body = _reply(error={"message": "A" * 5_000_000})
    with pytest.raises(ResponseDecodeError, match="5,000,000 characters") as caught:
        ResponsesProvider(api_key=KEY).decode(_request(), body)
    assert len(str(caught.value)) < 1_000


def test_unknown_action_is_a_typed_error() -> None:
    """An action the converter does not know raises ResponseDecodeError naming it."""
    body = _reply(computer_call("c1", {"type": "zoom", "x": 1, "y": 1}))
    with pytest.raises(ResponseDecodeError, match="zoom"):
        ResponsesProvider(api_key=KEY).decode(_request(), body)


@pytest.mark.parametrize(
    "body",
    [
        _reply(status="failed", error={"code": "server_error", "message": "boom"}),
        {"id": "resp_3"},
        None,
    ],
)
def test_unusable_replies_are_typed_errors(body: Any) -> None:
    """A failed, empty or malformed response raises ResponseDecodeError."""
    with pytest.raises(ResponseDecodeError):
        ResponsesProvider(api_key=KEY).decode(_request(), body)


def test_errors_follow_openai_rules() -> None:
    """Error replies use the OpenAI format: context_length_exceeded falls back, 429 retries."""
    provider = ResponsesProvider(api_key=KEY)
    too_long = {
        "error": {
            "message": "too long",
            "type": "invalid_request_error",
            "code": "context_length_exceeded",
        }
    }
    assert isinstance(
        provider.error(400, {"x-request-id": "req_9"}, too_long, ""), ContextLengthError
    )
    limited = provider.error(
        429, {}, {"error": {"message": "Rate limit reached", "code": None}}, ""
    )
    assert isinstance(limited, RetryableError)


def test_key_never_in_repr(screenshot: ImagePart) -> None:
    """Neither the provider nor its encoded call shows the key."""
    provider = ResponsesProvider(api_key=KEY)
    assert KEY not in repr(provider)
    assert KEY not in repr(provider.encode(_request(_conversation(screenshot))))


@given(st.integers(1, 2**31 - 1), st.integers(1, 2**31 - 1))
def test_png_size_reads_any_header(width: int, height: int) -> None:
    """Any IHDR width and height is read back from the first 32 base64 characters."""
    head = b"\x89PNG\r\n\x1a\n" + struct.pack(">I4sII", 13, b"IHDR", width, height) + bytes(9)
    assert png_size(base64.b64encode(head).decode() + "garbage that is never decoded") == (
        width,
        height,
    )


@given(st.text(max_size=64))
def test_png_size_never_raises(data: str) -> None:
    """Anything that is not a base64 PNG gives None, never an exception."""
    result = png_size(data)
    assert result is None or (result[0] > 0 and result[1] > 0)


@given(any_text | disguised_special_words)
def test_quoted_thought_cannot_create_actions(text: str) -> None:
    """Quoted model prose holds no code fence and no bare WAIT / DONE / FAIL line, and the
    pyautogui parser reads no action in it (`DONE;` included)."""
    quoted = quote_thought(text)
    assert "```" not in quoted
    for line in quoted.splitlines():
        assert line.strip().upper() not in ("WAIT", "DONE", "FAIL")
    assert parse_code_from_string(quote_thought(text, "pyautogui")) == []


# --- the reply text reads back through the core parsers -----------------------------


def _expected_code(actions: list[dict[str, Any]]) -> list[str]:
    steps = [to_pyautogui(a) for a in actions]
    code = [s for s in steps if s is not None]
    if all(s == "WAIT" for s in code):
        return ["WAIT"]
    return ["\ntime.sleep(0.5)\n".join("time.sleep(2)" if s == "WAIT" else s for s in code)]


@given(st.lists(cua_actions, min_size=1, max_size=4), any_text, any_text)
def test_pyautogui_reply_parses_back_to_the_converted_code(
    actions: list[dict[str, Any]], summary: str, message: str
) -> None:
    """Whatever the model's prose, parse_code_from_string reads back exactly the converted code."""
    body = _reply(
        reasoning(summary),
        output_message(message),
        *(computer_call(f"c{i}", a) for i, a in enumerate(actions)),
    )
    reply = ResponsesProvider(api_key=KEY).decode(_request(), body)
    assert parse_code_from_string(reply.text) == _expected_code(actions)


@given(st.lists(cua_actions, min_size=1, max_size=4), any_text)
def test_computer_13_reply_parses_back_to_valid_actions(
    actions: list[dict[str, Any]], message: str
) -> None:
    """parse_actions_from_string reads back the converted actions, and each one is valid."""
    body = _reply(
        output_message(message), *(computer_call(f"c{i}", a) for i, a in enumerate(actions))
    )
    reply = ResponsesProvider(api_key=KEY).decode(_request(action_space="computer_13"), body)
    converted = [d for a in actions for d in to_computer_13(a)] or [{"action_type": "WAIT"}]
    parsed = parse_actions_from_string(reply.text)
    assert parsed == Success(converted)
    for action in converted:
        assert isinstance(validate_computer_13(action), Success)


@pytest.mark.parametrize("space", ["pyautogui", "computer_13"])
@given(message=any_text.filter(bool), flagged=st.booleans())
def test_done_and_fail_parse_back(space: str, message: str, flagged: bool) -> None:
    """A final message parses to DONE, a flagged call to FAIL, whatever the prose around them."""
    checks = [{"id": "sc", "code": "malicious_instructions", "message": message}]
    items = [computer_call("c", {"type": "wait"}, checks)] if flagged else []
    body = _reply(output_message(message), *items)
    reply = ResponsesProvider(api_key=KEY).decode(_request(action_space=space), body)
    word = "FAIL" if flagged else "DONE"
    if space == "pyautogui":
        assert parse_code_from_string(reply.text) == [word]
    else:
        assert parse_actions_from_string(reply.text) == Success([word])


def test_an_empty_output_is_an_empty_reply_with_its_reason() -> None:
    """No call and no text (a budget spent on hidden reasoning) is an empty reply, not DONE."""
    body = _reply(status="incomplete", incomplete_details={"reason": "max_output_tokens"})
    reply = ResponsesProvider(api_key=KEY).decode(_request(), body)
    assert (reply.text, reply.finish_reason, reply.refusal) == ("", "max_output_tokens", None)


def test_a_refusal_part_is_kept_as_the_refusal() -> None:
    """An output message refusing is the reply's refusal as well as its text."""
    refusing = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "refusal", "refusal": "I won't do that."}],
    }
    reply = ResponsesProvider(api_key=KEY).decode(_request(), _reply(refusing))
    assert reply.refusal == "I won't do that."
    assert reply.finish_reason == "completed"
    assert "I won't do that." in reply.text


@pytest.mark.parametrize(
    ("model", "summary"),
    [
        ("openai-computer/gpt-5", "auto"),
        ("openai-computer/gpt-5-mini", "auto"),
        ("openai-computer/gpt-5.4", "concise"),
        ("computer-use-preview", "concise"),
    ],
)
def test_the_reasoning_summary_is_one_the_model_accepts(
    server: LoopbackServer, model: str, summary: str
) -> None:
    """OpenAI documents `concise` for computer-use-preview and the reasoning models after gpt-5;
    gpt-5 itself answers 400 "Supported values are: 'detailed'" (openai/codex#2376), so it is
    asked for `auto`, which every reasoning model takes (it was sent `concise`)."""
    server.enqueue(Reply(200, _reply(output_message("DONE"))))
    client = loopback_client(model, f"{server.base_url}/v1", retry=NO_RETRIES)
    request = ModelRequest(model=model, messages=(Message("user", (TextPart("go"),)),))
    response = call(client, request, "sync")
    assert response.text.strip().endswith("DONE")
    (received,) = server.requests
    assert received.path == "/v1/responses"
    assert received.json()["reasoning"] == {"summary": summary}


def test_a_summary_set_by_the_caller_is_sent_as_set() -> None:
    """An explicit reasoning_summary is not second-guessed."""
    request = attrs.evolve(_request(), model="gpt-5")
    provider = ResponsesProvider(api_key=KEY, tool="computer", reasoning_summary="detailed")
    assert provider.encode(request).json["reasoning"] == {"summary": "detailed"}
