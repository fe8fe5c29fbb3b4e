"""PromptAgent: the reference's constructor and attributes over the pure core, state swaps, logging."""

from __future__ import annotations

import copy
import inspect
import json
import logging
import multiprocessing
import pickle
from pathlib import Path
from typing import Any

import attrs
import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters.accounting import Budget, UsageTotals
from adapters.agent import DEFAULT_LOGGER, PromptAgent
from adapters.contract import ModelResponse, Usage
from adapters.errors import (
    ConfigurationError,
    FakeClientExhausted,
    RetryableError,
    SafetyCheckPending,
)
from adapters.registry import client_for
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import TrajectoryRecorder, read_trajectory
from osharm_core import AgentConfig, AgentState, ConfigError, Continuation
from osharm_core.prompts import system_prompt
from tests import strategies as s
from tests.adapters.loopback import chat_completion
from tests.adapters.provider_routes import computer_call
from tests.facade.helpers import FAKE_KEY, REFERENCE_DEFAULTS, click_reply, load

NOTES = load("mousepad_notes")
MENU = load("mousepad_file_menu")
PY = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


def _agent(
    replies: list[Any], *, errors: dict[int, BaseException] | None = None, **kwargs: Any
) -> tuple[PromptAgent, FakeClient]:
    client = FakeClient(replies, errors=errors)
    options = {"observation_type": "a11y_tree", "action_space": "pyautogui", **kwargs}
    return PromptAgent(client=client, **options), client


def test_constructor_matches_the_reference() -> None:
    """Positional parameters, their order and defaults are the reference's; client and recorder are keyword-only."""
    parameters = inspect.signature(PromptAgent).parameters
    positional = [p for p in parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]
    assert {p.name: p.default for p in positional} == REFERENCE_DEFAULTS
    assert [p.name for p in positional] == list(REFERENCE_DEFAULTS)
    assert (
        parameters["client"].kind is parameters["recorder"].kind is inspect.Parameter.KEYWORD_ONLY
    )
    agent = PromptAgent()
    assert {name: getattr(agent, name) for name in REFERENCE_DEFAULTS} == REFERENCE_DEFAULTS
    assert agent.config == AgentConfig()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"observation_type": "som", "action_space": "computer_13"},
        {"observation_type": "video"},
        {"action_space": "xdotool"},
        {"platform": "macos"},
        {"max_trajectory_length": -1},
        {"temperature": 3.0},
    ],
)
def test_invalid_configurations_raise_value_error(kwargs: dict[str, Any]) -> None:
    """Invalid values and the som + computer_13 pair raise ValueError at construction, as the reference does."""
    with pytest.raises(ValueError, match="AgentConfig"):
        PromptAgent(**kwargs)


def test_config_attributes_are_writable_and_validated() -> None:
    """Setting a reference attribute updates the config through its validators."""
    agent = PromptAgent()
    agent.temperature = 0.1
    assert agent.config.temperature == 0.1
    with pytest.raises(ValueError, match="top_p"):
        agent.top_p = 7


def test_no_key_needed_until_the_first_predict(monkeypatch: pytest.MonkeyPatch) -> None:
    """Building an agent resolves no client; the first predict raises the registry's missing-key error and keeps the state."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    agent = PromptAgent(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
    with pytest.raises(ConfigurationError, match="OPENAI_API_KEY"):
        agent.predict("task", NOTES)
    assert agent.state == AgentState()


def test_predict_returns_reply_and_actions_and_grows_the_state() -> None:
    """predict gives the raw reply and the parsed actions, and appends one turn to the state."""
    agent, client = _agent([PY])
    response, actions = agent.predict("Open the File menu", NOTES)
    assert (response, actions) == (PY, ["pyautogui.click(19, 31)"])
    assert len(agent.state) == 1
    assert agent.thoughts == [PY]
    assert agent.actions == [["pyautogui.click(19, 31)"]]
    [observation] = agent.observations
    assert observation["screenshot"] is None
    assert isinstance(observation["accessibility_tree"], str)
    assert observation["accessibility_tree"].startswith("tag\tname\ttext")
    assert client.requests[0].model == "gpt-4-vision-preview"


def test_reference_attributes_are_copies_of_the_state() -> None:
    """The lists handed out are fresh; changing them never changes the agent's state."""
    agent, _ = _agent(
        ['```json\n{"action_type": "CLICK", "x": 1, "y": 2}\n```'], action_space="computer_13"
    )
    agent.predict("task", NOTES)
    actions = agent.actions
    assert actions[0] is not None
    actions[0][0]["x"] = 999
    agent.thoughts.append("x")
    agent.observations.clear()
    assert agent.actions == [[{"action_type": "CLICK", "x": 1, "y": 2}]]
    assert len(agent.thoughts) == len(agent.observations) == 1


def test_system_message_is_the_prompt_without_the_task() -> None:
    """system_message is the prompt; the sent system message adds the reference's task sentence."""
    agent, client = _agent([PY])
    assert agent.system_message == system_prompt(agent.config)
    agent.predict("Open the File menu", NOTES)
    sent = client.requests[0].messages[0]
    assert sent.role == "system"
    assert (
        sent.text
        == agent.system_message
        + "\nYou are asked to complete the following task: Open the File menu"
    )


def test_sampling_parameters_reach_the_client() -> None:
    """The request carries the agent's model, max_tokens, top_p, temperature and action space."""
    agent, client = _agent([PY], model="claude-x", max_tokens=77, top_p=0.5, temperature=0.0)
    agent.predict("t", NOTES)
    request = client.requests[0]
    assert (
        request.model,
        request.max_tokens,
        request.top_p,
        request.temperature,
        request.action_space,
    ) == (
        "claude-x",
        77,
        0.5,
        0.0,
        "pyautogui",
    )


def test_a_model_error_leaves_the_state_untouched() -> None:
    """A failing call propagates its typed error, keeps the very same state, and the next predict works."""
    error = RetryableError("overloaded", provider="fake", status=529)
    agent, client = _agent([PY, PY], errors={1: error})
    agent.predict("t", NOTES)
    before = agent.state
    with pytest.raises(RetryableError):
        agent.predict("t", MENU)
    assert agent.state is before
    agent.predict("t", MENU)
    assert len(agent.state) == 2
    assert len(client.requests[2].messages) == len(client.requests[1].messages) == 4


def test_a_bad_observation_raises_before_any_call() -> None:
    """An observation lacking what the type needs raises ValueError and calls no model."""
    agent, client = _agent([PY])
    with pytest.raises(ValueError, match="accessibility_tree"):
        agent.predict("t", {"screenshot": NOTES["screenshot"]})
    assert client.calls == 0
    assert agent.state == AgentState()


@pytest.mark.parametrize("instruction", [None, 5, b"open the file"])
def test_an_instruction_that_is_no_string_raises_before_any_call(instruction: object) -> None:
    """It used to be sent (`...following task: None`), paid for and recorded as a line no
    reader takes; now a ConfigError naming it, no call, the state unchanged."""
    agent, client = _agent([PY])
    with pytest.raises(ConfigError, match="the instruction must be a string"):
        agent.predict(instruction, NOTES)  # type: ignore[arg-type]
    assert client.calls == 0
    assert agent.state == AgentState()


@pytest.mark.parametrize("recorder", ["runs/x", Path("runs/x"), 5, TrajectoryRecorder])
def test_a_recorder_without_a_record_method_is_refused_when_built(
    tmp_path: Path, recorder: object
) -> None:
    """PromptAgent(recorder="runs/x") was taken, and the first predict paid for a model call
    before a raw AttributeError; now a ConfigError at construction (and on assignment)."""
    with pytest.raises(ConfigError, match="recorder must have a step\\(record\\) method"):
        PromptAgent(client=FakeClient([PY]), recorder=recorder)  # type: ignore[arg-type]
    agent = PromptAgent.from_config(
        AgentConfig(), client=FakeClient([PY]), recorder=TrajectoryRecorder(tmp_path)
    )
    with pytest.raises(ConfigError, match="recorder must have a step"):
        agent.recorder = recorder  # type: ignore[assignment]
    assert isinstance(agent.recorder, TrajectoryRecorder)


@pytest.mark.parametrize("client", ["gpt-4o", 5, FakeClient])
def test_a_client_that_is_not_a_model_client_is_refused_when_built(client: object) -> None:
    """PromptAgent(client="gpt-4o") was taken and failed at the first predict with a raw
    AttributeError; now a ConfigError at construction, naming what a client needs."""
    with pytest.raises(ConfigError, match="client must be a ModelClient"):
        PromptAgent(client=client)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="client must be a ModelClient"):
        PromptAgent.from_config(AgentConfig(), client=client)  # type: ignore[arg-type]


def test_reset_with_a_logger_name_is_refused() -> None:
    """reset("my-logger") was taken and the next step failed on a str's missing methods."""
    agent, _ = _agent([PY])
    with pytest.raises(ConfigError, match=r"reset\(\) takes a logging.Logger"):
        agent.reset("my-logger")  # type: ignore[arg-type]
    agent.reset(logging.LoggerAdapter(logging.getLogger("x"), {}))  # type: ignore[arg-type]

    class Quiet:  # no error(), which a failed model call logs through
        def isEnabledFor(self, level: int) -> bool:
            return False

        debug = info = warning = print

    with pytest.raises(ConfigError, match=r"reset\(\) takes a logging.Logger"):
        agent.reset(Quiet())  # type: ignore[arg-type]
    agent.predict("t", NOTES)


@pytest.mark.parametrize("budget", [{"max_episode_tokens": 100}, 100, "1.0"])
def test_a_budget_that_is_not_a_budget_is_refused_when_built(budget: object) -> None:
    """PromptAgent(budget={...}) failed at the first predict; now a ConfigError at once."""
    with pytest.raises(ConfigError, match="budget must be a Budget or None"):
        PromptAgent.from_config(AgentConfig(), client=FakeClient([PY]), budget=budget)  # type: ignore[arg-type]
    agent, client = _agent([PY])
    with pytest.raises(ConfigError, match="budget must be a Budget or None"):
        agent.budget = budget  # type: ignore[assignment]
    agent.predict("t", NOTES)
    assert client.calls == 1


def test_a_config_given_as_a_dict_points_at_from_json() -> None:
    """agent.config = config.to_json() is a TypeError naming AgentConfig.from_json."""
    agent = PromptAgent()
    with pytest.raises(TypeError, match=r"config must be an AgentConfig \(build one from a dict"):
        agent.config = AgentConfig().to_json()  # type: ignore[assignment]


def test_continuation_is_kept_and_reset_clears_it() -> None:
    """A provider's continuation is sent with the next request; reset clears it with the trajectory."""
    position = Continuation("resp_1", ("call_1",))
    agent, client = _agent([ModelResponse(text=PY, model="m", continuation=position), PY, PY])
    agent.predict("t", NOTES)
    assert agent.state.continuation == position
    agent.predict("t", MENU)
    assert client.requests[1].continuation == position
    agent.reset()
    agent.predict("t", NOTES)
    assert client.requests[2].continuation is None
    assert len(client.requests[2].messages) == 2


def test_reset_clears_the_trajectory_and_sets_the_logger() -> None:
    """reset() empties the state and restores the default logger; reset(logger) installs it; extra keywords (vm_ip) are ignored."""
    agent, _ = _agent([PY])
    agent.predict("t", NOTES)
    custom = logging.getLogger("example.run.42")
    agent.reset(custom)
    assert agent.state == AgentState()
    assert agent.logger is custom
    agent.reset()
    assert agent.logger is logging.getLogger(DEFAULT_LOGGER)
    agent.reset(custom, vm_ip="10.0.0.2")
    assert agent.logger is custom


def test_two_agents_keep_their_own_loggers(caplog: pytest.LogCaptureFixture) -> None:
    """Each agent logs to its own logger; resetting one does not redirect the other."""
    first, _ = _agent([PY])
    second, _ = _agent([PY])
    first.reset(logging.getLogger("run.first"))
    second.reset(logging.getLogger("run.second"))
    caplog.set_level(logging.DEBUG)
    first.predict("t", NOTES)
    second.predict("t", NOTES)
    names = {r.name for r in caplog.records}
    assert names == {"run.first", "run.second"}


def _openai_transport(seen: list[httpx.Request]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        body = chat_completion(
            PY, model="gpt-4o-2024-08-06", prompt_tokens=1000, completion_tokens=12
        )
        return httpx.Response(200, json=body, headers={"x-request-id": "req_1"})

    return httpx.MockTransport(handler)


def _wired_agent(
    model: str, observation_type: str, transport: httpx.MockTransport, directory: Path
) -> PromptAgent:
    """A pyautogui agent whose registry client for `model` talks to `transport`, recording into `directory`."""
    client = client_for(model, api_key=FAKE_KEY, http_client=httpx.Client(transport=transport))
    return PromptAgent(
        model=model,
        observation_type=observation_type,
        action_space="pyautogui",
        client=client,
        recorder=TrajectoryRecorder(directory),
    )


def test_logs_and_recordings_hold_no_key_and_no_image(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """With a real HTTP client and key, neither the log nor the recorded files contain the key or base64 images."""
    seen: list[httpx.Request] = []
    agent = _wired_agent("gpt-4o", "screenshot_a11y_tree", _openai_transport(seen), tmp_path)
    caplog.set_level(logging.DEBUG)
    response, actions = agent.predict("Open the File menu", NOTES)
    assert actions == ["pyautogui.click(19, 31)"]
    assert seen[0].headers["authorization"] == f"Bearer {FAKE_KEY}"
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "RESPONSE: " + response in logged
    assert FAKE_KEY not in logged
    assert "iVBORw0KGgo" not in logged
    for file in tmp_path.iterdir():
        assert FAKE_KEY.encode() not in file.read_bytes()
    [entry] = read_trajectory(tmp_path)
    assert entry.usage == Usage(input_tokens=1000, output_tokens=12, total_tokens=1012)
    assert entry.response_model == "gpt-4o-2024-08-06"
    assert "iVBORw0KGgo" not in (tmp_path / "trajectory.jsonl").read_text(encoding="utf-8")


def test_recorder_gets_the_full_observation_and_set_of_marks(tmp_path: Path) -> None:
    """The recorder keeps the screenshot even when only the tree is sent, and the tagged image with its masks for som."""
    agent, _ = _agent([PY], recorder=TrajectoryRecorder(tmp_path / "a11y"))
    agent.predict("t", NOTES)
    [entry] = read_trajectory(tmp_path / "a11y")
    assert (entry.screenshot, entry.accessibility_tree, entry.som_screenshot) == (
        "step_0001.png",
        "step_0001.xml",
        None,
    )
    assert (tmp_path / "a11y" / "step_0001.png").read_bytes() == NOTES["screenshot"]
    som, _ = _agent(
        ["```python\npyautogui.click(*tag_1)\n```"],
        observation_type="som",
        recorder=TrajectoryRecorder(tmp_path / "som"),
    )
    som.predict("t", NOTES)
    [entry] = read_trajectory(tmp_path / "som")
    assert entry.som_screenshot == "step_0001_som.png"
    assert entry.masks
    assert (tmp_path / "som" / "step_0001_som.png").read_bytes() != NOTES["screenshot"]
    line = json.loads((tmp_path / "som" / "trajectory.jsonl").read_text(encoding="utf-8"))
    assert line["actions"] == som.actions[0]


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("observation_type", "action_space"),
    [("screenshot_a11y_tree", "computer_13"), ("som", "pyautogui")],
)
async def test_apredict_matches_predict(observation_type: str, action_space: str) -> None:
    """The async path sends the same requests and reaches the same state as the sync path."""
    replies = [click_reply(action_space, observation_type), "WAIT", "DONE"]
    sync_agent, sync_client = _agent(
        list(replies), observation_type=observation_type, action_space=action_space
    )
    async_agent, async_client = _agent(
        list(replies), observation_type=observation_type, action_space=action_space
    )
    for obs in (NOTES, MENU, NOTES):
        expected = sync_agent.predict("t", obs)
        assert await async_agent.apredict("t", obs) == expected
    assert async_client.requests == sync_client.requests
    assert async_agent.state == sync_agent.state


@pytest.mark.anyio
async def test_apredict_error_keeps_the_state() -> None:
    """An error in the async call propagates and leaves the state as it was."""
    agent, _ = _agent([])
    with pytest.raises(FakeClientExhausted):
        await agent.apredict("t", NOTES)
    assert agent.state == AgentState()


def test_from_config_accepts_the_extra_options() -> None:
    """from_config builds an agent from a ready AgentConfig, including options the reference lacks."""
    config = AgentConfig(
        observation_type="a11y_tree", action_space="pyautogui", ubuntu_attributes=True
    )
    agent = PromptAgent.from_config(config, client=FakeClient([PY]))
    assert agent.config is config
    assert attrs.asdict(agent.config)["ubuntu_attributes"] is True


def _responses_transport(seen: list[dict[str, Any]]) -> httpx.MockTransport:
    """A Responses API stand-in: a click with a pending check on the second call, else a click."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        seen.append(body)
        number = len(seen)
        checks = [
            {"id": "sc_1", "code": "malicious_instructions", "message": "Suspicious text on screen"}
        ]
        click = {"type": "click", "button": "left", "x": 19, "y": 31}
        call = computer_call(f"call_{number}", click, checks if number == 2 else None)
        reply = {
            "id": f"resp_{number}",
            "object": "response",
            "model": "computer-use-preview-2025-03-11",
            "status": "completed",
            "output": [call],
            "usage": {"input_tokens": 900, "output_tokens": 30, "total_tokens": 930},
        }
        return httpx.Response(200, json=reply)

    return httpx.MockTransport(handler)


def test_computer_use_chain_through_the_agent(tmp_path: Path) -> None:
    """With the Responses provider the agent chains previous_response_id, surfaces safety checks and never acknowledges them."""
    seen: list[dict[str, Any]] = []
    transport = _responses_transport(seen)
    agent = _wired_agent("computer-use-preview", "screenshot", transport, tmp_path)
    _, actions = agent.predict("Open the File menu", NOTES)
    assert actions
    assert "pyautogui.click(19, 31" in str(actions[0])
    assert "previous_response_id" not in seen[0]
    _, actions = agent.predict("Open the File menu", MENU)
    assert seen[1]["previous_response_id"] == "resp_1"
    output = [item for item in seen[1]["input"] if item.get("type") == "computer_call_output"]
    assert [item["call_id"] for item in output] == ["call_1"]
    assert "acknowledged_safety_checks" not in json.dumps(seen[1])
    assert actions == ["FAIL"]
    assert agent.pending_safety_checks == (
        ("sc_1", "malicious_instructions", "Suspicious text on screen"),
    )
    before = agent.state
    with pytest.raises(SafetyCheckPending):
        agent.predict("Open the File menu", MENU)
    assert agent.state is before
    assert len(seen) == 2
    agent.start_new_chain()
    assert agent.pending_safety_checks == ()
    agent.predict("Open the File menu", MENU)
    assert "previous_response_id" not in seen[2]
    assert len(agent.state) == 3
    recorded = read_trajectory(tmp_path)
    assert recorded[1].continuation is not None
    assert recorded[1].continuation.safety_checks == (
        ("sc_1", "malicious_instructions", "Suspicious text on screen"),
    )
    assert recorded[1].actions == ("FAIL",)


def test_changing_the_model_re_resolves_only_a_registry_client(tmp_path: Path) -> None:
    """A client resolved from the model name follows a model change; a client given by the caller stays."""
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text(json.dumps({"response": "WAIT"}) + "\n", encoding="utf-8")
    second.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    agent = PromptAgent(
        model=f"replay:{first}", observation_type="a11y_tree", action_space="pyautogui"
    )
    assert agent.predict("t", NOTES)[1] == ["WAIT"]
    agent.model = f"replay:{second}"
    assert agent.predict("t", NOTES)[1] == ["DONE"]
    given = FakeClient([PY])
    pinned = PromptAgent(observation_type="a11y_tree", action_space="pyautogui", client=given)
    pinned.model = "gpt-4o"
    assert pinned.client is given
    with pytest.raises(TypeError, match="AgentConfig"):
        pinned.config = {"model": "x"}  # type: ignore[assignment]


_TREE_ONLY = {"accessibility_tree": NOTES["accessibility_tree"]}


@given(
    replies=st.lists(s.any_text, min_size=1, max_size=3),
    failing=st.sets(st.integers(0, 3), max_size=2),
    action_space=st.sampled_from(["pyautogui", "computer_13"]),
)
def test_any_replies_and_errors_keep_the_state_consistent(
    replies: list[str], failing: set[int], action_space: str
) -> None:
    """For any replies and failing calls, predict never fails on a reply, errors change nothing, and the lists stay aligned."""
    error = RetryableError("boom", provider="fake")
    agent, client = _agent(replies, errors=dict.fromkeys(failing, error), action_space=action_space)
    while client.remaining:
        before = agent.state
        if client.calls in failing:
            with pytest.raises(RetryableError):
                agent.predict("t", _TREE_ONLY)
            assert agent.state is before
            continue
        response, actions = agent.predict("t", _TREE_ONLY)
        assert len(agent.state) == len(before) + 1
        assert agent.thoughts[-1] == (response if actions is not None else "")
        assert agent.actions[-1] == actions
        if action_space == "pyautogui":
            assert actions is not None
    assert len(agent.observations) == len(agent.actions) == len(agent.thoughts) == len(replies)


def test_client_password_is_accepted_as_osworld_runners_pass_it() -> None:
    """OSWorld runners construct the agent with client_password; the prompt names it."""
    client = FakeClient(["DONE"])
    agent = PromptAgent(
        model="gpt-4o",
        observation_type="a11y_tree",
        action_space="pyautogui",
        client_password="osworld-public-evaluation",
        client=client,
    )
    assert agent.client_password == "osworld-public-evaluation"
    agent.predict("task", NOTES)
    assert "`osworld-public-evaluation`" in client.requests[0].messages[0].text
    agent.reset(None, vm_ip="10.0.0.2", runtime_logger=None)


@pytest.mark.parametrize("count", [10**308, 10**400])
def test_a_huge_usage_count_is_unreported_not_a_crash(tmp_path: Path, count: int) -> None:
    """A count past any float (a client of one's own may hand it over as read) leaves the cost
    unknown: the step is taken and recorded, never an OverflowError or an infinite cost."""
    reply = ModelResponse(
        text=PY, model="claude-sonnet-4-5", usage=Usage(input_tokens=count, output_tokens=1)
    )
    budget = Budget(max_run_cost=10.0)
    agent, _ = _agent([reply], budget=budget, recorder=TrajectoryRecorder(tmp_path))
    agent.model = "claude-sonnet-4-5"
    assert agent.predict("t", NOTES)[1] == ["pyautogui.click(19, 31)"]
    assert agent.usage_totals.cost_usd is None
    assert budget.run_totals.known_cost_usd == 0.0
    [entry] = read_trajectory(tmp_path)
    assert entry.cost_usd is None


def test_a_step_that_cannot_be_accounted_leaves_the_agent_as_it_was(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pricing comes before the state moves on: if it fails, the turn is neither taken nor
    recorded (the next predict asks again), and the budget's place is given back."""

    def broken(*_: object, **__: object) -> float:
        raise ArithmeticError("no price today")

    monkeypatch.setattr("adapters.agent.step_cost", broken)
    budget = Budget(max_run_cost=10.0)
    agent, _ = _agent([PY, PY], budget=budget, recorder=TrajectoryRecorder(tmp_path))
    with pytest.raises(ArithmeticError):
        agent.predict("t", NOTES)
    assert agent.state == AgentState()
    assert agent.usage_totals == UsageTotals()
    assert (budget.run_totals, budget.in_flight) == (UsageTotals(), 0)
    assert not (tmp_path / "trajectory.jsonl").exists()
    monkeypatch.undo()
    agent.predict("t", NOTES)
    assert len(agent.state) == len(read_trajectory(tmp_path)) == 1


class _Unprintable(RuntimeError):
    def __str__(self) -> str:
        raise ValueError("no text")


class _RaisingClient(FakeClient):
    def complete(self, request: Any) -> ModelResponse:
        raise _Unprintable

    async def acomplete(self, request: Any) -> ModelResponse:
        raise _Unprintable


def test_a_failed_call_whose_error_cannot_be_printed_is_logged_by_its_type(
    caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    """A client's error with a raising `__str__` is logged as `Type: <unprintable>` and
    raised as itself; logging prints no 'Logging error' block of its own."""
    agent = PromptAgent.from_config(
        AgentConfig(model="fake", observation_type="a11y_tree"), client=_RaisingClient([])
    )
    caplog.set_level(logging.ERROR)
    with pytest.raises(_Unprintable):
        agent.predict("t", NOTES)
    [record] = caplog.records
    assert "_Unprintable: <unprintable>; the trajectory is unchanged" in record.getMessage()
    assert "Logging error" not in capsys.readouterr().err
    assert len(agent.state) == 0


def _click(x: int) -> str:
    return f"Clicking.\n```python\npyautogui.click({x}, 1)\n```"


def test_a_copy_of_a_replaying_agent_goes_on_from_where_it_was(tmp_path: Path) -> None:
    """A client resolved from `replay:` holds its place in the recording: a copy taken after
    step 1 went back to reply 1 (its client was dropped and resolved anew) while its state
    held step 1. Only an HTTP client, which holds nothing of the run, is left behind."""
    recorder = PromptAgent(
        observation_type="a11y_tree", action_space="pyautogui",
        client=FakeClient([_click(1), _click(2), _click(3)]),
        recorder=TrajectoryRecorder(tmp_path / "rec"),
    )  # fmt: skip
    for _ in range(3):
        recorder.predict("t", NOTES)
    replaying = PromptAgent(
        model=f"replay:{tmp_path / 'rec'}", observation_type="a11y_tree", action_space="pyautogui"
    )
    assert replaying.predict("t", NOTES)[1] == ["pyautogui.click(1, 1)"]
    twin = copy.deepcopy(replaying)
    assert twin.predict("t", NOTES)[1] == ["pyautogui.click(2, 1)"]
    assert pickle.loads(pickle.dumps(replaying)).predict("t", NOTES)[1] == ["pyautogui.click(2, 1)"]


def test_an_agent_pickles_and_crosses_a_spawn_boundary_as_the_reference_does(
    tmp_path: Path,
) -> None:
    """OSWorld's run_multienv.py builds agents in the parent and hands them to worker
    processes; with the spawn start method (macOS, and Linux's default from Python 3.14)
    that pickles them, and the step lock made it fail. A resolved client is left behind
    (resolved again there), a given one travels, and the state goes along."""
    agent, _ = _agent([PY, PY])
    agent.predict("t", NOTES)
    twin = pickle.loads(pickle.dumps(agent))
    assert (twin.config, twin.state) == (agent.config, agent.state)
    assert twin.predict("t", NOTES)[1] == ["pyautogui.click(19, 31)"]
    assert copy.deepcopy(agent).state == agent.state
    resolved = PromptAgent(model="gpt-4o", observation_type="a11y_tree")
    # As if resolved from the model name: an HTTP client stays behind (no connection travels).
    resolved._client = client_for("compat/m", base_url="http://127.0.0.1:9/v1")
    assert pickle.loads(pickle.dumps(resolved))._client is None
    # In a spawned process (which imports only installed modules: no test helpers) the agent
    # steps and records, as a run_multienv worker would.
    recorded = PromptAgent.from_config(
        agent.config, client=FakeClient([PY]), recorder=TrajectoryRecorder(tmp_path / "child")
    )
    child = multiprocessing.get_context("spawn").Process(target=recorded.predict, args=("t", NOTES))
    child.start()
    child.join(timeout=120)
    assert child.exitcode == 0
    [entry] = read_trajectory(tmp_path / "child")
    assert list(entry.actions) == ["pyautogui.click(19, 31)"]
