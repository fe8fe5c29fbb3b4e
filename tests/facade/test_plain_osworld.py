"""Plain OSWorld result folders (traj.jsonl and screenshots, no better_log.json) read and replayed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adapters.cli import main
from adapters.errors import TrajectoryError
from adapters.trajectories.jsonl import open_trajectory
from adapters.trajectories.osharm import is_result_folder, load_result_folder
from adapters.trajectories.osworld_plain import plain_folder_entries
from adapters.trajectories.replay import ReplayClient
from tests.conftest import OBSERVATIONS
from tests.facade.helpers import observation_folder

CLICK = "import pyautogui; pyautogui.click(19, 31)"
PRESS = "import pyautogui; pyautogui.hotkey('ctrl', 's')"
PNG = (OBSERVATIONS / "mousepad_notes.png").read_bytes()


def _osworld_folder(folder: Path, torn: bool = False) -> Path:
    """A task folder as OSWorld's `lib_run_single.py` leaves it: no reply, no first screenshot."""
    folder.mkdir(parents=True)
    steps = [
        (1, CLICK, "20261128@120000"),
        (2, PRESS, "20261128@120005"),
        (2, "DONE", "20261128@120006"),
    ]
    lines = []
    for number, action, stamp in steps:
        name = f"step_{number}_{stamp}.png"
        (folder / name).write_bytes(PNG)
        line = {"step_num": number, "action_timestamp": stamp, "action": action, "reward": 0,
                "done": action == "DONE", "info": {}, "screenshot_file": name}  # fmt: skip
        lines.append(json.dumps(line))
    text = "\n".join(lines) + "\n"
    if torn:
        text += '{"step_num": 3, "acti'
    (folder / "traj.jsonl").write_text(text, encoding="utf-8")
    (folder / "result.txt").write_text("1.0\n", encoding="utf-8")
    return folder


def test_a_plain_osworld_folder_reads_as_its_steps_without_inventing_replies(
    tmp_path: Path,
) -> None:
    """Its steps, actions in order, per-action lines and the screenshot each step saw; the
    replies are marked as not recorded, not made up (it used to be refused: no trajectory file)."""
    folder = _osworld_folder(tmp_path / "os" / "t1", torn=True)
    assert is_result_folder(folder)
    first, second = load_result_folder(folder)
    assert (first.step, first.actions, first.screenshot) == (1, (CLICK,), None)
    assert (second.actions, second.screenshot) == ((PRESS, "DONE"), "step_1_20261128@120000.png")
    assert (first.response, first.response_recorded) == ("", False)
    assert [line["done"] for line in second.executed] == [False, True]
    assert open_trajectory(folder).entries == (first, second)


def test_the_reply_newer_osworld_keeps_and_the_first_screenshot_are_read(tmp_path: Path) -> None:
    """Newer OSWorld writes each step's reply on its lines, and OS-Harm's fork saves
    `step_0.png`: the first step saw it, and the reply is kept as given, still marked as not
    parsed here (a replay restates the executed actions, whatever agent wrote the reply)."""
    folder = _osworld_folder(tmp_path / "t")
    (folder / "step_0.png").write_bytes(PNG)
    lines = (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    said = [{**json.loads(line), "response": f"reply {n}"} for n, line in enumerate(lines)]
    (folder / "traj.jsonl").write_text("".join(json.dumps(x) + "\n" for x in said), "utf-8")
    first, second = load_result_folder(folder)
    assert (first.screenshot, first.response, first.response_recorded) == (
        "step_0.png",
        "reply 0",
        False,
    )
    assert second.response == "reply 1"  # the step's first line's; OSWorld repeats it
    assert ReplayClient(folder).remaining == 2


def test_an_episode_that_ended_before_its_first_action_is_no_steps_when_asked(
    tmp_path: Path,
) -> None:
    """With `empty_ok` (the report's reading), a folder with no traj.jsonl, or only OSWorld's
    error line, has no steps; without it, each is a typed error naming what is missing."""
    bare = tmp_path / "bare"
    bare.mkdir()
    errored = tmp_path / "errored"
    errored.mkdir()
    (errored / "traj.jsonl").write_text('{"Error": "Time limit exceeded"}\n', encoding="utf-8")
    assert plain_folder_entries(bare, empty_ok=True) == ()
    assert plain_folder_entries(errored, empty_ok=True) == ()
    with pytest.raises(TrajectoryError, match="no trajectory file"):
        plain_folder_entries(bare)
    with pytest.raises(TrajectoryError, match="records no action"):
        plain_folder_entries(errored)


def test_a_line_that_is_no_action_record_is_refused_naming_it(tmp_path: Path) -> None:
    """A line that is not an action's record (whole, not torn) is a typed error naming the file."""
    folder = _osworld_folder(tmp_path / "t")
    with (folder / "traj.jsonl").open("a", encoding="utf-8") as file:
        file.write('{"step_num": "two", "action": 5}\n')
    with pytest.raises(TrajectoryError, match=r"traj\.jsonl line 4: step_num must be an integer"):
        load_result_folder(folder)


def test_replay_reports_each_step_as_not_comparable(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`osharm-agent replay` reads the folder and says its steps hold no reply to parse again."""
    folder = _osworld_folder(tmp_path / "t")
    assert main(["replay", str(folder)]) == 0
    out = capsys.readouterr().out
    assert (
        out.count(
            "not comparable (a plain OSWorld folder: its actions were parsed by the agent that ran)"
        )
        == 2
    )


def test_a_replay_of_a_plain_folder_executes_the_same_actions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A run replaying the folder's steps executes the same actions, in the same steps."""
    folder = _osworld_folder(tmp_path / "recorded")
    client = ReplayClient(folder)
    assert client.remaining == 2
    desktop = observation_folder(tmp_path / "desktop")
    argv = ["run", str(desktop), "--model", f"replay:{folder}", "--format", "osharm"]
    assert main([*argv, "--out", str(tmp_path / "out"), "--instruction", "Save it"]) == 0
    (rerun,) = list((tmp_path / "out").rglob("traj.jsonl"))
    executed = [json.loads(line) for line in rerun.read_text(encoding="utf-8").splitlines()]
    recorded = [
        json.loads(line)
        for line in (folder / "traj.jsonl").read_text(encoding="utf-8").splitlines()
    ]
    assert [(e["step_num"], e["action"]) for e in executed] == [
        (r["step_num"], r["action"].replace("; ", "\n")) for r in recorded
    ]
