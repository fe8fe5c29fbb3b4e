"""A result tree read for a report: every kind of task folder, outcomes, verdicts, usage, safety
events, and bad input shown as unreadable, never a crash or a hang."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from adapters.report.model import ReportError
from adapters.report.read import (
    MAX_EVENTS,
    RunRecord,
    picture_at,
    read_task,
    task_folders,
)
from osharm_core import CoordinateFrame
from tests.conftest import png_claiming
from tests.report.trees import LAYOUT, click, plain_folder, reply, result_folder, trajectory

UNSAFE = {"reasoning": "It sent the file.", "success": True, "safety": False, "violation_step": 1}


def _task(root: Path, folder: Path) -> object:
    return read_task(root, folder, RunRecord.at(root))


def test_a_result_folder_its_steps_outcome_verdict_and_violation(tmp_path: Path) -> None:
    """better_log's steps, result.txt's score, the judge's verdict and its violation step."""
    steps = [
        {"response": reply(click(10, 20)), "actions": [click(10, 20)]},
        {"response": reply(click(30, 40)), "actions": [click(30, 40)], "safety_events": [
            {"kind": "flag", "step": 2, "source": "monitor", "code": "injection",
             "message": "the page asks to send a file"}]},
        {"response": "DONE", "actions": ["DONE"]},
    ]  # fmt: skip
    folder = result_folder(tmp_path, "chrome", "_t1", steps, judgment=UNSAFE, result="0.0")
    task = read_task(tmp_path, folder, RunRecord.at(tmp_path))
    assert (task.source, task.domain, task.example_id) == ("osharm", "chrome", "_t1")
    assert task.key == "/".join((*LAYOUT, "chrome", "_t1"))
    assert (task.outcome, task.score, task.verdict) == ("failure", 0.0, "unsafe")
    assert [s.violation for s in task.steps] == [False, True, False]
    assert task.safety_count == 1
    assert task.steps[1].safety[0].kind == "injection"
    assert task.steps[0].picture is not None
    assert task.steps[0].picture.path.name == "step_0.png"
    assert task.steps[1].picture is not None
    assert task.steps[1].picture.path.name.startswith("step_1_")
    assert task.steps[0].marks[0].at == (10.0, 20.0)
    (verdict,) = task.verdicts
    assert (verdict.judge, verdict.success, verdict.reasoning) == (
        "gpt-4.1 / aer / v3",
        True,
        "It sent the file.",
    )


def test_our_trajectory_with_usage_frame_and_safety_events(tmp_path: Path) -> None:
    """A JSONL trajectory: usage, cost and latency per step, its frame, its safety events."""
    frame = CoordinateFrame(
        screen_width=1920, screen_height=1080, image_width=1280, image_height=720
    )
    steps = [
        {"response": "a", "actions": [click(1500, 300)], "usage": {"input_tokens": 100,
         "output_tokens": 10, "total_tokens": 110}, "cost_usd": 0.01, "safety_events": [
         {"kind": "refusal", "step": 1, "source": "reply", "code": "refusal", "message": "odd"}]},
        {"response": "b", "actions": None, "usage": {"input_tokens": 200, "output_tokens": 20,
         "total_tokens": 220}, "cost_usd": 0.02},
    ]  # fmt: skip
    folder = trajectory(tmp_path / "run" / "t", steps, frame=frame)
    task = _task(tmp_path / "run", folder)
    assert (task.source, task.domain, task.outcome, task.score) == (
        "jsonl",
        "local",
        "success",
        1.0,
    )
    assert (task.input_tokens, task.output_tokens, task.cost_usd) == (300, 30, pytest.approx(0.03))
    assert task.seconds == pytest.approx(2 + 1.5)
    assert task.steps[0].screen == (1920, 1080)
    assert task.steps[0].safety[0].text == "odd"
    assert task.steps[1].parsed is False


def test_a_plain_osworld_folder(tmp_path: Path) -> None:
    """traj.jsonl and screenshots, no better_log.json: each step sees the screenshot before it."""
    folder = plain_folder(tmp_path / "os" / "abc", [[click(1, 2), click(3, 4)], ["DONE"]])
    task = _task(tmp_path, folder)
    assert (task.source, task.outcome, task.score) == ("osworld", "failure", 0.0)
    assert [s.response for s in task.steps] == ["reply 1", "reply 2"]
    assert [len(s.marks) for s in task.steps] == [2, 1]
    assert [s.picture.path.name for s in task.steps if s.picture] == [
        "step_0.png",
        "step_1_20260101@120000.png",
    ]


def test_outcomes_from_the_folder_and_the_manifest(tmp_path: Path) -> None:
    """unscored.txt, OSWorld's error line, a failed task in the manifest, and no end at all."""
    step = [{"response": "DONE", "actions": ["DONE"]}]
    unscored = result_folder(tmp_path, "os", "a", step, result=None)
    (unscored / "unscored.txt").write_text("no score\n")
    result_folder(tmp_path, "os", "b", step, result=None, error="Time limit exceeded")
    failed = result_folder(tmp_path, "os", "c", step, result=None)
    result_folder(tmp_path, "os", "d", step, result=None)
    key = failed.relative_to(tmp_path).as_posix()
    manifest = {"outcomes": [{"folder": key, "status": "failed", "detail": "model call failed",
                              "input_tokens": 5, "output_tokens": 6, "cost_usd": 0.5,
                              "seconds": 12.5}]}  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    run = RunRecord.at(tmp_path)
    tasks = {f.name: read_task(tmp_path, f, run) for f in task_folders(tmp_path)}
    assert {name: t.outcome for name, t in tasks.items()} == {
        "a": "unscored",
        "b": "error",
        "c": "error",
        "d": "unfinished",
    }
    assert tasks["b"].detail == "Time limit exceeded"
    assert (tasks["c"].detail, tasks["c"].input_tokens, tasks["c"].cost_usd) == (
        "model call failed",
        5,
        0.5,
    )
    assert tasks["c"].seconds == 12.5


def test_a_malformed_folder_is_an_unreadable_task(tmp_path: Path) -> None:
    """A better_log.json that is not JSON makes its task unreadable, with why."""
    folder = result_folder(tmp_path, "os", "x", [{"response": "DONE", "actions": ["DONE"]}])
    (folder / "better_log.json").write_text("{not json", encoding="utf-8")
    task = _task(tmp_path, folder)
    assert task.outcome == "unreadable"
    assert task.problem is not None
    assert "better_log.json" in task.problem


def test_a_bad_judgment_is_shown_with_why(tmp_path: Path) -> None:
    """A judgment.json that is no object, or not JSON, is a verdict with a problem."""
    folder = result_folder(tmp_path, "os", "x", [{"response": "a", "actions": []}], judgment=[1])
    task = _task(tmp_path, folder)
    assert task.verdicts[0].problem == "judgment.json is not a JSON object"
    assert task.verdict == "none"


def test_screenshots_that_are_refused(tmp_path: Path) -> None:
    """A huge PNG, a file that is not a PNG, a link, a FIFO and a missing file are not shown."""
    (tmp_path / "huge.png").write_bytes(png_claiming(100_000, 100_000))
    (tmp_path / "text.png").write_bytes(b"hello")
    os.symlink(tmp_path / "huge.png", tmp_path / "link.png")
    os.mkfifo(tmp_path / "fifo.png")
    notes = {name: picture_at(tmp_path, name)[1] for name in
             ("huge.png", "text.png", "link.png", "fifo.png", "gone.png")}  # fmt: skip
    assert "refused: 100,000 x 100,000 pixels" in str(notes["huge.png"])
    assert "is not a PNG" in str(notes["text.png"])
    assert "not shown" in str(notes["link.png"])
    assert "not a regular file" in str(notes["fifo.png"])
    assert notes["gone.png"] == "gone.png is missing"


def test_many_safety_events_are_bounded(tmp_path: Path) -> None:
    """At most `MAX_EVENTS` safety events of a step are shown."""
    event = {"kind": "flag", "step": 1, "source": "screen", "code": "t", "message": "x" * 10_000}
    events = [event] * (MAX_EVENTS * 2)
    folder = result_folder(tmp_path, "os", "x", [{"response": "", "actions": [],
                                                   "safety_events": events}])  # fmt: skip
    (step,) = _task(tmp_path, folder).steps
    assert len(step.safety) == MAX_EVENTS
    assert len(step.safety[0].text) <= 2_000


def test_the_tree_is_walked_without_following_links_or_entering_tasks(tmp_path: Path) -> None:
    """Task folders are found under the root, not inside a task, its judgments or a link."""
    first = result_folder(tmp_path, "os", "a", [{"response": "", "actions": []}])
    nested = result_folder(first / "judgment", "os", "inner", [{"response": "", "actions": []}])
    os.symlink(first, tmp_path / "again")
    (tmp_path / ".hidden").mkdir()
    assert task_folders(tmp_path) == [first]
    assert nested.is_dir()
    assert task_folders(first) == [first]


def test_a_tree_too_large_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More folders than a run has is a `ReportError`, not a long walk."""
    from adapters.report import read

    monkeypatch.setattr(read, "MAX_FOLDERS", 5)
    for n in range(10):
        (tmp_path / str(n)).mkdir()
    with pytest.raises(ReportError, match="point the report at one run's folder"):
        task_folders(tmp_path)


def test_an_unreadable_manifest_is_a_problem_not_an_error(tmp_path: Path) -> None:
    """A manifest.json that is not JSON is reported, and the tasks are read all the same."""
    (tmp_path / "manifest.json").write_text("[")
    run = RunRecord.at(tmp_path)
    assert run.manifest is None
    assert run.problem is not None
    assert "cannot read the run manifest" in run.problem


def test_fifos_and_links_where_files_belong_are_not_waited_on(tmp_path: Path) -> None:
    """A FIFO or a link at any file a report reads is refused or passed over: the report is
    made, the task shown as it can be."""
    steps = [{"response": "DONE", "actions": ["DONE"]}]
    first = result_folder(tmp_path / "run", "os", "a", steps, judgment={"safety": True})
    judged = first / "judgment" / "gpt-4.1" / "aer" / "v3" / "judgment.json"
    judged.unlink()
    os.mkfifo(judged)
    (first / "result.txt").unlink()
    os.mkfifo(first / "result.txt")
    second = result_folder(tmp_path / "run", "os", "b", steps)
    (second / "better_log.json").unlink()
    os.mkfifo(second / "better_log.json")
    (second / "traj.jsonl").unlink()
    os.symlink("/dev/zero", second / "traj.jsonl")
    third = trajectory(tmp_path / "run" / "c", steps)
    (third / "trajectory.jsonl").rename(third / "real.jsonl")
    os.mkfifo(third / "trajectory.jsonl")
    os.mkfifo(third / "finished.json.tmp")
    run = RunRecord.at(tmp_path / "run")
    tasks = {f.name: read_task(tmp_path / "run", f, run) for f in task_folders(tmp_path / "run")}
    assert (tasks["a"].verdicts, tasks["a"].outcome, len(tasks["a"].steps)) == ((), "unfinished", 1)
    assert tasks["b"].problem == "better_log.json is not a regular file"
    assert tasks["c"].problem == "trajectory.jsonl is not a regular file"


def test_step_times_that_cannot_be_compared_give_no_wall_time(tmp_path: Path) -> None:
    """A step time without an offset, or before the first one, is no span."""
    folder = trajectory(tmp_path / "t", [{"response": "a", "actions": []}] * 2)
    lines = (folder / "trajectory.jsonl").read_text("utf-8").splitlines()
    edited = [json.loads(line) for line in lines]
    edited[1]["time"] = "2026-01-01T12:00:00"
    (folder / "trajectory.jsonl").write_text("\n".join(json.dumps(e) for e in edited) + "\n")
    assert _task(tmp_path / "t", folder).seconds is not None  # the file times' span
    edited[1]["time"] = "2025-01-01T12:00:00+00:00"
    (folder / "trajectory.jsonl").write_text("\n".join(json.dumps(e) for e in edited) + "\n")
    task = _task(tmp_path / "t", folder)
    assert task.seconds is None or task.seconds < 60
