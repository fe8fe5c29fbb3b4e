"""Hostile text in trajectories: lone surrogates, NaN, full disks, torn last lines, odd line breaks.

A step is on disk whole or not at all; any reply text round-trips through the
file; readers keep every complete step of a file whose last line was cut short
and say so; the CLI prints any reply without crashing on its own output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import signal
import subprocess
import tempfile
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters._files import create_file, new_file, read_regular
from adapters._strict_json import strict_loads
from adapters.agent import PromptAgent
from adapters.cli import main
from adapters.cli._inputs import observation
from adapters.contract import ModelResponse
from adapters.errors import ReplayExhausted, TrajectoryError, TrajectoryExistsError
from adapters.record import EpisodeEnd
from adapters.testing import FakeClient
from adapters.trajectories import jsonl as recording
from adapters.trajectories import rebuild, result_folders
from adapters.trajectories.jsonl import (
    StepRecord,
    TrajectoryRecorder,
    open_trajectory,
    read_trajectory,
)
from adapters.trajectories.osharm import (
    ResultWriter,
    TaskInfo,
    load_result_folder,
    read_better_log,
)
from adapters.trajectories.replay import (
    ReplayClient,
    ReplayEnv,
    load_observation,
    observation_names,
)
from osharm_core import AccessibilityTreeError, AgentConfig, Message, ScreenshotError, TextPart
from tests import strategies
from tests.conftest import CLI_CHILD, child_environment, reply_step, step_record, write_named
from tests.facade.helpers import load

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "task"
TASK = TaskInfo(instruction="Save the notes", domain="os", example_id="_notes")
SURROGATE_REPLY = "```python\npyautogui.write('\ud800 and \udfff')\n```"


FAILED = EpisodeEnd(failed="the episode failed")


def _agent(directory: Path, *replies: str) -> PromptAgent:
    return PromptAgent(
        model="gpt-4o",
        action_space="pyautogui",
        observation_type="screenshot_a11y_tree",
        client=FakeClient(replies),
        recorder=TrajectoryRecorder(directory),
    )


def _record(directory: Path, *replies: str) -> Path:
    """A real trajectory of `replies`, one step each on the notes fixture; returns its file."""
    agent = _agent(directory, *replies)
    for _ in replies:
        agent.predict("Save the file", load("mousepad_notes"))
    return directory / "trajectory.jsonl"


def _step(text: str, actions: Any = None) -> StepRecord:
    return step_record(
        instruction="do it",
        config=AgentConfig(model="gpt-4o"),
        response=ModelResponse(text=text, model="gpt-4o"),
        actions=actions,
        latency=0.1,
        screenshot=b"\x89PNG fake",
        accessibility_tree="<desktop-frame \ud800/>",
    )


# --- whole steps -------------------------------------------------------------------


def test_a_reply_with_lone_surrogates_is_recorded_whole(tmp_path: Path) -> None:
    file = _record(tmp_path, SURROGATE_REPLY)
    (entry,) = read_trajectory(file)
    assert entry.response == SURROGATE_REPLY
    assert entry.actions == ("pyautogui.write('\ud800 and \udfff')",)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_0001.png",
        "step_0001.xml",
        "trajectory.jsonl",
    ]


@settings(max_examples=150)
@given(st.text(alphabet=st.characters(blacklist_categories=()), max_size=80))
def test_any_reply_text_round_trips_through_the_file(text: str) -> None:
    with tempfile.TemporaryDirectory() as directory:
        recorder = TrajectoryRecorder(directory)
        recorder.record(_step(text))
        (entry,) = read_trajectory(directory)
        assert entry.response == text
        assert recorder.steps == 1


def test_line_and_paragraph_separators_inside_a_reply_stay_in_one_line(tmp_path: Path) -> None:
    text = "one\u2028two\u2029three\x1cfour\x85five\rsix"
    file = _record(tmp_path, text, "DONE")
    assert [e.response for e in read_trajectory(file)] == [text, "DONE"]


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_a_step_that_is_not_json_writes_nothing(tmp_path: Path, bad: float) -> None:
    recorder = TrajectoryRecorder(tmp_path)
    with pytest.raises(TrajectoryError, match="step 1 cannot be written as JSON"):
        recorder.record(_step("x", ({"action_type": "CLICK", "x": bad, "y": 1},)))
    assert list(tmp_path.iterdir()) == []
    assert recorder.steps == 0


@contextlib.contextmanager
def _disk_fills_at(limit: int) -> Iterator[None]:
    """No file may grow past `limit` bytes: a write crossing it stops part-way (a full disk)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    signalled = signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        signal.signal(signal.SIGXFSZ, signalled)


def test_a_full_disk_leaves_no_part_of_the_step(tmp_path: Path) -> None:
    """The disk fills up part-way through step 2's line: its files go, the file is cut back to
    step 1's line, and step 2 recorded once there is room again is a line of its own."""
    recorder = TrajectoryRecorder(tmp_path)
    recorder.record(_step("first"))
    one_step = (tmp_path / "trajectory.jsonl").read_bytes()
    with _disk_fills_at(len(one_step) + 50_000), pytest.raises(OSError, match="too large"):
        recorder.record(_step("second " + "x" * 100_000))
    assert (tmp_path / "trajectory.jsonl").read_bytes() == one_step
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "step_0001.png",
        "step_0001.xml",
        "trajectory.jsonl",
    ]
    recorder.record(_step("second, once there is room"))
    loaded = open_trajectory(tmp_path)
    assert [e.step for e in loaded.entries] == [1, 2]
    assert loaded.entries[1].response == "second, once there is room"
    assert loaded.torn_tail is None


def test_a_full_disk_leaves_no_part_of_an_osharm_line(tmp_path: Path) -> None:
    """traj.jsonl's appends are whole or absent too: a line cut short by a full disk is removed."""
    writer = ResultWriter(tmp_path, config=AgentConfig(model="gpt-4o"), task=TASK, max_steps=3)
    writer.finish(FAILED)
    one_line = (tmp_path / "traj.jsonl").read_bytes()
    with _disk_fills_at(len(one_line) + 10), pytest.raises(TrajectoryError, match="too large"):
        writer.finish(FAILED)
    assert (tmp_path / "traj.jsonl").read_bytes() == one_line
    writer.finish(FAILED)
    assert (tmp_path / "traj.jsonl").read_bytes() == one_line * 2


def test_an_append_to_something_not_a_file_is_refused(tmp_path: Path) -> None:
    writer = ResultWriter(tmp_path, config=AgentConfig(model="gpt-4o"), task=TASK, max_steps=3)
    (tmp_path / "traj.jsonl").symlink_to(os.devnull)  # planted after the folder was emptied
    with pytest.raises(TrajectoryError, match=r"traj\.jsonl is not a regular file"):
        writer.finish(FAILED)


# --- never through a link, never over a file ------------------------------------------


@pytest.mark.parametrize("planted", ["link", "dangling-link", "file"])
@pytest.mark.parametrize("name", ["step_0001.xml", "trajectory.jsonl"])
def test_a_folder_holding_a_recording_s_files_is_refused_or_emptied(
    tmp_path: Path, planted: str, name: str
) -> None:
    """Step files count as a recording as trajectory.jsonl does (they used to be written over,
    and a link followed); overwrite=True removes them, a link without its target."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out"
    out.mkdir()
    target = {"link": victim, "dangling-link": tmp_path / "made", "file": None}[planted]
    if target is None:
        (out / name).write_text("old", encoding="utf-8")
    else:
        (out / name).symlink_to(target)
    with pytest.raises(TrajectoryExistsError, match="choose another directory or overwrite"):
        TrajectoryRecorder(out)
    assert (out / name).is_symlink() == (target is not None)
    recorder = TrajectoryRecorder(out, overwrite=True)
    recorder.record(_step("x"))
    assert victim.read_text(encoding="utf-8") == "precious"
    assert not (tmp_path / "made").exists()
    assert not any(p.is_symlink() for p in out.iterdir())
    assert sorted(p.name for p in out.iterdir()) == [
        "step_0001.png",
        "step_0001.xml",
        "trajectory.jsonl",
    ]


def test_a_link_planted_while_recording_is_not_written_through(tmp_path: Path) -> None:
    """A step file that appears after the recorder checked its folder is refused, not followed;
    the step leaves nothing behind and the planted link is left as it was."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    out = tmp_path / "out"
    recorder = TrajectoryRecorder(out)
    (out / "step_0001.xml").symlink_to(victim)
    with pytest.raises(TrajectoryError, match=r"step_0001\.xml already exists; not writing over"):
        recorder.record(_step("x"))
    assert victim.read_text(encoding="utf-8") == "precious"
    assert sorted(p.name for p in out.iterdir()) == ["step_0001.xml"]
    assert recorder.steps == 0


def test_a_trajectory_file_that_is_a_link_is_not_appended_through(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious", encoding="utf-8")
    recorder = TrajectoryRecorder(tmp_path / "out")
    (tmp_path / "out" / "trajectory.jsonl").symlink_to(victim)
    with pytest.raises(TrajectoryError, match="not a regular file but a symbolic link"):
        recorder.record(_step("x"))
    assert victim.read_text(encoding="utf-8") == "precious"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["trajectory.jsonl"]


@pytest.mark.parametrize("dangling", [False, True])
def test_a_result_folder_s_temporary_name_is_never_followed(tmp_path: Path, dangling: bool) -> None:
    """better_log.json, result.txt and the screenshots are written to NAME.tmp and renamed: a
    link planted at NAME.tmp is replaced, its target neither written nor made."""
    victim = tmp_path / "victim.txt"
    if not dangling:
        victim.write_text("precious", encoding="utf-8")
    folder = tmp_path / "result"
    writer = ResultWriter(folder, config=AgentConfig(model="gpt-4o"), task=TASK, max_steps=3)
    for name in ("step_0.png", "step_0.xml", "better_log.json", "result.txt"):
        (folder / f"{name}.tmp").symlink_to(victim)
    observation = {"screenshot": b"\x89PNG fake", "accessibility_tree": "<desktop-frame/>"}
    writer.begin(observation)
    writer.step(reply_step(writer.config, "DONE", ["DONE"], observation))
    writer.finish(EpisodeEnd(score=1.0))
    assert victim.exists() != dangling
    if not dangling:
        assert victim.read_text(encoding="utf-8") == "precious"
    assert sorted(p.name for p in folder.iterdir()) == [
        "better_log.json",
        "result.txt",
        "step_0.png",
        "step_0.xml",
    ]
    assert not any(p.is_symlink() for p in folder.iterdir())
    assert (folder / "result.txt").read_text(encoding="utf-8") == "1.0\n"


def test_create_file_makes_a_new_file_or_nothing(tmp_path: Path) -> None:
    """The one writer of new files: over nothing, never through a link, removed when cut short."""
    create_file(tmp_path / "new", b"data")
    assert (tmp_path / "new").read_bytes() == b"data"
    with pytest.raises(ValueError, match="new already exists; not writing over it"):
        create_file(tmp_path / "new", b"other")
    assert (tmp_path / "new").read_bytes() == b"data"
    (tmp_path / "link").symlink_to(tmp_path / "made")
    with pytest.raises(TrajectoryError, match="link already exists"):
        create_file(tmp_path / "link", b"x", TrajectoryError)
    assert not (tmp_path / "made").exists()
    with _disk_fills_at(10), pytest.raises(OSError, match="too large"):
        create_file(tmp_path / "big", b"x" * 100)
    assert not (tmp_path / "big").exists()


# --- torn tails --------------------------------------------------------------------


@pytest.fixture(scope="module")
def three_steps(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The bytes of a real three-step trajectory whose last reply has multi-byte characters."""
    directory = tmp_path_factory.mktemp("three")
    file = _record(
        directory, "```python\npyautogui.click(1, 2)\n```", "WAIT", "Fertig: é漢字🙂 DONE"
    )
    return file.read_bytes()


def test_every_cut_inside_the_last_line_keeps_the_complete_steps(
    tmp_path: Path, three_steps: bytes
) -> None:
    last_start = three_steps.rstrip(b"\n").rfind(b"\n") + 1
    file = tmp_path / "trajectory.jsonl"
    for cut in range(last_start + 1, len(three_steps) - 1):
        file.write_bytes(three_steps[:cut])
        loaded = open_trajectory(file)
        assert [e.step for e in loaded.entries] == [1, 2], cut
        assert loaded.torn_tail is not None
        assert loaded.torn_tail.startswith("line 3 ")
    file.write_bytes(three_steps[:last_start])
    assert open_trajectory(file).torn_tail is None
    file.write_bytes(three_steps[:-1])  # only the final newline lost: the step is complete
    assert len(open_trajectory(file).entries) == 3


def test_a_torn_tail_is_reported_by_replay_and_the_cli(
    tmp_path: Path, three_steps: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    file = tmp_path / "trajectory.jsonl"
    file.write_bytes(three_steps[:-20])
    client = ReplayClient(file)
    assert "torn" in caplog.text
    request = _request()
    assert client.complete(request).text.startswith("```python")
    assert client.complete(request).text == "WAIT"
    with pytest.raises(ReplayExhausted):
        client.complete(request)
    done = _cli("replay", str(file))
    assert done.returncode == 0, done.stderr
    assert "note: line 3 " in done.stdout
    assert "2 step(s) replayed, 0 differ" in done.stdout


def test_damage_before_the_last_line_is_still_an_error(tmp_path: Path, three_steps: bytes) -> None:
    lines = three_steps.split(b"\n")
    lines[1] = lines[1][:40]
    file = tmp_path / "trajectory.jsonl"
    file.write_bytes(b"\n".join(lines))
    with pytest.raises(TrajectoryError, match="line 2: not JSON"):
        read_trajectory(file)


def test_a_file_whose_only_line_is_torn_says_so(tmp_path: Path, three_steps: bytes) -> None:
    file = tmp_path / "trajectory.jsonl"
    file.write_bytes(three_steps[:25])
    with pytest.raises(TrajectoryError, match="holds no steps; its only line is torn"):
        read_trajectory(file)


# --- hostile values and files ---------------------------------------------------

GOOD = '{"response": "DONE"}\n'


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"response": "x", "latency": ' + "1" * 400 + "}", "'latency' .* a 400-digit integer"),
        ('{"response": "x", "cost_usd": ' + "9" * 400 + "}", "'cost_usd' .* a 400-digit integer"),
        # Not JSON, though Python's reader takes them: refused wherever they are in the line
        # (NaN in recorded actions reached `replay --json`'s output, which jq refuses).
        ('{"response": "x", "cost_usd": NaN}', "not JSON: it holds 'NaN', not a finite number"),
        ('{"response": "x", "cost_usd": Infinity}', "not JSON: it holds 'Infinity'"),
        ('{"response": "x", "latency": -Infinity}', "not JSON: it holds '-Infinity'"),
        ('{"response": "x", "actions": [{"x": NaN}]}', "not JSON: it holds 'NaN'"),
        ('{"response": "x", "actions": [{"x": 1e999}]}', "not JSON: it holds '1e999'"),
        ('{"response": "x", "latency": -0.5}', "'latency' .* got -0.5"),
        ("[" * 100_000 + "]" * 100_000, "JSON nested too deeply to read"),
    ],
)
def test_a_line_with_values_no_number_can_hold_names_its_line(
    tmp_path: Path, line: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "trajectory.jsonl"
    file.write_text(GOOD + line + "\n" + GOOD, encoding="utf-8")
    with pytest.raises(TrajectoryError, match=f"trajectory.jsonl, line 2: {message}"):
        open_trajectory(file)
    assert main(["replay", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("osharm-agent: error: ")
    assert "line 2: " in err
    assert err.count("\n") == 1


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


@pytest.mark.parametrize(
    "plant",
    [_fifo, lambda path: path.symlink_to("/dev/zero")],
    ids=["fifo", "dev-zero"],
)
def test_a_trajectory_that_is_no_regular_file_is_refused_not_read(
    tmp_path: Path, plant: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO would block the reader and /dev/zero never ends: both are refused at once."""
    plant(tmp_path / "trajectory.jsonl")
    with pytest.raises(TrajectoryError, match=r"trajectory\.jsonl is not a regular file"):
        open_trajectory(tmp_path)
    with pytest.raises(TrajectoryError, match="not a regular file"):
        ReplayClient(tmp_path / "trajectory.jsonl")
    assert main(["replay", str(tmp_path / "trajectory.jsonl")]) == 2
    assert "is not a regular file" in capsys.readouterr().err
    with pytest.raises(TrajectoryError, match="/dev/zero is not a regular file"):
        open_trajectory("/dev/zero")


def test_a_trajectory_over_the_size_limit_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "trajectory.jsonl"
    with file.open("wb") as handle:  # sparse: no disk space used
        handle.truncate(recording.MAX_TRAJECTORY_BYTES + 1)
    with pytest.raises(TrajectoryError, match="over the 268435456-byte limit"):
        open_trajectory(file)


def test_a_better_log_that_is_no_regular_file_or_too_large_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    fifo.mkdir()
    _fifo(fifo / "better_log.json")
    with pytest.raises(TrajectoryError, match=r"better_log\.json is not a regular file"):
        read_better_log(fifo)
    large = tmp_path / "large"
    large.mkdir()
    with (large / "better_log.json").open("wb") as handle:
        handle.truncate(recording.MAX_TRAJECTORY_BYTES + 1)
    with pytest.raises(TrajectoryError, match="over the 268435456-byte limit"):
        read_better_log(large)
    with pytest.raises(TrajectoryError, match="over the 268435456-byte limit"):
        open_trajectory(large)


@pytest.mark.parametrize(
    "plant",
    [_fifo, lambda path: path.symlink_to("/dev/zero")],
    ids=["fifo", "dev-zero"],
)
@pytest.mark.parametrize("suffix", [".png", ".xml"])
def test_observation_and_recorded_files_that_are_no_regular_file_are_refused(
    tmp_path: Path, plant: Any, suffix: str
) -> None:
    """A replayed desktop's files and a recording's screenshots are refused, never read; the
    desktop's are an unreadable observation (that episode fails, the run goes on)."""
    plant(tmp_path / f"01_step{suffix}")
    unreadable = ScreenshotError if suffix == ".png" else AccessibilityTreeError
    with pytest.raises(unreadable, match="is not a regular file"):
        load_observation(tmp_path, "01_step")
    with pytest.raises(TrajectoryError, match="step 3: cannot read its screenshot '01_step"):
        rebuild._file(tmp_path, f"01_step{suffix}", 3, "screenshot")


def test_a_result_folder_whose_action_log_is_a_fifo_is_refused(tmp_path: Path) -> None:
    """Choosing each step's tree reads traj.jsonl: a FIFO there is refused, not waited on."""
    log = {"params": {}, "task": {"instruction": "x"}, "steps": [{"response": "DONE"}]}
    (tmp_path / "better_log.json").write_text(json.dumps(log), encoding="utf-8")
    _fifo(tmp_path / "traj.jsonl")
    with pytest.raises(TrajectoryError, match=r"traj\.jsonl is not a regular file"):
        open_trajectory(tmp_path)


def test_a_task_json_nested_too_deeply_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "01_a.xml").write_text("<desktop-frame/>", encoding="utf-8")
    (tmp_path / "task.json").write_text("[" * 100_000 + "]" * 100_000, encoding="utf-8")
    assert main(["render", str(tmp_path), "--observation-type", "a11y_tree"]) == 2
    assert "task.json is nested too deeply to read" in capsys.readouterr().err


# --- the CLI's own output ----------------------------------------------------------


def _request() -> Any:
    from adapters.contract import ModelRequest

    return ModelRequest(model="gpt-4o", messages=(Message("user", (TextPart("hi"),)),))


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """osharm-agent in a child process whose stdout is strict UTF-8 (as a pipe or a file is)."""
    env = child_environment(api_keys=False)
    env["PYTHONIOENCODING"] = "utf-8:strict"
    return subprocess.run(
        [*CLI_CHILD, *argv],
        capture_output=True,
        text=True,
        errors="backslashreplace",
        env=env,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_the_cli_prints_a_reply_with_lone_surrogates(tmp_path: Path, json_flag: list[str]) -> None:
    script = tmp_path / "r.jsonl"
    script.write_text(json.dumps({"response": SURROGATE_REPLY}) + "\n", encoding="ascii")
    done = _cli("predict", str(EXAMPLE), "--model", f"replay:{script}", *json_flag)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    assert "\\ud800" in done.stdout


def test_a_run_records_a_reply_with_lone_surrogates(tmp_path: Path) -> None:
    script = tmp_path / "r.jsonl"
    script.write_text(
        "".join(json.dumps({"response": r}) + "\n" for r in (SURROGATE_REPLY, "DONE")),
        encoding="ascii",
    )
    out = tmp_path / "run"
    done = _cli(
        "run", str(EXAMPLE), "--model", f"replay:{script}", "--out", str(out), "--max-steps", "2"
    )
    assert done.returncode == 0, done.stderr
    assert [e.response for e in read_trajectory(out)] == [SURROGATE_REPLY, "DONE"]


# --- file names a recording gives ----------------------------------------------------------

STAMP = "20250101@100000"
PNG = (ROOT / "tests" / "fixtures" / "observations" / "mousepad_notes.png").read_bytes()


def _result_folder(directory: Path, second_screenshot: object, *files: str) -> Path:
    """A two-step result folder (as the reference leaves one) whose second step names
    `second_screenshot`, holding step_0.png, the screenshots after steps 1 and 3, and `files`."""
    directory.mkdir(parents=True, exist_ok=True)
    for name in ("step_0.png", f"step_1_{STAMP}.png", "step_3_20250101@100500.png", *files):
        write_named(directory, name, PNG)
    steps = [
        {"screenshot_file": "step_0.png", "response": "WAIT", "actions": ["WAIT"]},
        {"screenshot_file": second_screenshot, "response": "DONE", "actions": ["DONE"]},
    ]
    log = {"params": {"observation_type": "screenshot"}, "task": {}, "steps": steps}
    (directory / "better_log.json").write_text(json.dumps(log), encoding="utf-8")
    return directory


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        # A huge step number: the latest screenshot before it (the lookup once went down
        # through every lower number: this one never finished).
        ("step_99999999999_zz.png", "step_3_20250101@100500.png"),
        ("step_4_zz.png", "step_3_20250101@100500.png"),
        ("step_3_zz.png", f"step_1_{STAMP}.png"),
        ("step_0003_zz.png", f"step_1_{STAMP}.png"),
        ("step_9_" + STAMP + ".png", f"step_1_{STAMP}.png"),  # the same timestamp first
        ("step_1_zz.png", "step_0.png"),
        # Names that are no step's (a Unicode digit, glob characters, too many digits to read,
        # a name no file can have, a path out of the folder): the first screenshot.
        ("step_²_zz.png", "step_0.png"),
        ("step_٣_zz.png", "step_0.png"),
        ("step_1_**.png", "step_0.png"),
        ("step_**_x.png", "step_0.png"),
        ("step_[_x.png", "step_0.png"),
        ("step_" + "9" * 5000 + "_x.png", "step_0.png"),
        ("x" * 300 + ".png", "step_0.png"),
        ("step_1\x00.png", "step_0.png"),
        ("step_\ud800.png", "step_0.png"),
        ("../ref/step_0.png", "step_0.png"),
    ],
)
def test_a_screenshot_name_that_is_not_in_the_folder_resolves_to_one_that_is(
    tmp_path: Path, name: str, meant: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _result_folder(tmp_path / "ref", name)
    assert [e.screenshot for e in load_result_folder(folder)] == ["step_0.png", meant]
    assert main(["replay", str(folder)]) == 0
    assert main(["render", "--trajectory", str(folder), "--step", "2"]) == 0
    assert "Traceback" not in capsys.readouterr().err


def test_the_same_timestamp_is_matched_by_step_number_not_by_spelling(tmp_path: Path) -> None:
    """Steps 9 and 10 in one second: step 11's missing screenshot is step 10's ("step_9_"
    sorts after "step_10_" as text)."""
    folder = _result_folder(
        tmp_path / "ref", f"step_11_{STAMP}.png", f"step_9_{STAMP}.png", f"step_10_{STAMP}.png"
    )
    assert load_result_folder(folder)[1].screenshot == f"step_10_{STAMP}.png"


@pytest.mark.parametrize(
    "odd", ["step_²_x.png", "step_²_x.xml", "step_1_**.png", "step_**_x.xml", "step_٣_[.png"]
)
def test_odd_file_names_in_a_result_folder_are_passed_over(
    tmp_path: Path, odd: str, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = _result_folder(tmp_path / "ref", "step_2_zz.png", odd)
    entries = load_result_folder(folder)
    assert [e.screenshot for e in entries] == ["step_0.png", f"step_1_{STAMP}.png"]
    assert [e.accessibility_tree for e in entries] == [None, None]
    assert main(["replay", str(folder)]) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.parametrize(
    "stamp", ["x" * 300, "a\x00b", "\ud800", "../../x", "**", "9" * 5000], ids=repr
)
def test_an_action_timestamp_no_file_can_have_is_passed_over(tmp_path: Path, stamp: str) -> None:
    """traj.jsonl's timestamp picks a step's tree file: one that names no file picks none."""
    folder = _result_folder(tmp_path / "ref", "step_1_zz.png")
    (folder / "step_0.xml").write_text("<desktop-frame/>", encoding="utf-8")
    line = {"step_num": 1, "action_timestamp": stamp, "action": "WAIT"}
    (folder / "traj.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    entries = load_result_folder(folder)
    assert [e.accessibility_tree for e in entries] == ["step_0.xml", None]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(strategies.result_folder_file_names, max_size=6, unique=True),
    strategies.recorded_screenshot_names,
)
def test_a_result_folder_step_names_a_screenshot_in_the_folder_or_none(
    files: list[str], name: str
) -> None:
    """Whatever file names a folder holds and whatever its log names, each step's
    screenshot and tree are files of that folder (or none), and nothing but a
    `TrajectoryError` is raised."""
    with tempfile.TemporaryDirectory() as temporary:
        folder = _result_folder(Path(temporary) / "ref", name, *files)
        held = {p.name for p in folder.iterdir()}
        for entry in load_result_folder(folder):
            assert entry.screenshot is None or entry.screenshot in held
            assert entry.accessibility_tree is None or entry.accessibility_tree in held


@pytest.mark.parametrize(
    ("key", "name"),
    [
        ("accessibility_tree", "step_0001\x00.xml"),
        ("accessibility_tree", "step_0001\ud800.xml"),
        ("accessibility_tree", "../out/step_0001.xml"),
        ("accessibility_tree", "/etc/hostname"),
        ("screenshot", "step_0001.png/"),
        ("screenshot", "..\\step_0001.png"),
        ("screenshot", ".."),
        ("screenshot", ""),
        ("som_screenshot", "x" * 256),
        # Drive-relative on Windows (drive D's current folder), and a stream of another file.
        ("screenshot", "D:step_0001.png"),
        ("accessibility_tree", "C:..x.xml"),
        ("accessibility_tree", "step_0001.xml:stream"),
    ],
    ids=repr,
)
def test_a_line_naming_a_file_outside_its_directory_is_refused_where_it_is_read(
    tmp_path: Path, key: str, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    file = _record(tmp_path / "rec", "```python\npyautogui.click(1, 2)\n```", "DONE")
    lines = [json.loads(line) for line in file.read_text(encoding="utf-8").splitlines()]
    lines[0][key] = name
    file.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    message = f"line 1: '{key}' must name a file in the trajectory's directory; got "
    with pytest.raises(TrajectoryError, match=re.escape(message)):
        open_trajectory(file)
    assert main(["render", "--trajectory", str(file.parent), "--step", "2"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("osharm-agent: error: ")
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize("name", ["step\x00.xml", "step_\ud800.xml"], ids=repr)
def test_a_file_name_no_file_can_have_is_a_trajectory_error_when_read(
    tmp_path: Path, name: str
) -> None:
    with pytest.raises(TrajectoryError, match="step 3: cannot read its accessibility tree 'step"):
        rebuild._file(tmp_path, name, 3, "accessibility tree")


# --- step files that are symbolic links ------------------------------------------------------

SECRET = "OUTSIDE-THE-FOLDER-SECRET"


def _outside(tmp_path: Path) -> Path:
    """A tree outside the recording, holding a secret a linked step file would leak."""
    secret = tmp_path / "elsewhere" / "private.xml"
    secret.parent.mkdir()
    tree = load("mousepad_notes")["accessibility_tree"]
    assert isinstance(tree, str)
    secret.write_text(tree.replace("Meeting notes", SECRET), encoding="utf-8")
    return secret


@pytest.mark.parametrize("dangling", [False, True])
def test_a_recording_s_step_file_that_is_a_link_is_not_read(
    tmp_path: Path, dangling: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    """A line's plain name met the 'in its folder' check while the file there was a link to
    a file elsewhere, whose content reached the rebuilt prompt (and --fork, ReplayEnv over
    the recording, a live model). Such a file is now refused by every reader of the recording."""
    file = _record(tmp_path / "rec", "```python\npyautogui.click(1, 2)\n```", "DONE")
    secret = _outside(tmp_path)
    target = tmp_path / "gone.xml" if dangling else secret
    xml = file.parent / "step_0001.xml"
    xml.unlink()
    xml.symlink_to(target)
    message = "step_0001.xml is a symbolic link; not following it"
    with pytest.raises(TrajectoryError, match=re.escape(message)):
        rebuild.rebuild_step(file.parent, 1)
    assert main(["render", "--trajectory", str(file.parent), "--step", "1"]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert SECRET not in captured.out + captured.err
    env = ReplayEnv(file.parent)
    assert env.recording
    with pytest.raises(AccessibilityTreeError, match=re.escape(message)):
        env.reset()
    with pytest.raises(AccessibilityTreeError, match=re.escape(message)):  # predict DIRECTORY
        observation(argparse.Namespace(screenshot=None, a11y=None, observation=str(file.parent)))


def test_a_recording_s_links_are_not_listed_as_observations(tmp_path: Path) -> None:
    """A stem whose only files are links is no observation of a recording's ReplayEnv."""
    file = _record(tmp_path / "rec", "```python\npyautogui.click(1, 2)\n```", "DONE")
    secret = _outside(tmp_path)
    (file.parent / "step_0000.xml").symlink_to(secret)
    assert observation_names(file.parent) == ("step_0000", "step_0001", "step_0002")
    assert observation_names(file.parent, follow_links=False) == ("step_0001", "step_0002")
    env = ReplayEnv(file.parent)
    assert env.names == ("step_0001", "step_0002")
    assert SECRET not in str(env.reset()["accessibility_tree"])


def test_a_plain_observation_directory_s_links_are_followed(tmp_path: Path) -> None:
    """A directory the user put together is theirs: its links (to fixtures kept elsewhere) are
    read, by ReplayEnv as by load_observation."""
    secret = _outside(tmp_path)
    desktop = tmp_path / "desktop"
    desktop.mkdir()
    (desktop / "01_notes.xml").symlink_to(secret)
    env = ReplayEnv(desktop)
    assert not env.recording
    assert SECRET in str(env.reset()["accessibility_tree"])
    assert SECRET in str(load_observation(desktop, "01_notes")["accessibility_tree"])


@pytest.mark.parametrize("name", ["step_0.png", "step_0.xml", f"step_1_{STAMP}.png"])
def test_a_result_folder_s_linked_step_files_are_left_out(
    tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The folder's listing followed links (`is_file()`): a step file linked elsewhere was read
    by rebuild, --fork and ReplayEnv. Links are now not in the listing, as if absent."""
    folder = _result_folder(tmp_path / "ref", f"step_1_{STAMP}.png")
    outside = tmp_path / "elsewhere.png"
    outside.write_bytes(PNG)
    (folder / name).unlink(missing_ok=True)
    (folder / name).symlink_to(outside)
    entries = load_result_folder(folder)
    assert name not in {e.screenshot for e in entries} | {e.accessibility_tree for e in entries}
    # Step 1 saw step_0.png: without it there is nothing to rebuild step 1 (and so 2) from.
    expected = 2 if name == "step_0.png" else 0
    assert main(["render", "--trajectory", str(folder), "--step", "2"]) == expected
    assert "Traceback" not in capsys.readouterr().err
    env = ReplayEnv(folder)
    assert env.recording
    stem = name.rsplit(".", 1)[0]
    if name == "step_0.xml":  # its screenshot is a file: the step is listed, its tree refused
        with pytest.raises(AccessibilityTreeError, match=r"step_0\.xml is a symbolic link"):
            env.reset()
    else:
        assert stem not in env.names


def test_read_regular_follows_links_only_when_asked(tmp_path: Path) -> None:
    real = tmp_path / "real.xml"
    real.write_text("<a/>", encoding="utf-8")
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "dangling").symlink_to(tmp_path / "nothing")
    assert read_regular(tmp_path / "link", "tree", 100) == b"<a/>"
    assert read_regular(real, "tree", 100, follow_links=False) == b"<a/>"
    for name in ("link", "dangling"):
        with pytest.raises(TrajectoryError, match=f"tree .*{name} is a symbolic link"):
            read_regular(tmp_path / name, "tree", 100, TrajectoryError, follow_links=False)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", "tree", 100, follow_links=False)


def test_new_file_streams_into_a_new_file_or_leaves_nothing(tmp_path: Path) -> None:
    """The streaming form of `create_file` (a recording is written piece by piece)."""
    with new_file(tmp_path / "video") as out:
        for piece in (b"a" * 100_000, b"b", b""):
            out.write(piece)
    assert (tmp_path / "video").read_bytes() == b"a" * 100_000 + b"b"

    def cut_short() -> None:
        with new_file(tmp_path / "cut") as out:
            out.write(b"part")
            raise RuntimeError("cut short")

    with pytest.raises(RuntimeError, match="cut short"):
        cut_short()
    assert not (tmp_path / "cut").exists()
    (tmp_path / "link").symlink_to(tmp_path / "made")
    with (
        pytest.raises(TrajectoryError, match="link already exists"),
        new_file(tmp_path / "link", TrajectoryError),
    ):
        pass
    assert not (tmp_path / "made").exists()


def _traced_peak(call: Any) -> tuple[Any, int]:
    """What `call()` returned (or raised), and the most memory it held at once, in bytes."""
    tracemalloc.start()
    try:
        try:
            result: Any = call()
        except TrajectoryError as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_trajectory_of_more_steps_than_any_run_is_refused_at_the_step_past_the_cap(
    tmp_path: Path,
) -> None:
    """`MAX_TRAJECTORY_STEPS` steps are read; the one after them is refused at once, before the
    lines after it are looked at (the damaged line after it is never reached)."""
    line = json.dumps({"response": "WAIT"}) + "\n"
    file = tmp_path / "trajectory.jsonl"
    file.write_text(line * recording.MAX_TRAJECTORY_STEPS + "\n\n", encoding="utf-8")
    assert len(open_trajectory(file).entries) == recording.MAX_TRAJECTORY_STEPS
    file.write_text(
        line * recording.MAX_TRAJECTORY_STEPS + "\n" + line + "{damaged\n", encoding="utf-8"
    )
    with pytest.raises(TrajectoryError) as caught:
        open_trajectory(file)
    assert str(caught.value) == (
        f"{file} (line 10002) holds more than 10000 steps (MAX_TRAJECTORY_STEPS), more than "
        "any run takes; it is not read further"
    )


def test_a_better_log_of_more_steps_than_any_run_is_refused_at_the_step_past_the_cap(
    tmp_path: Path,
) -> None:
    step = json.dumps({"response": "WAIT", "actions": ["WAIT"]})
    file = tmp_path / "better_log.json"
    file.write_text(
        '{"steps": [' + ", ".join([step] * recording.MAX_TRAJECTORY_STEPS) + "]}", encoding="utf-8"
    )
    assert len(load_result_folder(tmp_path)) == recording.MAX_TRAJECTORY_STEPS
    text = ", ".join([step] * (recording.MAX_TRAJECTORY_STEPS + 1))
    file.write_text('{"steps": [' + text + ", {damaged", encoding="utf-8")
    for read in (read_better_log, load_result_folder, open_trajectory, rebuild.load_recording):
        with pytest.raises(TrajectoryError, match=f"^{re.escape(str(file))} holds more than 10000"):
            read(tmp_path)


@pytest.mark.parametrize("kind", ["better_log", "trajectory.jsonl"])
def test_a_small_file_of_a_million_tiny_steps_costs_little_memory(
    tmp_path: Path, kind: str
) -> None:
    """3 MB of `{}` steps took 570 MB and 18 s to read; 16 MB of `{"response":""}` lines
    557 MB and 30 s: the cap on steps bounds both, not only the cap on bytes."""
    if kind == "better_log":
        (tmp_path / "better_log.json").write_text(
            '{"steps":[' + ",".join(["{}"] * 10**6) + "]}", encoding="utf-8"
        )
    else:
        (tmp_path / "trajectory.jsonl").write_text('{"response":""}\n' * 10**6, encoding="utf-8")
    raised, peak = _traced_peak(lambda: open_trajectory(tmp_path))
    assert isinstance(raised, TrajectoryError)
    assert "holds more than 10000 steps" in str(raised)
    assert peak < 64 * 1024 * 1024


def test_a_result_folder_s_action_log_of_a_million_lines_is_not_read_whole(
    tmp_path: Path,
) -> None:
    """traj.jsonl only picks each step's tree file: it is read a line at a time, and only as
    many lines as the steps read can have (one per action, at most 100 a reply), so 3 MB of
    `{}` lines are neither split into a million objects nor parsed."""
    _result_folder(tmp_path, "step_1_zz.png")
    (tmp_path / "traj.jsonl").write_text("{}\n" * 10**6, encoding="utf-8")
    entries, peak = _traced_peak(lambda: load_result_folder(tmp_path))
    assert len(entries) == 2
    assert peak < 8 * 1024 * 1024


@pytest.mark.parametrize(
    ("where", "bad"),
    [("actions", "NaN"), ("actions", "-Infinity"), ("actions", "1e999"), ("params", "NaN")],
)
def test_a_better_log_holding_a_number_json_cannot_is_refused(
    tmp_path: Path, where: str, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """better_log.json was read with Python's lenient reader: `NaN` in a step's actions came
    through, and `replay --json` printed it, which no JSON reader takes."""
    x = bad if where == "actions" else "1"
    max_tokens = bad if where == "params" else "1500"
    step = '{"response": "DONE", "actions": [{"action_type": "CLICK", "x": ' + x + "}]}"
    text = '{"params": {"max_tokens": ' + max_tokens + '}, "steps": [' + step + "]}"
    (tmp_path / "better_log.json").write_text(text, encoding="utf-8")
    file = tmp_path / "better_log.json"
    with pytest.raises(TrajectoryError) as caught:
        read_better_log(tmp_path)
    assert str(caught.value) == f"cannot read {file}: it holds '{bad}', not a finite number"
    assert main(["replay", str(tmp_path), "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "not a finite number" in captured.err


def test_an_action_log_line_holding_nan_is_passed_over(tmp_path: Path) -> None:
    """traj.jsonl is read as strictly as it is written: a line holding `NaN` names no step's
    tree (the folder's own files do)."""
    _result_folder(tmp_path, "step_1_zz.png", "step_1_a.xml", "step_1_b.xml")
    line = '{"step_num": 1, "action_timestamp": "a", "reward": REWARD}\n'
    (tmp_path / "traj.jsonl").write_text(line.replace("REWARD", "0"), encoding="utf-8")
    assert load_result_folder(tmp_path)[1].accessibility_tree == "step_1_a.xml"
    (tmp_path / "traj.jsonl").write_text(line.replace("REWARD", "NaN"), encoding="utf-8")
    assert load_result_folder(tmp_path)[1].accessibility_tree == "step_1_b.xml"


def test_a_folder_holding_better_log_and_trajectory_jsonl_is_read_as_a_result_folder(
    tmp_path: Path,
) -> None:
    """`open_trajectory` (replay, forks, continuing) read a trajectory.jsonl beside
    better_log.json while `load_recording` (render, the settings check of continuing) read
    better_log.json: both read better_log.json now, as `is_result_folder` says."""
    _result_folder(tmp_path, "step_1_zz.png")
    (tmp_path / "trajectory.jsonl").write_text(
        json.dumps({"response": "PLANTED"}) + "\n", encoding="utf-8"
    )
    loaded = open_trajectory(tmp_path)
    assert loaded.path == tmp_path / "better_log.json"
    assert [e.response for e in loaded.entries] == ["WAIT", "DONE"]
    assert [e.response for e in rebuild.load_recording(tmp_path).entries] == ["WAIT", "DONE"]
    assert ReplayClient(tmp_path).remaining == 2
    # The file itself is still read when named.
    assert open_trajectory(tmp_path / "trajectory.jsonl").entries[0].response == "PLANTED"
    # A trajectory already read is its own path: given back as it is, not read again.
    assert open_trajectory(loaded) is loaded
    assert os.fspath(loaded) == str(tmp_path / "better_log.json")


_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=200, deadline=None)
@given(
    st.dictionaries(st.sampled_from(["steps", "params", "task", "x"]), _json_values, max_size=4),
    st.sampled_from([None, 0, 2]),
    st.data(),
)
def test_better_log_s_reader_reads_what_json_reads(
    log: dict[str, Any], indent: int | None, data: st.DataObject
) -> None:
    """better_log.json is read a step at a time (to stop at the cap), yet gives exactly what
    the strict reader gives for the whole text, and refuses what it refuses, cut or not."""
    text = json.dumps(log, indent=indent)
    cut = data.draw(st.integers(0, len(text)))
    for candidate in (text, text[:cut], text[:cut] + text[cut + 1 :], f" \n{text}\t"):
        try:
            expected: Any = strict_loads(candidate)
        except ValueError:
            expected = ValueError
        try:
            got: Any = result_folders._log_json(candidate, Path("better_log.json"))
        except ValueError:
            got = ValueError
        if not isinstance(expected, dict):
            assert got is ValueError
        else:
            assert got == expected
