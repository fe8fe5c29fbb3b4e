"""The recorder keeps the observation the step used, in every form `Observation.from_dict` takes."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters import PromptAgent
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import TrajectoryRecorder, read_trajectory
from adapters.trajectories.rebuild import rebuild_step
from osharm_core import Observation
from tests.facade.helpers import load

NOTES = load("mousepad_notes")
PY = "Clicking.\n```python\npyautogui.click(19, 31)\n```"


def _recording_agent(observation_type: str, client: FakeClient, folder: Path) -> PromptAgent:
    """A pyautogui agent recording its steps into `folder`."""
    return PromptAgent(
        observation_type=observation_type,
        action_space="pyautogui",
        client=client,
        recorder=TrajectoryRecorder(folder),
    )


@pytest.mark.parametrize("codec", ["utf-8", "utf-16"])
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_a_memoryview_screenshot_and_a_bytes_tree_are_recorded(
    tmp_path: Path, codec: str, wrap: type
) -> None:
    """A screenshot as a memoryview and a tree as bytes are recorded as the step read them,
    so the step can be rebuilt to what was sent."""
    png, xml = NOTES["screenshot"], NOTES["accessibility_tree"]
    assert isinstance(png, bytes)
    assert isinstance(xml, str)
    client = FakeClient([PY])
    agent = _recording_agent("screenshot_a11y_tree", client, tmp_path)
    agent.predict("t", {"screenshot": wrap(png), "accessibility_tree": wrap(xml.encode(codec))})
    [entry] = read_trajectory(tmp_path)
    assert (entry.screenshot, entry.accessibility_tree) == ("step_0001.png", "step_0001.xml")
    assert (tmp_path / "step_0001.png").read_bytes() == png
    assert (tmp_path / "step_0001.xml").read_text(encoding="utf-8") == xml
    assert rebuild_step(tmp_path, 1).request.messages == client.requests[0].messages


def test_an_unused_tree_that_is_not_text_is_left_out(tmp_path: Path) -> None:
    """A tree the observation type does not use, and that no encoding reads, is not recorded
    (the step never read it) and does not stop the step."""
    agent = _recording_agent("screenshot", FakeClient([PY]), tmp_path)
    shot = NOTES["screenshot"]
    agent.predict("t", {"screenshot": memoryview(shot), "accessibility_tree": b"<a>\xff</a>"})
    [entry] = read_trajectory(tmp_path)
    assert (entry.screenshot, entry.accessibility_tree) == ("step_0001.png", None)


@pytest.mark.parametrize("codec", ["utf-8", "utf-16"])
@pytest.mark.parametrize("wrap", [bytes, bytearray, memoryview])
def test_an_observation_built_with_a_bytes_tree_is_recorded_as_text(
    tmp_path: Path, codec: str, wrap: type
) -> None:
    """An `Observation` built by hand with its tree as bytes (which its constructor takes) is
    recorded like the same tree given in a dict: as the text the step read, in UTF-8."""
    png, xml = NOTES["screenshot"], NOTES["accessibility_tree"]
    assert isinstance(png, bytes)
    assert isinstance(xml, str)
    client = FakeClient([PY])
    agent = _recording_agent("screenshot_a11y_tree", client, tmp_path)
    observation = Observation(screenshot=png, accessibility_tree=wrap(xml.encode(codec)))
    assert agent.predict("t", observation) == (PY, ["pyautogui.click(19, 31)"])
    [entry] = read_trajectory(tmp_path)
    assert (entry.screenshot, entry.accessibility_tree) == ("step_0001.png", "step_0001.xml")
    assert (tmp_path / "step_0001.xml").read_text(encoding="utf-8") == xml
    assert rebuild_step(tmp_path, 1).request.messages == client.requests[0].messages


def test_an_observation_built_with_an_undecodable_unused_tree_is_recorded_without_it(
    tmp_path: Path,
) -> None:
    """A hand-built `Observation` whose unused tree no encoding reads records the step
    without the tree, as a dict does."""
    agent = _recording_agent("screenshot", FakeClient([PY]), tmp_path)
    shot = NOTES["screenshot"]
    agent.predict("t", Observation(screenshot=shot, accessibility_tree=b"<a>\xff</a>"))
    [entry] = read_trajectory(tmp_path)
    assert (entry.screenshot, entry.accessibility_tree) == ("step_0001.png", None)
    assert len(agent.observations) == 1
