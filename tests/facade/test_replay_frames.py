"""Replays and forks read each recorded reply in the frame it was written in, whatever the
replaying agent's own scaling: the recorded actions come back byte for byte."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.registry import client_for
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import TrajectoryRecorder, read_trajectory
from adapters.trajectories.replay import ForkClient
from osharm_core import AgentConfig
from tests.facade.helpers import FAKE_KEY, SMALL, load, observation_folder

NATIVE = "anthropic-computer/claude-sonnet-4-6"  # `native` scaling: the claude preset
#: A click on the 1429x804 image the claude preset sends of a 1920x1080 screen, and where it lands.
CLICK_SENT, CLICK_SCREEN = "pyautogui.click(714, 402)", "pyautogui.click(959, 540)"
CLICK_REPLY = f"```python\n{CLICK_SENT}\n```"


def _anthropic(model: str) -> Any:
    def handler(request: httpx.Request) -> httpx.Response:
        content = [
            {
                "type": "tool_use",
                "id": "toolu_1",
                "name": "computer",
                "input": {"action": "left_click", "coordinate": [714, 402]},
            }
        ]
        body = {"id": "msg_1", "content": content, "stop_reason": "tool_use"}
        return httpx.Response(200, json=body)

    transport = httpx.MockTransport(handler)
    return client_for(model, api_key=FAKE_KEY, http_client=httpx.Client(transport=transport))


def _agent(model: str, client: Any, out: Path | None = None) -> PromptAgent:
    return PromptAgent(
        model=model,
        observation_type="screenshot",
        action_space="pyautogui",
        client=client,
        recorder=None if out is None else TrajectoryRecorder(out),
    )


def _steps(agent: PromptAgent, count: int, mode: str = "sync") -> list[Any]:
    observations = [load(SMALL[i % len(SMALL)]) for i in range(count)]
    if mode == "sync":
        return [agent.predict("task", obs)[1] for obs in observations]

    async def run() -> list[Any]:
        return [(await agent.apredict("task", obs))[1] for obs in observations]

    return asyncio.run(run())


def _record_scaled(out: Path) -> list[Any]:
    """Two steps of an anthropic-computer run (the claude frame) recorded in `out`."""
    return _steps(_agent(NATIVE, _anthropic(NATIVE), out), 2)


def _record_unscaled(out: Path) -> list[Any]:
    """Two steps of a gpt-4o run (screen pixels) recorded in `out`."""
    return _steps(_agent("gpt-4o", FakeClient([CLICK_REPLY] * 2), out), 2)


def _replays_the_same(recording: Path, capsys: pytest.CaptureFixture[str], steps: int) -> None:
    capsys.readouterr()
    assert main(["replay", str(recording)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"{steps} step(s) replayed, 0 differ"


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_replay_of_a_scaled_run_gives_its_actions(
    tmp_path: Path, mode: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """`replay:PATH` (unscaled itself) reads the recorded replies in the recorded frame."""
    recorded = _record_scaled(tmp_path / "rec")
    assert recorded == [[CLICK_SCREEN]] * 2
    model = f"replay:{tmp_path / 'rec'}"
    replayed = _steps(_agent(model, client_for(model), tmp_path / "again"), 2, mode)
    assert replayed == recorded
    again = read_trajectory(tmp_path / "again")
    assert [e.frame for e in again] == [None, None]
    assert all(e.reply_frame == read_trajectory(tmp_path / "rec")[0].frame for e in again)
    _replays_the_same(tmp_path / "again", capsys, 2)


@pytest.mark.parametrize(
    ("record", "live_model", "live_action"),
    [
        (_record_scaled, "gpt-4o", CLICK_SENT),
        (_record_unscaled, NATIVE, CLICK_SCREEN),
    ],
)
def test_a_fork_reads_the_prefix_in_the_recorded_frame_and_the_rest_in_its_own(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    record: Any,
    live_model: str,
    live_action: str,
) -> None:
    """Whichever side is scaled, the replayed steps give the recorded actions and the live
    model's reply is read in the live model's frame; the fork's record replays the same and
    its prompts rebuild."""
    recorded = record(tmp_path / "rec")
    fork = ForkClient(tmp_path / "rec", FakeClient([CLICK_REPLY]), at=2)
    actions = _steps(_agent(live_model, fork, tmp_path / "fork"), 3)
    assert actions == [*recorded, [live_action]]
    lines = read_trajectory(tmp_path / "fork")
    assert [e.reply_frame is not None for e in lines] == [True, True, False]
    _replays_the_same(tmp_path / "fork", capsys, 3)
    # Its frames are still those of the screenshots sent: the prompts rebuild.
    assert main(["render", "--trajectory", str(tmp_path / "fork"), "--step", "3"]) == 0
    # The fork's own record replays its three steps as they ran.
    model = f"replay:{tmp_path / 'fork'}"
    assert _steps(_agent(model, client_for(model)), 3) == actions


def test_a_script_that_states_no_frame_is_read_in_the_agents_frame(tmp_path: Path) -> None:
    """A hand-written script (lines naming no model) states no frame: its replies are read as
    a live model's, in the agent's own frame."""
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps({"response": CLICK_REPLY}) + "\n", encoding="utf-8")
    model = f"replay:{script}"
    config = AgentConfig(
        model=model, observation_type="screenshot", action_space="pyautogui", scaling="claude"
    )
    assert _steps(PromptAgent.from_config(config), 1) == [[CLICK_SCREEN]]


def test_an_osharm_fork_folder_records_the_frame_it_read_the_prefix_in(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run --format osharm --fork`: better_log says which frame a replayed reply was read
    in, so `replay` of the folder agrees and a fork of it gives the same actions."""
    recorded = _record_unscaled(tmp_path / "rec")
    task = observation_folder(tmp_path / "task", (SMALL[0], SMALL[1], SMALL[0]))
    (task / "task.json").write_text(
        json.dumps({"id": "_fork", "instruction": "Open the menu"}), encoding="utf-8"
    )
    live = tmp_path / "live.jsonl"
    live.write_text(json.dumps({"response": "DONE"}) + "\n", encoding="utf-8")
    argv = ["run", str(task), "--model", f"replay:{live}", "--fork", str(tmp_path / "rec")]
    argv += ["--at", "2", "--observation-type", "screenshot", "--scaling", "claude"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--format", "osharm"]) == 0
    (folder,) = (tmp_path / "out").glob("*/*/*/local/_fork")
    steps = json.loads((folder / "better_log.json").read_text(encoding="utf-8"))["steps"]
    assert [s["actions"] for s in steps] == [*recorded, ["DONE"]]
    assert [s["reply_frame"]["image_width"] for s in steps[:2]] == [1920, 1920]
    assert "reply_frame" not in steps[2]
    _replays_the_same(folder, capsys, 3)
