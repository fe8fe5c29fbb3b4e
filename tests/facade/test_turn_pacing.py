"""One observation per model turn in every runner, and result folders whose steps name their own files.

`run TASK_DIR` with `--format jsonl` shows observation n at model turn n; a
paced `ReplayEnv` (used by `--format osharm` and by task lists with
`--observations`) must show the same ones however many actions a reply holds
(the review's finding 3). An observation without a screenshot must not make a
result folder name a stale or absent screenshot, and reading the folder back
must give each step its own tree (finding 4).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import shutil
from datetime import datetime
from pathlib import Path
from typing import Any

import attrs
import pytest

from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.errors import TrajectoryError
from adapters.record import ActionRecord
from adapters.runs import OsworldTask, arun_task_list, in_thread
from adapters.runs.episode import arun_episode, run_episode
from adapters.testing import FakeClient
from adapters.trajectories.jsonl import read_trajectory
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
    load_result_folder,
    read_better_log,
    result_folder,
)
from adapters.trajectories.rebuild import rebuild_step
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, linearize_accessibility_tree
from tests.facade.helpers import OBSERVATIONS, observation_folder, write_task_list

CONFIG = AgentConfig(model="gpt-4o", observation_type="a11y_tree", action_space="pyautogui")
TASK = TaskInfo(instruction="Save the notes", domain="os", example_id="_save_notes")
NAMES = ("mousepad_notes", "mousepad_file_menu", "xfce4_terminal_shell", "chromium_settings_form")
CLICK = "Clicking.\n```python\npyautogui.click(19, 31)\n```"
TWO = (
    "Two actions.\n```python\npyautogui.click(1, 2)\n```\n```python\npyautogui.press('enter')\n```"
)
NOTHING = "I see nothing to do yet."


def _tree(name: str) -> str:
    return linearize_accessibility_tree(
        (OBSERVATIONS / f"{name}.xml").read_text(encoding="utf-8"), "ubuntu"
    )


def _clock() -> Any:
    ticks = itertools.count()
    return lambda: datetime(2026, 11, 23, 12, 0, 0).replace(second=next(ticks) % 60)


def _writer(folder: Path) -> ResultWriter:
    return ResultWriter(folder, config=CONFIG, task=TASK, max_steps=15, clock=_clock())


def _seen(folder: Path) -> list[str | None]:
    """The linearized tree each model call of a result folder saw."""
    return [step["a11y_tree"] for step in read_better_log(folder)["steps"]]


# --- the paced replay ------------------------------------------------------------------


def test_a_paced_replay_moves_once_per_turn(tmp_path: Path) -> None:
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES), per_turn=True)
    env.reset()
    assert env.begin_turn() is None
    assert [env.step("a")[3]["observation"], env.step("b")[3]["observation"]] == [
        "02_mousepad_file_menu"
    ] * 2
    assert env.begin_turn() is None  # the last action left the desktop at 02
    assert env.step("c")[3]["observation"] == "03_xfce4_terminal_shell"
    env.begin_turn()  # a turn that executes nothing still uses up its observation
    moved = env.begin_turn()
    assert moved is not None
    assert moved[1] is False
    assert env.observation_name == "04_chromium_settings_form"
    _, _, done, _ = env.step("d")
    assert done  # ran out
    assert len(env.actions) == 4


def test_a_paced_replay_says_when_its_turns_run_out_and_refuses_unannounced_steps(
    tmp_path: Path,
) -> None:
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES[:1]), per_turn=True)
    env.reset()
    with pytest.raises(TrajectoryError, match=r"begin_turn\(\)"):
        env.step("a")
    env.begin_turn()
    assert env.begin_turn() == (env._get_obs(), True)


def test_an_unpaced_replay_moves_per_action_as_before(tmp_path: Path) -> None:
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES))
    env.reset()
    assert env.begin_turn() is None
    names = [env.step(a)[3]["observation"] for a in "ab"]
    assert names == ["02_mousepad_file_menu", "03_xfce4_terminal_shell"]


# --- the episode loop ------------------------------------------------------------------


@pytest.mark.parametrize("threaded", [False, True])
def test_a_paced_episode_sees_one_observation_per_turn(tmp_path: Path, threaded: bool) -> None:
    """A two-action reply and a reply with no action each use up one observation, as
    the jsonl runner shows them; the observation after the empty turn is kept in the folder."""
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES), per_turn=True)
    agent = PromptAgent.from_config(CONFIG, client=FakeClient([TWO, NOTHING, CLICK, "DONE"]))
    folder = tmp_path / "out"
    writer = _writer(folder)
    if threaded:
        episode = arun_episode(
            agent,
            in_thread(env),
            writer,
            instruction=writer.task.instruction,
            config=CONFIG,
            observation=env.reset(),
            max_steps=9,
        )
        score = asyncio.run(episode).score
    else:
        score = run_episode(agent, env, env.reset(), writer, max_steps=9)
    assert score is None
    assert _seen(folder) == [_tree(n) for n in NAMES]
    log = read_better_log(folder)
    for step in log["steps"]:
        assert (folder / step["screenshot_file"]).is_file()
    assert log["steps"][2]["screenshot_file"].startswith("step_2_")  # after the empty turn
    lines = [
        json.loads(x) for x in (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [line["step_num"] for line in lines] == [1, 1, 3, 4]
    entries = load_result_folder(folder)
    trees = [
        (folder / e.accessibility_tree).read_text(encoding="utf-8")
        for e in entries
        if e.accessibility_tree
    ]
    assert trees == [(OBSERVATIONS / f"{n}.xml").read_text(encoding="utf-8") for n in NAMES]


def test_a_paced_episode_ends_when_an_empty_turn_runs_out(tmp_path: Path) -> None:
    env = ReplayEnv(observation_folder(tmp_path / "obs", NAMES[:2]), per_turn=True)
    agent = PromptAgent.from_config(CONFIG, client=FakeClient([CLICK, NOTHING, CLICK]))
    writer = _writer(tmp_path / "out")
    assert run_episode(agent, env, env.reset(), writer, max_steps=9) is None
    assert _seen(tmp_path / "out") == [_tree(NAMES[0]), _tree(NAMES[1])]


# --- the CLI: the same observations in both formats -------------------------------------


def _replies(path: Path, replies: list[str]) -> Path:
    path.write_text("".join(json.dumps({"response": r}) + "\n" for r in replies), encoding="utf-8")
    return path


def _task(tmp_path: Path, names: tuple[str, ...] = NAMES) -> Path:
    task = observation_folder(tmp_path / "task", names)
    (task / "task.json").write_text(json.dumps({"instruction": "Save the notes"}), encoding="utf-8")
    return task


def test_both_formats_show_the_model_the_same_observations(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = _task(tmp_path)
    script = _replies(tmp_path / "replies.jsonl", [TWO, NOTHING, CLICK, "DONE"])
    common = ["--model", f"replay:{script}", "--observation-type", "a11y_tree"]
    assert main(["run", str(task), "--out", str(tmp_path / "j"), *common]) == 0
    assert (
        main(["run", str(task), "--format", "osharm", "--out", str(tmp_path / "o"), *common]) == 0
    )
    capsys.readouterr()
    recorded = read_trajectory(tmp_path / "j")
    jsonl_trees = [
        linearize_accessibility_tree(
            (tmp_path / "j" / e.accessibility_tree).read_text(encoding="utf-8"), "ubuntu"
        )
        for e in recorded
        if e.accessibility_tree
    ]
    folder = result_folder(
        tmp_path / "o", attrs.evolve(CONFIG, model=f"replay:{script}"), "local", "task"
    )
    assert _seen(folder) == jsonl_trees == [_tree(n) for n in NAMES]


def test_a_jsonl_recording_converts_to_a_result_folder_step_for_step(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`run REC --format osharm --model replay:REC` keeps every step on its own observation."""
    task = _task(tmp_path)
    script = _replies(tmp_path / "replies.jsonl", [TWO, CLICK, TWO, "DONE"])
    common = ["--observation-type", "a11y_tree"]
    rec = tmp_path / "rec"
    assert main(["run", str(task), "--model", f"replay:{script}", "--out", str(rec), *common]) == 0
    shutil.copyfile(task / "task.json", rec / "task.json")
    model = f"replay:{rec}"
    argv = ["run", str(rec), "--format", "osharm", "--model", model, "--out", str(tmp_path / "o")]
    assert main([*argv, *common]) == 0
    capsys.readouterr()
    folder = result_folder(tmp_path / "o", attrs.evolve(CONFIG, model=model), "local", "rec")
    assert _seen(folder) == [_tree(n) for n in NAMES]


def test_a_task_list_replays_its_observations_once_per_turn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    meta, examples = write_task_list(tmp_path, {"os": ["_one"]}, "test_small.json")
    desktop = observation_folder(tmp_path / "obs", NAMES)
    script = _replies(tmp_path / "replies.jsonl", [TWO, CLICK, "DONE"])
    argv = [
        "run-tasks", "--tasks", str(meta), "--examples", str(examples),
        "--observations", str(desktop), "--model", f"replay:{script}",
        "--observation-type", "a11y_tree", "--out", str(tmp_path / "results"),
    ]  # fmt: skip
    assert main(argv) == 0
    capsys.readouterr()
    folder = result_folder(
        tmp_path / "results", attrs.evolve(CONFIG, model=f"replay:{script}"), "os", "_one"
    )
    assert _seen(folder) == [_tree(n) for n in NAMES[:3]]


def test_arun_task_list_paces_replays_behind_in_thread(tmp_path: Path) -> None:
    desktop = observation_folder(tmp_path / "obs", NAMES)
    task = OsworldTask(domain="os", example_id="_one", instruction="Save the notes")
    result = asyncio.run(
        arun_task_list(
            [task],
            config=CONFIG,
            result_dir=tmp_path / "results",
            make_agent=lambda _: PromptAgent.from_config(
                CONFIG, client=FakeClient([TWO, TWO, "DONE"])
            ),
            make_env=lambda _: in_thread(ReplayEnv(desktop, per_turn=True)),
            max_steps=5,
        )
    )
    assert [o.status for o in result] == ["finished"]
    assert _seen(result_folder(tmp_path / "results", CONFIG, "os", "_one")) == [
        _tree(n) for n in NAMES[:3]
    ]


# --- observations without a screenshot --------------------------------------------------


def _xml_only(task: Path, number: int) -> None:
    for png in task.glob(f"{number:02d}_*.png"):
        png.unlink()


def test_a_step_without_a_screenshot_names_none_and_keeps_its_own_tree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    task = _task(tmp_path, NAMES[:3])
    _xml_only(task, 2)
    script = _replies(tmp_path / "replies.jsonl", [CLICK, CLICK, CLICK])
    model = f"replay:{script}"
    argv = ["run", str(task), "--format", "osharm", "--model", model, "--max-steps", "3"]
    assert main([*argv, "--out", str(tmp_path / "o"), "--observation-type", "a11y_tree"]) == 0
    capsys.readouterr()
    folder = result_folder(tmp_path / "o", attrs.evolve(CONFIG, model=model), "local", "task")
    log = read_better_log(folder)
    shots = [s["screenshot_file"] for s in log["steps"]]
    assert shots[0] == "step_0.png"
    assert shots[1] is None
    assert shots[2].startswith("step_2_")
    lines = [
        json.loads(x) for x in (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert lines[0]["screenshot_file"] is None
    for name in [*shots, *(line["screenshot_file"] for line in lines)]:
        assert name is None or (folder / name).is_file()
    entries = load_result_folder(folder)
    assert entries[1].screenshot is None
    assert entries[1].accessibility_tree == f"step_1_{lines[0]['action_timestamp']}.xml"
    assert [(folder / str(e.accessibility_tree)).read_text(encoding="utf-8") for e in entries] == [
        (OBSERVATIONS / f"{n}.xml").read_text(encoding="utf-8") for n in NAMES[:3]
    ]
    rebuilt = rebuild_step(folder, 2).request.observation.accessibility_tree
    assert rebuilt is not None
    assert _tree(NAMES[1]).splitlines()[1] in rebuilt
    assert main(["render", "--trajectory", str(folder), "--step", "2"]) == 0
    assert _tree(NAMES[1]).splitlines()[1] in capsys.readouterr().out


def test_a_same_second_action_without_a_screenshot_leaves_no_stale_png(tmp_path: Path) -> None:
    folder = tmp_path / "out"
    writer = ResultWriter(
        folder,
        config=CONFIG,
        task=TASK,
        max_steps=5,
        clock=lambda: datetime(2026, 11, 23, 12, 0, 0),
    )
    first = {"screenshot": b"png-1", "accessibility_tree": "<a/>"}
    writer.begin(first)
    now = datetime(2026, 11, 23, 12, 0, 0)
    writer.action(ActionRecord(step=1, action="x", observation=first, started=now))
    second = {"screenshot": None, "accessibility_tree": "<b/>"}
    writer.action(ActionRecord(step=1, action="y", observation=second, started=now))
    assert not (folder / "step_1_20261123@120000.png").exists()
    assert (folder / "step_1_20261123@120000.xml").read_text(encoding="utf-8") == "<b/>"
    assert writer.last_screenshot is None


def test_a_folder_naming_a_stale_screenshot_reads_back_with_the_step_s_own_tree(
    tmp_path: Path,
) -> None:
    """A folder written before this fix names the previous screenshot for a step that had
    none; its own tree is beside the step's name, so the reader uses that and no screenshot."""
    folder = tmp_path / "old"
    folder.mkdir()
    (folder / "step_0.png").write_bytes(b"png")
    (folder / "step_0.xml").write_text("<zero/>", encoding="utf-8")
    (folder / "step_1_20250101@100000.xml").write_text("<one/>", encoding="utf-8")
    steps = [
        {"a11y_tree": None, "screenshot_file": "step_0.png", "response": CLICK, "actions": []},
        {"a11y_tree": None, "screenshot_file": "step_0.png", "response": "DONE", "actions": []},
    ]
    (folder / "better_log.json").write_text(
        json.dumps({"params": {}, "task": {}, "steps": steps}), encoding="utf-8"
    )
    line = {"step_num": 1, "action_timestamp": "20250101@100000", "action": "x"}
    (folder / "traj.jsonl").write_text(json.dumps(line) + "\n{torn", encoding="utf-8")
    first, second = load_result_folder(folder)
    assert (first.screenshot, first.accessibility_tree) == ("step_0.png", "step_0.xml")
    assert (second.screenshot, second.accessibility_tree) == (None, "step_1_20250101@100000.xml")
