"""Claude's GA computer-use toolset (`computer_toolset_20260801`) and the choice of tool per model.

The requests are checked against the anthropic SDK's own request types
(`tests/adapters/sdk_types.py`, strict about undeclared keys) and the scripted
replies against its `Message` model; the round trip runs against the loopback
simulator, which refuses what the API refuses (a beta tool for Claude 5.5, a
tool_result that does not echo `toolset_name`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import anthropic
import attrs
import pytest
import typing_extensions
from anthropic.types.beta.message_create_params import (
    MessageCreateParamsNonStreaming as BetaMessageCreateParams,
)
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from hypothesis import given

from adapters.agent import PromptAgent
from adapters.contract import ModelRequest
from adapters.engine.client import HttpModelClient
from adapters.errors import ConfigurationError, ResponseDecodeError
from adapters.providers.anthropic_computer import (
    TOOLSET,
    TOOLSET_MEMBERS,
    AnthropicComputerProvider,
    service_for,
    tool_version_for,
)
from adapters.registry import client_for
from osharm_core import ConfigError, Continuation, Message, TextPart
from osharm_core.scaling import resize_png
from tests.adapters.conftest import FAKE_KEY
from tests.adapters.helpers import MODES, TIMEOUT, call, png_part
from tests.adapters.loopback import LoopbackServer
from tests.adapters.native_routes import AnthropicComputerSimulator
from tests.adapters.sdk_types import problems
from tests.conftest import OBSERVATIONS, fixture_observation
from tests.strategies import hostile_json_numbers

pytestmark = pytest.mark.usefixtures("instant_retries")

SHOT = png_part(1280, 800)
PATH = "/toolset/v1/messages"
#: Sampling fields the SDK 2.x types (API version 2026-10-21) dropped; the library sends
#: `anthropic-version: 2023-06-01`, under which the older families still take them.
SAMPLING = ("temperature", "top_p")


def _request(model: str, continuation: Continuation | None = None) -> ModelRequest:
    messages = (
        Message("system", (TextPart("Operate the desktop."),)),
        Message("user", (TextPart("Go."), SHOT)),
    )
    if continuation is not None:
        messages += (Message("assistant", (TextPart("x"),)), Message("user", (SHOT,)))
    return ModelRequest(model=model, messages=messages, continuation=continuation)


def _member(call_id: str, name: str, **fields: Any) -> dict[str, Any]:
    """A toolset member call as the API sends it."""
    return {
        "type": "tool_use",
        "id": call_id,
        "name": name,
        "input": fields,
        "toolset_name": "computer",
        "caller": {"type": "direct"},
    }


def _reply(*content: dict[str, Any], model: str = "claude-sonnet-5-5") -> dict[str, Any]:
    """A Messages reply body (checked against the SDK's `Message` model)."""
    stop = "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    body = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": 50, "output_tokens": 5},
    }
    anthropic.types.Message.model_validate(body)
    return body


BATCH = (
    {"type": "text", "text": "I'll save the notes."},
    _member("toolu_1", "left_click", coordinate=[100, 200]),
    _member("toolu_2", "type", text="notes.txt"),
    _member("toolu_3", "key", text="Return", repeat=2),
)


# --- which tool, per model and service -------------------------------------------------


@pytest.mark.parametrize(
    ("model", "service", "tool"),
    [
        ("claude-sonnet-5-5", "claude-api", TOOLSET),
        ("claude-opus-5-5", "google-cloud", TOOLSET),
        ("claude-haiku-5-5", "claude-api", TOOLSET),
        ("claude-opus-4-8", "claude-api", TOOLSET),
        ("claude-sonnet-5", "claude-api", TOOLSET),
        ("claude-fable-5-2", "claude-api", TOOLSET),
        ("claude-sonnet-5-5", "bedrock", "computer_20251124"),
        ("claude-opus-5-5", "foundry", "computer_20251124"),
        ("claude-haiku-5-5", "bedrock", "computer_20251124"),
        ("claude-fable-5-2", "bedrock", "computer_20251124"),
        ("claude-opus-4-7", "claude-api", "computer_20251124"),
        ("claude-sonnet-4-6", "claude-api", "computer_20251124"),
        ("claude-haiku-4-5", "claude-api", "computer_20250124"),
        ("claude-sonnet-4-5-20250929", "foundry", "computer_20250124"),
        ("global.anthropic.claude-haiku-4-5-20251001-v1:0", "bedrock", "computer_20250124"),
        ("my-proxy-alias", "claude-api", "computer_20251124"),
    ],
)
def test_each_model_and_service_gets_the_tool_the_docs_give_it(
    model: str, service: Any, tool: str
) -> None:
    """The toolset where it is GA and the model takes it; a beta tool elsewhere."""
    assert tool_version_for(model, service) == tool
    call = AnthropicComputerProvider(api_key=FAKE_KEY, service=service).encode(_request(model))
    assert call.json["tools"][0]["type"] == tool
    assert ("anthropic-beta" in call.headers) == (tool != TOOLSET)


@pytest.mark.parametrize(
    ("model", "service", "forced"),
    [
        ("claude-sonnet-5-5", "claude-api", "computer_20251124"),
        ("claude-opus-5-5", "google-cloud", "computer_20250124"),
        ("claude-haiku-5-5", "claude-api", "computer_20251124"),
        ("claude-fable-5-2", "foundry", None),
        ("claude-sonnet-4-6", "claude-api", TOOLSET),
        ("claude-haiku-4-5", "claude-api", "computer_20251124"),
        ("claude-opus-5-5", "bedrock", TOOLSET),
        ("claude-3-5-sonnet-20241022", "claude-api", None),
    ],
)
def test_a_pairing_the_docs_rule_out_is_refused_before_anything_is_sent(
    model: str, service: Any, forced: str | None, server: LoopbackServer
) -> None:
    """A ConfigurationError naming the model and what it takes, and no request on the wire."""
    provider = AnthropicComputerProvider(api_key=FAKE_KEY, service=service, tool_version=forced)
    with pytest.raises(ConfigurationError, match=model):
        provider.encode(_request(model))
    simulator = AnthropicComputerSimulator()
    server.route("POST", PATH, simulator)
    aimed = attrs.evolve(provider, base_url=server.base_url + "/toolset")
    for mode in MODES:
        with pytest.raises(ConfigurationError, match=model):
            call(HttpModelClient(aimed, timeout=TIMEOUT), _request(model), mode)
    assert simulator.bodies == []
    assert server.requests == []


@pytest.mark.parametrize(
    ("base_url", "service"),
    [
        ("https://api.anthropic.com", "claude-api"),
        ("https://my-resource.services.ai.azure.com/anthropic", "foundry"),
        ("https://bedrock-runtime.us-east-1.amazonaws.com", "bedrock"),
        ("https://us-east5-aiplatform.googleapis.com/v1", "google-cloud"),
        ("http://127.0.0.1:8080", "claude-api"),
    ],
)
def test_the_service_is_read_from_the_endpoint(base_url: str, service: str) -> None:
    """Without `service=`, a Foundry, Bedrock or Google Cloud host picks that service's tools."""
    assert service_for(base_url) == service
    provider = AnthropicComputerProvider(api_key=FAKE_KEY, base_url=base_url)
    expected = TOOLSET if service in ("claude-api", "google-cloud") else "computer_20251124"
    assert provider.version_for("claude-sonnet-5-5") == expected


def test_bad_settings_are_refused_when_the_provider_is_built() -> None:
    """An unknown tool or service is a ConfigError at construction, naming the field."""
    with pytest.raises(ConfigError, match="tool_version"):
        AnthropicComputerProvider(api_key=FAKE_KEY, tool_version="computer_2099")
    with pytest.raises(ConfigError, match="service"):
        AnthropicComputerProvider(api_key=FAKE_KEY, service="azure")  # type: ignore[arg-type]


# --- the requests, against the SDK's own types ----------------------------------------


def _continued(provider: AnthropicComputerProvider, model: str) -> dict[str, Any]:
    """The request answering the BATCH reply."""
    reply = provider.decode(_request(model), _reply(*BATCH, model=model))
    return provider.encode(_request(model, reply.continuation)).json


@pytest.mark.parametrize("model", ["claude-sonnet-5-5", "claude-opus-4-8", "claude-haiku-5-5"])
def test_toolset_requests_conform_to_the_sdk_request_types(model: str) -> None:
    """First and continued toolset requests are valid `MessageCreateParamsNonStreaming`
    bodies, with no beta header and one nameless toolset entry."""
    provider = AnthropicComputerProvider(api_key=FAKE_KEY)
    first = provider.encode(_request(model))
    assert "anthropic-beta" not in first.headers
    assert first.json["tools"] == [
        {"type": TOOLSET, "configs": {"cursor_position": {"enabled": False}}}
    ]
    assert problems(first.json, MessageCreateParamsNonStreaming) == []
    assert problems(_continued(provider, model), MessageCreateParamsNonStreaming) == []


@pytest.mark.parametrize(
    ("model", "service"),
    [
        ("claude-sonnet-5-5", "foundry"),
        ("claude-opus-4-7", "claude-api"),
        ("claude-haiku-4-5", "claude-api"),
    ],
)
def test_beta_requests_conform_to_the_sdk_beta_request_types(model: str, service: Any) -> None:
    """Beta-tool requests are valid beta `MessageCreateParamsNonStreaming` bodies (sampling
    aside, see SAMPLING) and their header is one of the SDK's beta names."""
    provider = AnthropicComputerProvider(api_key=FAKE_KEY, service=service)
    call = provider.encode(_request(model))
    betas = typing_extensions.get_args(anthropic.types.AnthropicBetaParam)
    assert call.headers["anthropic-beta"] in typing_extensions.get_args(betas[-1])
    beta_reply = [
        {"type": "tool_use", "id": "toolu_1", "name": "computer", "input": {"action": "wait"}}
    ]
    continued = provider.encode(
        _request(model, provider.decode(_request(model), _reply(*beta_reply)).continuation)
    ).json
    for body in (call.json, continued):
        plain = {k: v for k, v in body.items() if k not in SAMPLING}
        assert problems(plain, BetaMessageCreateParams) == []


def test_a_stray_field_would_fail_the_conformance_check() -> None:
    """The checker is strict: a beta tool's fields on the toolset entry are refused."""
    body = AnthropicComputerProvider(api_key=FAKE_KEY).encode(_request("claude-sonnet-5-5")).json
    body["tools"] = [{"type": TOOLSET, "name": "computer", "display_width_px": 1280}]
    assert len(problems(body, MessageCreateParamsNonStreaming)) == 2


def test_zoom_off_withholds_the_zoom_member() -> None:
    """`zoom=False` disables the zoom member in the toolset's configs."""
    body = AnthropicComputerProvider(api_key=FAKE_KEY, zoom=False).encode(
        _request("claude-sonnet-5-5")
    )
    assert body.json["tools"][0]["configs"]["zoom"] == {"enabled": False}
    assert problems(body.json, MessageCreateParamsNonStreaming) == []


def test_each_call_gets_its_own_result_echoing_the_toolset_in_order() -> None:
    """The continued request resends the model's turn and answers its three calls in order,
    each with a tool_result naming the toolset; the last carries the screenshot."""
    body = _continued(AnthropicComputerProvider(api_key=FAKE_KEY), "claude-sonnet-5-5")
    assistant, answer = body["messages"][-2:]
    assert [b.get("id") for b in assistant["content"]] == [None, "toolu_1", "toolu_2", "toolu_3"]
    results = answer["content"]
    assert [(r["tool_use_id"], r["toolset_name"]) for r in results] == [
        ("toolu_1", "computer"),
        ("toolu_2", "computer"),
        ("toolu_3", "computer"),
    ]
    assert results[-1]["content"][-1]["source"]["data"] == SHOT.data
    assert all(r["content"][0]["type"] == "text" for r in results[:2])


# --- decoding replies ---------------------------------------------------------------------


def test_a_batch_converts_to_the_actions_in_order() -> None:
    """Several member calls in one turn become one pyautogui block, run in their order."""
    reply = AnthropicComputerProvider(api_key=FAKE_KEY).decode(
        _request("claude-sonnet-5-5"), _reply(*BATCH)
    )
    assert reply.continuation is not None
    assert reply.continuation.call_ids == ("toolu_1", "toolu_2", "toolu_3")
    code = reply.text.split("```")[-2]
    lines = [line for line in code.splitlines() if line.startswith("pyautogui")]
    assert lines == [
        "pyautogui.click(100, 200)",
        "pyautogui.typewrite('notes.txt')",
        "pyautogui.press('enter')",
        "pyautogui.press('enter')",
    ]


@pytest.mark.parametrize(
    "block",
    [
        {**_member("toolu_1", "left_click"), "toolset_name": None},
        {**_member("toolu_1", "left_click"), "toolset_name": "browser"},
        _member("toolu_1", "navigate", url="https://example.com"),
        {"type": "tool_use", "id": "toolu_1", "name": "computer", "input": {"action": "wait"}},
    ],
    ids=["no toolset", "browser toolset", "unknown member", "beta tool"],
)
def test_a_call_outside_the_declared_toolset_is_refused(block: dict[str, Any]) -> None:
    """Only the toolset's own members are run; anything else is a typed decode error."""
    with pytest.raises(ResponseDecodeError, match="undeclared tool"):
        AnthropicComputerProvider(api_key=FAKE_KEY).decode(
            _request("claude-sonnet-5-5"), _reply(block)
        )


@pytest.mark.parametrize("repeat", [0, -1, 2.5, 65, 10**9, "2", [2]])
def test_a_key_repeat_out_of_range_is_refused(repeat: Any) -> None:
    """`repeat` is a whole number of presses from 1 to 64; anything else is a decode error."""
    with pytest.raises(ResponseDecodeError, match="key"):
        AnthropicComputerProvider(api_key=FAKE_KEY).decode(
            _request("claude-sonnet-5-5"),
            _reply(_member("toolu_1", "key", text="a", repeat=repeat)),
        )


def _refusal(provider: AnthropicComputerProvider, body: dict[str, Any]) -> str:
    """The decode error's message for `body` (read back from its JSON text), or "" when it decodes."""
    try:
        provider.decode(_request("claude-sonnet-5-5"), json.loads(json.dumps(body)))
    except ResponseDecodeError as exc:
        return str(exc)
    return ""


@given(value=hostile_json_numbers)
def test_hostile_numbers_in_member_inputs_are_typed_errors(value: int | float) -> None:
    """Any JSON number in a member's numeric slot converts or is a short ResponseDecodeError."""
    provider = AnthropicComputerProvider(api_key=FAKE_KEY)
    for block in (
        _member("t", "left_click", coordinate=[value, 5]),
        _member("t", "scroll", scroll_direction="up", scroll_amount=value),
        _member("t", "zoom", region=[0, 0, value, 5]),
        _member("t", "key", text="a", repeat=value),
    ):
        assert len(_refusal(provider, _reply(block))) < 400


def test_the_member_list_is_the_sdk_s() -> None:
    """TOOLSET_MEMBERS are exactly the members of the SDK's toolset configs."""
    configs = anthropic.types.ComputerToolsetConfigsParam
    assert set(typing_extensions.get_type_hints(configs)) == TOOLSET_MEMBERS


# --- the round trip against the loopback simulator ---------------------------------------


def _b64_at_claude_size(name: str) -> str:
    """A fixture screenshot as the Claude scaling sends it (1920x1080 -> 1429x804)."""
    png = (OBSERVATIONS / f"{name}.png").read_bytes()
    return base64.b64encode(resize_png(png, (1429, 804))).decode()


@pytest.fixture
def simulator(server: LoopbackServer) -> AnthropicComputerSimulator:
    """A fresh Messages API simulator on its own path of the session's loopback server."""
    simulator = AnthropicComputerSimulator()
    server.route("POST", PATH, simulator)
    return simulator


def test_a_claude_5_5_episode_runs_batches_in_order_and_answers_each_call(
    server: LoopbackServer, simulator: AnthropicComputerSimulator
) -> None:
    """Through PromptAgent: the toolset goes out without a beta header, a batch of calls comes
    back and runs in order, the next request answers every call with its own tool_result, and
    the simulator (which refuses beta tools for Claude 5.5) accepts every request."""
    simulator.script(
        list(BATCH),
        [_member("toolu_4", "zoom", region=[0, 0, 400, 300]), _member("toolu_5", "screenshot")],
    )
    for turn in simulator.turns:
        _reply(*turn)
    model = "anthropic-computer/claude-sonnet-5-5"
    client = client_for(
        model, base_url=server.base_url + "/toolset", api_key=FAKE_KEY, timeout=TIMEOUT
    )
    agent = PromptAgent(
        model=model, observation_type="screenshot", action_space="pyautogui", client=client
    )
    names = ("mousepad_notes", "mousepad_file_menu", "desktop_three_windows")
    steps = [agent.predict("Save the notes.", fixture_observation(name)) for name in names]
    # The 1920x1080 screenshot goes out at 1429x804; (100, 200) there is (134, 269) on screen.
    assert steps[0][1] == [
        "pyautogui.click(134, 269)\ntime.sleep(0.5)\npyautogui.typewrite('notes.txt')"
        "\ntime.sleep(0.5)\npyautogui.press('enter')\ntime.sleep(0.5)\npyautogui.press('enter')"
    ]
    assert steps[1][1] == ["WAIT"]  # a zoom and a screenshot: only looking
    assert steps[2][1] == ["DONE"]
    first, second, third = simulator.bodies
    for body in simulator.bodies:
        assert body["tools"][0]["type"] == TOOLSET
        assert problems(body, MessageCreateParamsNonStreaming) == []
    assert first["model"] == "claude-sonnet-5-5"
    results = [b for b in second["messages"][-1]["content"] if b["type"] == "tool_result"]
    assert [r["tool_use_id"] for r in results] == ["toolu_1", "toolu_2", "toolu_3"]
    assert {r["toolset_name"] for r in results} == {"computer"}
    zoomed, shot = third["messages"][-1]["content"][:2]
    assert zoomed["content"][0]["type"] == "image"
    assert (zoomed["tool_use_id"], shot["tool_use_id"]) == ("toolu_4", "toolu_5")
    assert shot["content"][-1]["source"]["data"] == _b64_at_claude_size(names[2])
    assert all("anthropic-beta" not in r.headers for r in server.requests)
