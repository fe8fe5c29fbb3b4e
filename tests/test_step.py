"""prepare_step / complete_step: the reference's messages, turn by turn, and the state invariants."""

from __future__ import annotations

import base64
import copy
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from osharm_core import (
    AgentConfig,
    AgentState,
    Observation,
    ObservationRecord,
    complete_step,
    linearize_accessibility_tree,
    prepare_step,
    render_openai_chat,
    system_prompt,
    tag_screenshot,
    trim_accessibility_tree,
)
from osharm_core.config import check_config
from osharm_core.step import StepRequest
from tests import strategies as s
from tests.conftest import OBSERVATIONS, fixture_observation

NEXT = "What's the next step that you will do to help with the task?"
EPISODE = ["mousepad_notes", "mousepad_file_menu", "thunar_context_menu", "xfce4_terminal_shell"]
REPLIES = [
    "I will click.\n```python\npyautogui.click(10, 20); time.sleep(0.5)\n```",
    "",
    '```json\n{"action_type": "CLICK", "x": 5, "y": 6}\n```',
    "DONE",
]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _reference_record(config: AgentConfig, obs: dict[str, Any]) -> dict[str, Any]:
    """The observation the reference stores for a turn, built straight from the public helpers."""
    kind = config.observation_type
    if kind == "som":
        masks, png, table = tag_screenshot(obs["screenshot"], obs["accessibility_tree"])
        return {
            "screenshot": _b64(png),
            "accessibility_tree": trim_accessibility_tree(table, config.a11y_tree_max_tokens),
            "masks": masks,
        }
    tree = None
    if kind != "screenshot":
        tree = trim_accessibility_tree(
            linearize_accessibility_tree(obs["accessibility_tree"]), config.a11y_tree_max_tokens
        )
    shot = None if kind == "a11y_tree" else _b64(obs["screenshot"])
    return {"screenshot": shot, "accessibility_tree": tree}


def _image(b64: str) -> dict[str, Any]:
    return {
        "type": "image_url",
        "image_url": {"url": f"data:image/png;base64,{b64}", "detail": "high"},
    }


def _reference_user(kind: str, record: dict[str, Any], current: bool) -> dict[str, Any]:
    tree = record["accessibility_tree"]
    if kind == "screenshot":
        content = [{"type": "text", "text": f"Given the screenshot as below. {NEXT}"}]
    elif kind == "a11y_tree":
        content = [
            {
                "type": "text",
                "text": f"Given the info from accessibility tree as below:\n{tree}\n{NEXT}",
            }
        ]
    elif kind == "screenshot_a11y_tree":
        text = f"Given the screenshot and info from accessibility tree as below:\n{tree}\n{NEXT}"
        content = [{"type": "text", "text": text}]
    elif current:
        text = f"Given the tagged screenshot and info from accessibility tree as below:\n{tree}\n{NEXT}"
        content = [{"type": "text", "text": text}]
    else:
        content = [{"type": "text", "text": f"Given the tagged screenshot as below. {NEXT}"}]
    if kind != "a11y_tree":
        content.append(_image(record["screenshot"]))
    return {"role": "user", "content": content}


def _reference_episode(config: AgentConfig, instruction: str) -> list[list[dict[str, Any]]]:
    """The message lists the reference agent sends over EPISODE with REPLIES as thoughts."""
    sent, records, thoughts = [], [], []
    system = (
        system_prompt(config) + f"\nYou are asked to complete the following task: {instruction}"
    )
    for name, reply in zip(EPISODE, REPLIES, strict=True):
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": [{"type": "text", "text": system}]}
        ]
        n = config.max_trajectory_length
        window = list(zip(records, thoughts, strict=True))
        if len(window) > n:
            window = [] if n == 0 else window[-n:]
        for record, thought in window:
            messages.append(_reference_user(config.observation_type, record, current=False))
            text = thought.strip() if len(thought) > 0 else "No valid action"
            messages.append({"role": "assistant", "content": [{"type": "text", "text": text}]})
        record = _reference_record(config, fixture_observation(name))
        messages.append(_reference_user(config.observation_type, record, current=True))
        sent.append(messages)
        records.append(record)
        thoughts.append(reply)
    return sent


@pytest.mark.parametrize("kind", ["screenshot", "a11y_tree", "screenshot_a11y_tree", "som"])
@pytest.mark.parametrize("history", [0, 1, 3])
def test_messages_match_the_reference_turn_by_turn(kind: str, history: int) -> None:
    """Over a four-step episode the rendered messages equal the reference's, for every type and window."""
    config = AgentConfig(
        observation_type=kind,  # type: ignore[arg-type]
        action_space="pyautogui",
        max_trajectory_length=history,
        a11y_tree_max_tokens=600,
    )
    expected = _reference_episode(config, "Save the file")
    state = AgentState()
    for step, (name, reply) in enumerate(zip(EPISODE, REPLIES, strict=True)):
        request = prepare_step(config, state, "Save the file", fixture_observation(name))
        assert render_openai_chat(request.messages, config.model) == expected[step]
        state, _ = complete_step(config, state, request, reply)
    assert len(state) == len(EPISODE)


def test_computer_use_preview_part_types() -> None:
    """computer-use-preview gets input_text / input_image parts, other models text / image_url."""
    config = AgentConfig(model="computer-use-preview", observation_type="screenshot")
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    user = render_openai_chat(request.messages, config.model)[-1]["content"]
    assert [p["type"] for p in user] == ["input_text", "input_image"]
    assert user[1]["image_url"].startswith("data:image/png;base64,")


def test_unparseable_computer_13_reply_keeps_lengths() -> None:
    """A computer_13 reply with no JSON records None actions and an empty thought."""
    config = AgentConfig(observation_type="a11y_tree")
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    state, actions = complete_step(config, AgentState(), request, "I am not sure what to do.")
    assert actions is None
    assert state.actions == (None,)
    assert state.thoughts == ("",)
    follow = prepare_step(config, state, "t", fixture_observation("mousepad_notes"))
    assert follow.messages[2].text == "No valid action"


def test_som_actions_get_tag_variables() -> None:
    """A som reply's code is prefixed with the tag_N centres of this step's marks."""
    config = AgentConfig(observation_type="som", action_space="pyautogui")
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    assert request.masks
    _, actions = complete_step(
        config, AgentState(), request, "```python\npyautogui.click(tag_1)\n```"
    )
    x, y, w, h = request.masks[0]
    assert actions is not None
    assert isinstance(actions[0], str)
    assert actions[0].startswith(f"tag_1=({x + w // 2}, {y + h // 2})\n")
    assert actions[0].endswith("pyautogui.click(tag_1)")


def test_prepare_step_checks_the_observation() -> None:
    """A dict missing what the type needs raises the typed observation error, not a KeyError."""
    config = AgentConfig(observation_type="screenshot_a11y_tree")
    with pytest.raises(ValueError, match="accessibility_tree"):
        prepare_step(
            config,
            AgentState(),
            "t",
            {"screenshot": fixture_observation("mousepad_notes")["screenshot"]},
        )
    with pytest.raises(ValueError, match="screenshot"):
        prepare_step(config, AgentState(), "t", Observation(accessibility_tree="<a/>"))


def test_check_config_names_agentconfig_for_a_dict() -> None:
    """The adapters' entry points refuse a dict where a config goes with a TypeError pointing
    at AgentConfig.from_json (the dict is a config's to_json, the likeliest mistake); the pure
    functions take the AgentConfig their signature names and do not check it again."""
    config = AgentConfig(observation_type="a11y_tree", action_space="pyautogui")
    assert check_config(config) is config
    hint = "config must be an AgentConfig \\(build one from a dict with AgentConfig.from_json\\)"
    with pytest.raises(TypeError, match=hint):
        check_config(config.to_json())
    with pytest.raises(TypeError, match="config must be an AgentConfig; got str"):
        check_config("gpt-4o")


@pytest.mark.parametrize("buffer", [bytearray, memoryview])
@pytest.mark.parametrize("kind", ["screenshot", "screenshot_a11y_tree", "som", "a11y_tree"])
@pytest.mark.parametrize("scaling", ["native", "claude"])
def test_a_hand_built_observation_of_buffers_steps_as_its_bytes_do(
    buffer: type, kind: str, scaling: str
) -> None:
    """A bytearray or memoryview screenshot and tree give the step their bytes give, and a
    change the buffer's owner makes afterwards reaches neither the observation nor the step."""
    config = AgentConfig(observation_type=kind, action_space="pyautogui", scaling=scaling)  # type: ignore[arg-type]
    raw = fixture_observation("mousepad_notes")
    png, xml = raw["screenshot"], raw["accessibility_tree"].encode()
    expected = prepare_step(config, AgentState(), "t", Observation(png, xml))  # type: ignore[arg-type]
    png_buffer, xml_buffer = bytearray(png), bytearray(xml)
    observation = Observation(buffer(png_buffer), buffer(xml_buffer))
    png_buffer[:8] = xml_buffer[:8] = b"XXXXXXXX"
    assert observation == Observation(png, xml)  # type: ignore[arg-type]
    hash(observation)
    request = prepare_step(config, AgentState(), "t", observation)
    assert (request.messages, request.observation) == (expected.messages, expected.observation)


def test_returned_actions_are_not_the_stored_ones() -> None:
    """Mutating the returned action dicts leaves the recorded state untouched."""
    config = AgentConfig(observation_type="a11y_tree")
    request = prepare_step(config, AgentState(), "t", fixture_observation("xfce4_terminal_shell"))
    reply = '```json\n{"action_type": "TYPING", "text": "ls"}\n```'
    state, actions = complete_step(config, AgentState(), request, reply)
    assert actions is not None
    assert isinstance(actions[0], dict)
    actions[0]["text"] = "rm -rf /"
    assert state.actions == (({"action_type": "TYPING", "text": "ls"},),)


@given(config=s.agent_configs(), state=s.agent_states(), reply=s.any_text)
def test_complete_step_keeps_lengths_and_input(
    config: AgentConfig, state: AgentState, reply: str
) -> None:
    """complete_step adds exactly one turn, keeps the tuples equal in length, and leaves its input alone."""
    before = copy.deepcopy(state)  # a deep snapshot: a shallow copy would share any mutation
    request = StepRequest(
        messages=(), observation=ObservationRecord(None, "tree"), masks=((1, 2, 3, 4),)
    )
    new, actions = complete_step(config, state, request, reply)
    assert state == before
    assert len(new.observations) == len(new.actions) == len(new.thoughts) == len(state) + 1
    assert new.actions[-1] == (None if actions is None else tuple(actions))
    assert new.thoughts[-1] == (reply if actions is not None else "")


@given(config=s.agent_configs(), state=s.agent_states(), instruction=st.text(max_size=30))
def test_history_window_never_exceeds_the_limit(
    config: AgentConfig, state: AgentState, instruction: str
) -> None:
    """The messages hold at most max_trajectory_length past turns: system + 2 per turn + current."""
    config = attrs.evolve(config, observation_type="screenshot")
    png = (OBSERVATIONS / "xfce4_terminal_shell.png").read_bytes()
    request = prepare_step(config, state, instruction, {"screenshot": png})
    turns = min(len(state), config.max_trajectory_length)
    assert len(request.messages) == 1 + 2 * turns + 1
    assert request.messages[0].role == "system"
    assert [m.role for m in request.messages[1:-1]] == ["user", "assistant"] * turns
