"""Hostile numbers in native computer-use replies: huge ints, huge floats, endless scrolls.

`json.loads` reads ints of thousands of digits, which no float can hold; a
reply carrying one in any numeric slot must be a typed `ResponseDecodeError`
(never a raw `OverflowError` that ends the run), and no scroll may turn the
wheel more than `MAX_WHEEL_CLICKS` times.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.contract import HttpCall, ModelRequest, ProviderReply
from adapters.engine.client import HttpModelClient, PendingCall, interpret
from adapters.engine.retry import RetryPolicy
from adapters.errors import ModelCallError, ResponseDecodeError, UnsupportedComputerAction
from adapters.providers.anthropic_computer import AnthropicComputerProvider, read_tool_use
from adapters.providers.computer_use import (
    MAX_WHEEL_CLICKS,
    ScreenMap,
    number,
    to_pyautogui,
    wheel_clicks,
)
from adapters.providers.gemini_computer import GeminiComputerProvider, read_function_call
from adapters.providers.responses import ResponsesProvider
from osharm_core import Continuation, Message, TextPart
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, call, png_part
from tests.adapters.loopback import LoopbackServer
from tests.strategies import hostile_json_numbers

SHOT = png_part(1280, 800)
HUGE = "1" + "0" * 400

OPENAI = ResponsesProvider(api_key=FAKE_KEY, tool="computer")
PREVIEW = ResponsesProvider(api_key=FAKE_KEY)
ANTHROPIC = AnthropicComputerProvider(api_key=FAKE_KEY)
GEMINI = GeminiComputerProvider(api_key=FAKE_KEY)
MODELS = {
    "openai-responses": "computer-use-preview",
    "anthropic-computer": "claude-sonnet-4-6",
    "gemini-computer": "gemini-2.5-computer-use-preview-10-2025",
}


def _request(model: str) -> ModelRequest:
    messages = (
        Message("system", (TextPart("Operate the desktop."),)),
        Message("user", (TextPart("Go."), SHOT)),
    )
    return ModelRequest(model=model, messages=messages)


def _interpret(provider: Any, raw: str) -> ProviderReply:
    """`raw` (JSON text) read as a 200 reply to a first request, as the engine reads it."""
    request = _request(MODELS[provider.name])
    return interpret(
        provider, PendingCall(request, provider.encode(request)), 200, {}, raw.encode()
    )


#: Where a test puts its number: the JSON text of a reply holds `N` in its place.
N = "@number@"


def _raw(body: Any, value: str) -> str:
    """The JSON text of `body` with `value` (JSON number text) wherever `N` stands."""
    return json.dumps(body).replace(json.dumps(N), value)


def _openai(**action: Any) -> dict[str, Any]:
    return {"id": "r1", "output": [{"type": "computer_call", "call_id": "c1", "action": action}]}


def _anthropic(**action: Any) -> dict[str, Any]:
    block = {"type": "tool_use", "id": "toolu_1", "name": "computer", "input": action}
    return {"id": "msg_1", "stop_reason": "tool_use", "content": [block]}


def _gemini(name: str, **args: Any) -> dict[str, Any]:
    parts = [{"functionCall": {"name": name, "args": args}}]
    return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}


#: One reply per numeric slot of each protocol, the number left as `N`.
SLOTS: list[tuple[Any, dict[str, Any]]] = [
    (PREVIEW, _openai(type="click", button="left", x=N, y=5)),
    (PREVIEW, _openai(type="move", x=5, y=N)),
    (PREVIEW, _openai(type="scroll", x=5, y=5, scroll_x=0, scroll_y=N)),
    (PREVIEW, _openai(type="scroll", x=5, y=5, scroll_x=N, scroll_y=0)),
    (PREVIEW, _openai(type="drag", path=[{"x": 1, "y": 1}, {"x": N, "y": 1}])),
    (ANTHROPIC, _anthropic(action="left_click", coordinate=[N, 5])),
    (ANTHROPIC, _anthropic(action="scroll", scroll_direction="down", scroll_amount=N)),
    (ANTHROPIC, _anthropic(action="zoom", region=[0, 0, N, 5])),
    (GEMINI, _gemini("click_at", x=N, y=5)),
    (GEMINI, _gemini("scroll_at", x=5, y=5, direction="up", magnitude=N)),
]


@pytest.mark.parametrize(("provider", "body"), SLOTS)
@pytest.mark.parametrize("sign", ["", "-"])
def test_an_int_too_big_for_a_float_is_a_decode_error(
    provider: Any, body: dict[str, Any], sign: str
) -> None:
    """A 401-digit int anywhere a number goes is a short ResponseDecodeError, not an OverflowError."""
    with pytest.raises(ResponseDecodeError, match="must be a number") as caught:
        _interpret(provider, _raw(body, sign + HUGE))
    assert re.search(r"\.\.\.\(40[12] characters\)", str(caught.value))
    assert len(str(caught.value)) < 300


def _unread_openai() -> dict[str, Any]:
    body = _openai(type="screenshot")
    body["output"][0]["note"] = N
    return body


#: A reply per protocol with `N` in a field of a call that no conversion reads.
UNREAD: list[tuple[Any, dict[str, Any]]] = [
    (OPENAI, _unread_openai()),
    (PREVIEW, _unread_openai()),
    (ANTHROPIC, _anthropic(action="screenshot", note=N)),
    (GEMINI, _gemini("take_screenshot", junk=N)),
]


@pytest.mark.parametrize(("provider", "body"), UNREAD)
@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_call_holding_a_non_finite_number_is_a_decode_error(
    provider: Any, body: dict[str, Any], value: str
) -> None:
    """JSON readers take NaN; a call holding one is refused when read, never kept in the
    record that the next request resends (where it broke every later step with a ValueError)."""
    with pytest.raises(ResponseDecodeError, match="NaN or Infinity"):
        _interpret(provider, _raw(body, value))
    assert _interpret(provider, _raw(body, "1.5")).text == "WAIT"


def test_an_undeclared_tool_s_huge_name_is_quoted_short() -> None:
    """A tool_use naming a 1 MB tool is a decode error of a few hundred characters."""
    body = _anthropic(action="screenshot")
    body["content"][0]["name"] = "x" * 1_000_000
    with pytest.raises(ResponseDecodeError, match="undeclared tool") as caught:
        _interpret(ANTHROPIC, json.dumps(body))
    assert len(str(caught.value)) < 300


def test_two_tool_uses_with_one_id_are_refused() -> None:
    """Both could run, but only one tool_result can answer the id: the next request would be
    refused, and every later step with it (as for a Responses call_id repeated)."""
    body = _anthropic(action="left_click", coordinate=[10, 10])
    body["content"].append(dict(body["content"][0]))
    with pytest.raises(ResponseDecodeError, match="tool_use repeats the id"):
        _interpret(ANTHROPIC, json.dumps(body))


@pytest.mark.parametrize("tool_use_id", ["", None, 7, ["toolu_1"]], ids=repr)
def test_a_tool_use_without_a_non_empty_string_id_is_refused(tool_use_id: Any) -> None:
    """No tool_result could answer it (Anthropic refuses an empty tool_use_id): refused before
    its gestures run, as a Responses call without a call_id is (an empty id was accepted)."""
    body = _anthropic(action="left_click", coordinate=[10, 10])
    body["content"][0]["id"] = tool_use_id
    with pytest.raises(ResponseDecodeError, match="tool_use without an id to answer"):
        _interpret(ANTHROPIC, json.dumps(body))
    del body["content"][0]["id"]
    with pytest.raises(ResponseDecodeError, match="tool_use without an id to answer"):
        _interpret(ANTHROPIC, json.dumps(body))


@pytest.mark.parametrize("field", ["press_enter", "clear_before_typing"])
@pytest.mark.parametrize("value", ["false", 0, 1, [], {}], ids=repr)
def test_a_gemini_flag_that_is_not_true_or_false_is_refused(field: str, value: Any) -> None:
    """`"false"` is not false: it was read as the default (Enter pressed, the field cleared)."""
    args = {"x": 5, "y": 5, "text": "DROP TABLE", field: value}
    with pytest.raises(ResponseDecodeError, match=f"'{field}' must be true or false"):
        _interpret(GEMINI, json.dumps(_gemini("type_text_at", **args)))


def test_a_gemini_flag_absent_or_null_is_its_default() -> None:
    """type_text_at clears the field and presses Enter unless told not to."""
    for extra in ({}, {"press_enter": None, "clear_before_typing": None}):
        body = _gemini("type_text_at", x=5, y=5, text="hi", **extra)
        assert "backspace" in _interpret(GEMINI, json.dumps(body)).text
        assert "press('enter')" in _interpret(GEMINI, json.dumps(body)).text
    body = _gemini(
        "type_text_at", x=5, y=5, text="hi", press_enter=False, clear_before_typing=False
    )
    assert "backspace" not in _interpret(GEMINI, json.dumps(body)).text


@pytest.mark.parametrize(
    "args",
    ["rm -rf ~", 7, [{"safety_decision": {"decision": "require_confirmation"}}]],
    ids=repr,
)
def test_gemini_args_that_are_not_an_object_are_refused(args: Any) -> None:
    """They were read as no args (so `go_back` ran, and a safety decision inside was missed):
    the call is refused before any action, failing closed."""
    body = _gemini("go_back")
    body["candidates"][0]["content"]["parts"][0]["functionCall"]["args"] = args
    with pytest.raises(ResponseDecodeError, match="go_back: args must be an object"):
        _interpret(GEMINI, json.dumps(body))


def test_a_request_json_cannot_carry_is_a_typed_error_and_nothing_is_sent(
    server: LoopbackServer,
) -> None:
    """A continuation record holding NaN (from an older version, or edited by hand) makes a body
    JSON cannot write: a ModelCallError before anything is sent, never a raw ValueError."""
    record = json.dumps([_anthropic(action="screenshot", note=N)["content"][0]])
    continuation = Continuation("msg_1", ("toolu_1",), native=record.replace(json.dumps(N), "NaN"))
    messages = (
        Message("user", (TextPart("Go."), SHOT)),
        Message("assistant", (TextPart("WAIT"),)),
        Message("user", (TextPart("Next."), SHOT)),
    )
    request = ModelRequest(model="claude-sonnet-4-6", messages=messages, continuation=continuation)
    provider = AnthropicComputerProvider(api_key=FAKE_KEY, base_url=server.base_url)
    for mode in MODES:
        client = HttpModelClient(provider, retry=RetryPolicy(attempts=1))
        with pytest.raises(ModelCallError, match="cannot be written as JSON") as caught:
            call(client, request, mode)
        assert not isinstance(caught.value, ValueError)
    assert server.requests == []


@given(hostile_json_numbers)
def test_number_accepts_what_a_float_holds_and_refuses_the_rest(value: int | float) -> None:
    """`number` passes any finite number a float can hold through unchanged and refuses the rest."""
    try:
        float(value)
    except OverflowError:
        with pytest.raises(UnsupportedComputerAction):
            number(value, "here")
    else:
        assert number(value, "here") is value


@given(st.sampled_from(SLOTS), hostile_json_numbers)
def test_any_number_in_any_slot_converts_or_is_a_typed_error(
    slot: tuple[Any, dict[str, Any]], value: int | float
) -> None:
    """Whatever number a reply carries, reading it gives a reply or a ModelCallError, nothing else."""
    provider, body = slot
    try:
        reply = _interpret(provider, _raw(body, json.dumps(value)))
    except ModelCallError:
        return
    for clicks in re.findall(r"scroll\((-?\d+)\)", reply.text):
        assert abs(int(clicks)) <= MAX_WHEEL_CLICKS


@attrs.frozen
class _Failing:
    """A provider whose decode fails with a given exception (what a provider bug looks like)."""

    failure: BaseException
    name = "failing"

    def encode(self, request: ModelRequest) -> HttpCall:
        return OPENAI.encode(request)

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        raise self.failure

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        return OPENAI.error(status, headers, body, text)


@pytest.mark.parametrize(
    "failure",
    [OverflowError("int too large"), ZeroDivisionError("division by zero"), RecursionError("deep")],
)
def test_arithmetic_and_recursion_failures_in_decoding_are_decode_errors(
    failure: BaseException,
) -> None:
    """The engine reads a provider's arithmetic or recursion failure as an unreadable reply."""
    provider = _Failing(failure)
    request = _request("computer-use-preview")
    pending = PendingCall(request, provider.encode(request))
    with pytest.raises(ResponseDecodeError, match=type(failure).__name__):
        interpret(provider, pending, 200, {}, b'{"id": "r1", "output": []}')


# --- wheel clicks ----------------------------------------------------------------------------


def test_openai_scrolls_are_bounded_like_anthropic_ones() -> None:
    """At most MAX_WHEEL_CLICKS clicks per scroll, for OpenAI's pixels and Anthropic's clicks alike."""
    assert MAX_WHEEL_CLICKS == 1000
    assert wheel_clicks(100_000, 100) == 1000
    assert wheel_clicks(-100_000, 100) == -1000
    for pixels in (100_001, -100_001, 1e300, -1e300):
        with pytest.raises(UnsupportedComputerAction, match="more than 1000 wheel clicks"):
            wheel_clicks(pixels, 100)
    code = to_pyautogui({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": 100_000})
    assert code == "pyautogui.moveTo(1, 1)\npyautogui.scroll(-1000)"
    with pytest.raises(UnsupportedComputerAction):
        to_pyautogui({"type": "scroll", "x": 1, "y": 1, "scroll_x": 0, "scroll_y": 1e300})
    down = {"action": "scroll", "scroll_direction": "down"}
    assert read_tool_use({**down, "scroll_amount": 1000})[0].scroll == (0, -1000)
    with pytest.raises(UnsupportedComputerAction, match="out of range"):
        read_tool_use({**down, "scroll_amount": 1001})


def test_a_gemini_scroll_of_the_whole_grid_stays_in_bounds() -> None:
    """Gemini's largest magnitude (the whole grid) on a 4K screen is well within the bound."""
    screen = ScreenMap((1000, 1000), (3840, 2160), (3840, 2160))
    args = {"x": 1, "y": 1, "direction": "down", "magnitude": 1000}
    (gesture,) = read_function_call("scroll_at", args, screen=screen)
    assert gesture.scroll == (0, -22)


def test_a_hostile_scroll_is_refused_before_it_reaches_the_desktop() -> None:
    """The reviewer's scroll_y 1e300 is a ResponseDecodeError, with no 300-digit number in it."""
    raw = _raw(_openai(type="scroll", x=5, y=5, scroll_x=0, scroll_y=N), "1e300")
    with pytest.raises(ResponseDecodeError, match="more than 1000 wheel clicks") as caught:
        _interpret(PREVIEW, raw)
    assert len(str(caught.value)) < 300
