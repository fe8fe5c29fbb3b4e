"""A rebuilt step is the step as sent: across resets, scaled, cut down to fit a server profile.

And `osharm-agent replay` of a result folder compares like a jsonl recording does: the
folder keeps the marks, frame and cuts (extra better_log keys the judge ignores).
"""

from __future__ import annotations

import functools
import io
import itertools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest
from PIL import Image

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import TrajectoryError
from adapters.runs import OsworldTask, run_task_list
from adapters.runs.episode import run_episode
from adapters.testing import FakeClient
from adapters.trajectories import jsonl
from adapters.trajectories.jsonl import TrajectoryRecorder, episode_steps, open_trajectory
from adapters.trajectories.osharm import (
    BETTER_LOG,
    ResultWriter,
    TaskInfo,
    load_result_folder,
    result_folder,
)
from adapters.trajectories.rebuild import rebuild_step
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ServerLimits
from tests.facade.helpers import load

TASK = TaskInfo(instruction="Save the notes", domain="os", example_id="_save_notes")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
TAG_CLICK = "Clicking the first mark.\n```python\npyautogui.click(*tag_1)\n```"
NAMES = ("mousepad_notes", "mousepad_file_menu", "xfce4_terminal_shell", "mousepad_notes")


@functools.cache
def _small_png(name: str) -> bytes:
    """The fixture's screenshot at 480x270, so scaling and cutting it takes little time."""
    image = Image.open(io.BytesIO(load(name)["screenshot"]))  # type: ignore[arg-type]
    buffer = io.BytesIO()
    image.resize((480, 270)).save(buffer, format="PNG")
    return buffer.getvalue()


def _observation(name: str) -> dict[str, object]:
    return {**load(name), "screenshot": _small_png(name)}


def _observation_folder(target: Path) -> Path:
    target.mkdir(parents=True)
    for number, name in enumerate(NAMES, start=1):
        observation = _observation(name)
        (target / f"{number:02d}_{name}.png").write_bytes(_small_png(name))
        (target / f"{number:02d}_{name}.xml").write_text(
            str(observation["accessibility_tree"]), encoding="utf-8"
        )
    return target


def _config(**fields: Any) -> AgentConfig:
    return AgentConfig(model="gpt-4o", action_space="pyautogui", **fields)


#: Settings whose requests differ from the plain ones: each cuts or scales something.
CASES = {
    "images-cut": _config(
        observation_type="screenshot_a11y_tree",
        server_profile=ServerLimits(max_images=2, max_bytes=20_000),
    ),
    "trees-cut": _config(
        observation_type="a11y_tree", server_profile=ServerLimits(max_input_tokens=1500)
    ),
    "scaled": AgentConfig(
        model="claude-sonnet-4-5",
        observation_type="screenshot",
        action_space="pyautogui",
        scaling="max_pixels=60000",
    ),
    "scaled-and-cut": _config(
        observation_type="screenshot_a11y_tree",
        scaling="max_pixels=60000",
        server_profile=ServerLimits(max_bytes=14_000),
    ),
    "som-scaled-cut": _config(
        observation_type="som",
        scaling="max_pixels=60000",
        server_profile=ServerLimits(max_images=1, max_input_tokens=1200),
    ),
}


def _reply(config: AgentConfig) -> str:
    return TAG_CLICK if config.observation_type == "som" else CLICK


def _changed(entries: Any) -> bool:
    return any(e.frame is not None or e.degradation is not None for e in entries)


@pytest.mark.parametrize("name", CASES)
def test_every_step_across_a_reset_rebuilds_to_what_was_sent(tmp_path: Path, name: str) -> None:
    """Two episodes through one recorder: each step's history is its own episode's."""
    config = CASES[name]
    client = FakeClient([_reply(config)] * 5)
    recorder = TrajectoryRecorder(tmp_path / "run")
    agent = PromptAgent.from_config(config, client=client, recorder=recorder)
    for observation in NAMES[:3]:
        agent.predict("first task", _observation(observation))
    agent.reset()
    for observation in NAMES[1:3]:
        agent.predict("second task", _observation(observation))
    entries = open_trajectory(tmp_path / "run").entries
    assert [e.episode_step for e in entries] == [None, None, None, 1, None]
    assert episode_steps(entries) == (1, 2, 3, 1, 2)
    assert _changed(entries)
    for number, sent in enumerate(client.requests, start=1):
        rebuilt = rebuild_step(tmp_path / "run", number)
        assert rebuilt.request.messages == sent.messages, f"step {number}"
    assert len(client.requests[3].messages) == 2  # a fresh episode: system and the observation


def _clock() -> Any:
    ticks = itertools.count()
    return lambda: datetime(2026, 11, 23, 12, 0, 0).replace(second=next(ticks) % 60)


def _folder(tmp_path: Path, config: AgentConfig, replies: list[str]) -> tuple[Path, FakeClient]:
    env = ReplayEnv(_observation_folder(tmp_path / "obs"), instruction=TASK.instruction)
    client = FakeClient(replies)
    agent = PromptAgent.from_config(config, client=client)
    folder = result_folder(tmp_path / "results", config, TASK.domain, TASK.example_id)
    writer = ResultWriter(folder, config=config, task=TASK, max_steps=15, clock=_clock())
    run_episode(agent, env, env.reset(), writer, max_steps=15)
    return folder, client


@pytest.mark.parametrize("name", CASES)
def test_every_step_of_a_result_folder_rebuilds_and_replays_the_same(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = CASES[name]
    folder, client = _folder(tmp_path, config, [_reply(config)] * 2 + ["DONE"])
    assert _changed(load_result_folder(folder))
    for number, sent in enumerate(client.requests, start=1):
        assert rebuild_step(folder, number).request.messages == sent.messages, f"step {number}"
    assert main(["replay", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "DIFFERS" not in out
    assert "3 step(s) replayed, 0 differ\n" in out


def test_an_ordinary_folder_gets_no_extra_keys(tmp_path: Path) -> None:
    """Nothing scaled, no marks, nothing cut: better_log holds only the reference's keys."""
    for kind in ("screenshot_a11y_tree", "a11y_tree"):
        folder, _ = _folder(tmp_path / kind, _config(observation_type=kind), [CLICK, "DONE"])
        log = json.loads((folder / BETTER_LOG).read_text(encoding="utf-8"))
        assert "scaling" not in log["params"]
        for step in log["steps"]:
            assert sorted(step) == ["a11y_tree", "actions", "response", "screenshot_file"]


def test_a_som_folder_without_marks_is_not_comparable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A folder the reference wrote keeps no boxes: its tag_N steps are reported, not DIFFERS."""
    folder, _ = _folder(tmp_path, _config(observation_type="som"), [TAG_CLICK, "DONE"])
    log_file = folder / BETTER_LOG
    log = json.loads(log_file.read_text(encoding="utf-8"))
    for step in log["steps"]:
        del step["masks"]
    log_file.write_text(json.dumps(log), encoding="utf-8")
    assert main(["replay", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "step 1: not comparable" in out
    assert out.endswith("2 step(s) replayed, 0 differ, 2 not comparable\n")
    assert main(["replay", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["not_comparable"] == [1, 2]


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("masks", "boxes", "'masks' must be a list"),
        ("frame", {"screen_width": 0}, "'frame'"),
        ("degradation", [1], "'degradation'"),
    ],
)
def test_bad_extra_keys_in_better_log_are_clear_errors(
    tmp_path: Path, key: str, value: object, message: str
) -> None:
    folder, _ = _folder(tmp_path, _config(observation_type="a11y_tree"), [CLICK, "DONE"])
    log_file = folder / BETTER_LOG
    log = json.loads(log_file.read_text(encoding="utf-8"))
    log["steps"][1][key] = value
    log_file.write_text(json.dumps(log), encoding="utf-8")
    with pytest.raises(TrajectoryError, match=rf"steps\[1\]: {message}"):
        load_result_folder(folder)


def _recorded_run(tmp_path: Path, config: AgentConfig) -> FakeClient:
    """Two steps of `config` recorded into tmp_path/run; the client holds what was sent."""
    client = FakeClient([CLICK] * 2)
    agent = PromptAgent.from_config(
        config, client=client, recorder=TrajectoryRecorder(tmp_path / "run")
    )
    for observation in NAMES[:2]:
        agent.predict("task", _observation(observation))
    return client


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def test_a_step_lost_by_the_recorder_leaves_its_episode_unrebuildable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A full disk loses step 2's line; step 3 says where it stood, so it is refused, not wrong."""
    config = _config(observation_type="a11y_tree")
    client = FakeClient([CLICK] * 3)
    agent = PromptAgent.from_config(
        config, client=client, recorder=TrajectoryRecorder(tmp_path / "run")
    )
    agent.predict("task", _observation(NAMES[0]))
    real = jsonl._fsync_write

    def full(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jsonl, "_fsync_write", full)
    with pytest.raises(OSError, match="No space"):
        agent.predict("task", _observation(NAMES[1]))
    monkeypatch.setattr(jsonl, "_fsync_write", real)
    agent.predict("task", _observation(NAMES[2]))
    entries = open_trajectory(tmp_path / "run").entries
    assert [e.episode_step for e in entries] == [None, 3]
    assert rebuild_step(tmp_path / "run", 1).request.messages == client.requests[0].messages
    with pytest.raises(TrajectoryError, match=r"step 2 was step 3 of its agent's episode"):
        rebuild_step(tmp_path / "run", 2)


def test_an_unstated_scaling_or_setting_is_refused_not_shown_wrong(tmp_path: Path) -> None:
    """Frames recorded without the scaling that made them (an older recording) need it given;
    a cut that does not come out at the recorded size means a setting differs."""
    config = CASES["scaled-and-cut"]
    client = _recorded_run(tmp_path, config)
    file = tmp_path / "run" / jsonl.TRAJECTORY_FILE
    lines = _lines(file)
    assert {line["scaling"] for line in lines} == {config.scaling}
    newer = {"scaling", "max_trajectory_length", "a11y_tree_max_tokens"}
    _write_lines(file, [{k: v for k, v in line.items() if k not in newer} for line in lines])
    with pytest.raises(TrajectoryError, match="does not say which scaling made its frame"):
        rebuild_step(tmp_path / "run", 2)
    given = attrs.evolve(config, server_profile=None)
    assert rebuild_step(tmp_path / "run", 2, given).request.messages == client.requests[1].messages
    other = attrs.evolve(given, a11y_tree_max_tokens=100)
    with pytest.raises(TrajectoryError, match="a setting the recording does not state"):
        rebuild_step(tmp_path / "run", 2, other)


def test_render_uses_the_recorded_cuts_and_says_the_flag_is_not_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = CASES["trees-cut"]
    client = _recorded_run(tmp_path, config)
    argv = ["render", "--trajectory", str(tmp_path / "run"), "--step", "2", "--json"]
    assert main([*argv, "--server-profile", "max_input_tokens=99000"]) == 0
    captured = capsys.readouterr()
    assert "--server-profile is not used" in captured.err
    shown = json.loads(captured.out)["messages"]
    assert [m["content"][0]["text"] for m in shown] == [m.text for m in client.requests[1].messages]


@pytest.mark.parametrize("value", [0, -1, "1", True, 1.5])
def test_a_bad_episode_step_names_the_line(tmp_path: Path, value: object) -> None:
    file = tmp_path / jsonl.TRAJECTORY_FILE
    _write_lines(file, [{"response": "a"}, {"response": "b", "episode_step": value}])
    with pytest.raises(TrajectoryError, match="line 2: 'episode_step' must be an integer >= 1"):
        open_trajectory(file)


def test_a_task_list_run_keeps_the_marks_and_frame_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The runner's counted agent hands the writer the agent's last request as well."""
    config = CASES["som-scaled-cut"]
    desktop = _observation_folder(tmp_path / "desktop")
    task = OsworldTask(domain="d", example_id="t", instruction="Do it")
    run_task_list(
        [task],
        config=config,
        result_dir=tmp_path / "results",
        make_agent=lambda _: PromptAgent.from_config(config, client=FakeClient([TAG_CLICK] * 2)),
        make_env=lambda _: ReplayEnv(desktop, instruction=task.instruction),
        max_steps=2,
    )
    (log,) = (tmp_path / "results").rglob(BETTER_LOG)
    steps = json.loads(log.read_text(encoding="utf-8"))["steps"]
    assert all({"masks", "frame"} <= set(step) for step in steps)
    assert main(["replay", str(log.parent)]) == 0
    assert capsys.readouterr().out.endswith("2 step(s) replayed, 0 differ\n")
