"""Any recorded step's messages, rebuilt: our trajectories, our result folders, the reference's."""

from __future__ import annotations

import itertools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import TrajectoryError
from adapters.runs.episode import run_episode
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import TrajectoryRecorder
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
    load_result_folder,
    result_folder,
)
from adapters.trajectories.rebuild import load_recording, rebuild_step
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ServerLimits
from tests.facade.helpers import observation_folder

TASK = TaskInfo(instruction="Save the notes", domain="os", example_id="_save_notes")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
NAMES = ("mousepad_notes", "mousepad_file_menu", "xfce4_terminal_shell", "mousepad_notes")
REPLIES = [CLICK, "I am thinking.", CLICK, "DONE"]


def _clock() -> Any:
    ticks = itertools.count()
    return lambda: datetime(2026, 11, 23, 12, 0, 0).replace(second=next(ticks) % 60)


def _folder(tmp_path: Path, config: AgentConfig) -> tuple[Path, FakeClient]:
    """A four-step episode written as an OS-Harm folder; the client kept every request."""
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES), instruction=TASK.instruction)
    client = FakeClient(REPLIES)
    agent = PromptAgent.from_config(config, client=client)
    folder = result_folder(tmp_path / "results", config, TASK.domain, TASK.example_id)
    writer = ResultWriter(folder, config=config, task=TASK, max_steps=15, clock=_clock())
    run_episode(agent, env, env.reset(), writer, max_steps=15)
    return folder, client


@pytest.mark.parametrize("kind", ["screenshot_a11y_tree", "a11y_tree", "som"])
def test_every_step_of_our_folder_rebuilds_to_what_was_sent(tmp_path: Path, kind: str) -> None:
    config = AgentConfig(model="gpt-4o", observation_type=kind, action_space="pyautogui")
    folder, client = _folder(tmp_path, config)
    assert load_recording(folder).settings["observation_type"] == kind
    for number, sent in enumerate(client.requests, start=1):
        rebuilt = rebuild_step(folder, number)
        assert rebuilt.request.messages == sent.messages
        assert rebuilt.instruction == TASK.instruction


def test_a_reference_folder_without_raw_trees_rebuilds_from_its_linearized_ones(
    tmp_path: Path,
) -> None:
    """The reference keeps no raw tree: better_log's linearized one, trimmed, gives the same."""
    config = AgentConfig(
        model="gpt-4o", observation_type="screenshot_a11y_tree", action_space="pyautogui"
    )
    folder, client = _folder(tmp_path, config)
    for xml in folder.glob("*.xml"):
        xml.unlink()
    for number, sent in enumerate(client.requests, start=1):
        assert rebuild_step(folder, number).request.messages == sent.messages


@pytest.mark.parametrize("tokens", [10_000, 300])
def test_a_reference_folder_cut_to_fit_rebuilds_its_downscaled_trees(
    tmp_path: Path, tokens: int
) -> None:
    """Rebuilt from better_log's linearized trees, a step whose screenshot was downscaled to fit
    shows its tree in the smaller image's pixels, as sent (it kept screen pixels there); a
    trimmed tree too, since the whole table is mapped and then trimmed, as the step did."""
    config = AgentConfig(
        model="gpt-4o",
        observation_type="screenshot_a11y_tree",
        action_space="pyautogui",
        server_profile=ServerLimits(max_bytes=40_000),
        a11y_tree_max_tokens=tokens,
    )
    folder, client = _folder(tmp_path, config)
    for xml in folder.glob("*.xml"):
        xml.unlink()
    sizes = [e.degradation and e.degradation.screenshot_size for e in load_result_folder(folder)]
    assert any(sizes)
    for number, sent in enumerate(client.requests, start=1):
        assert rebuild_step(folder, number).request.messages == sent.messages, f"step {number}"


def test_a_jsonl_trajectory_rebuilds_to_what_was_sent(tmp_path: Path) -> None:
    config = AgentConfig(model="gpt-4o", observation_type="screenshot", action_space="pyautogui")
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES), instruction=TASK.instruction)
    client = FakeClient(REPLIES)
    agent = PromptAgent.from_config(
        config, client=client, recorder=TrajectoryRecorder(tmp_path / "run")
    )
    obs = env.reset()
    for _ in REPLIES:
        _, actions = agent.predict(TASK.instruction, obs)
        obs = env.step(actions[0] if actions else "WAIT")[0] if actions != ["DONE"] else obs
    rebuilt = rebuild_step(tmp_path / "run", 3)
    assert rebuilt.request.messages == client.requests[2].messages


@pytest.mark.parametrize("kind", ["a11y_tree", "screenshot_a11y_tree"])
def test_an_a11y_tree_step_rebuilds_without_the_screenshot_it_never_sent(
    tmp_path: Path, kind: str
) -> None:
    """A recording whose screenshots are gone rebuilt no a11y_tree step (the screenshot was
    read first and its absence refused); a prompt that holds no image does not need it, one
    that does still says so."""
    config = AgentConfig(model="gpt-4o", observation_type=kind, action_space="pyautogui")
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES[:2]), instruction=TASK.instruction)
    client = FakeClient([CLICK, "DONE"])
    agent = PromptAgent.from_config(
        config, client=client, recorder=TrajectoryRecorder(tmp_path / "run")
    )
    obs = env.reset()
    agent.predict(TASK.instruction, obs)
    agent.predict(TASK.instruction, env.step("WAIT")[0])
    for png in (tmp_path / "run").glob("*.png"):
        png.unlink()
    if kind == "a11y_tree":
        assert rebuild_step(tmp_path / "run", 2).request.messages == client.requests[1].messages
    else:
        with pytest.raises(TrajectoryError, match="step 1: cannot read its screenshot"):
            rebuild_step(tmp_path / "run", 2)


def test_what_cannot_be_rebuilt_is_a_clear_error(tmp_path: Path) -> None:
    config = AgentConfig(model="gpt-4o", observation_type="som", action_space="pyautogui")
    folder, _ = _folder(tmp_path, config)
    with pytest.raises(TrajectoryError, match="has steps 1 to 4; asked for 9"):
        rebuild_step(folder, 9)
    for xml in folder.glob("*.xml"):
        xml.unlink()
    with pytest.raises(TrajectoryError, match=r"step 1: .*set-of-marks needs the raw tree"):
        rebuild_step(folder, 1)


def test_the_cli_renders_a_recorded_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
    folder, client = _folder(tmp_path, config)
    assert main(["render", "--trajectory", str(folder), "--step", "3", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert [m["role"] for m in shown["messages"]] == ["system"] + ["user", "assistant"] * 2 + [
        "user"
    ]
    assert shown["messages"][2]["content"][0]["text"] == CLICK
    assert main(["render", "--trajectory", str(folder), "--step", "7"]) != 0
    assert "has steps 1 to 4" in capsys.readouterr().err
    assert len(client.requests) == 4


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        # As a folder written before trees were kept as UTF-8 holds a Latin-1 tree.
        (
            '<?xml version="1.0" encoding="ISO-8859-1"?><desktop-frame name="Caf\xe9"/>'.encode(
                "latin-1"
            ),
            "is not UTF-8 text",
        ),
        (b"<desktop-frame><unclosed></desktop-frame>", "not well-formed XML"),
    ],
    ids=["latin-1", "malformed"],
)
def test_a_kept_tree_that_cannot_be_read_is_a_trajectory_error_naming_the_step(
    tmp_path: Path, content: bytes, reason: str
) -> None:
    """A tree file that is not UTF-8, or not XML, stops the rebuild with a `TrajectoryError`
    naming the step and the file, never a prompt different from the one sent."""
    config = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
    folder, _ = _folder(tmp_path, config)
    (folder / "step_0.xml").write_bytes(content)
    with pytest.raises(TrajectoryError, match=reason) as caught:
        rebuild_step(folder, 1)
    assert "step 1" in str(caught.value)
    assert "step_0.xml" in str(caught.value)


def test_a_screenshot_step_does_not_read_its_kept_tree(tmp_path: Path) -> None:
    """A screenshot prompt holds no tree: a tree file that cannot be read does not stop it."""
    config = AgentConfig(model="gpt-4o", observation_type="screenshot", action_space="pyautogui")
    folder, client = _folder(tmp_path, config)
    (folder / "step_0.xml").write_bytes(b"<a>\xff</a>")
    assert rebuild_step(folder, 1).request.messages == client.requests[0].messages
