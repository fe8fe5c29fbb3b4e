"""TrajectoryRecorder: one fsynced JSON line per step, images as files, no keys, no base64."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from adapters.contract import ModelResponse, Usage
from adapters.errors import TrajectoryExistsError
from adapters.record import StepRecord
from adapters.trajectories import jsonl as recording
from adapters.trajectories.jsonl import TrajectoryRecorder, read_trajectory
from adapters.trajectories.replay import ReplayEnv
from osharm_core import AgentConfig, ConfigError, Continuation
from tests.conftest import OBSERVATIONS, step_record

PNG = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
XML = (OBSERVATIONS / "mousepad_notes.xml").read_text(encoding="utf-8")


def _clock() -> datetime:
    return datetime(2025, 3, 4, 5, 6, 7, 890000, tzinfo=timezone(timedelta(hours=2)))


def _step(**changes: object) -> StepRecord:
    fields: dict[str, object] = {
        "instruction": "Save the notes",
        "config": AgentConfig(model="gpt-4o", observation_type="som", action_space="pyautogui"),
        "response": ModelResponse(
            text="```python\npyautogui.click(1, 2)\n```",
            model="gpt-4o-2024-08-06",
            usage=Usage(input_tokens=100, output_tokens=20, total_tokens=120),
            tries=3,
            context_fallback=True,
            continuation=Continuation("resp_9", ("call_1",), (("sc_1", "malicious", "careful"),)),
        ),
        "actions": ("pyautogui.click(1, 2)",),
        "latency": 1.2345678,
        "screenshot": PNG,
        "accessibility_tree": XML,
        "som_screenshot": PNG,
        "masks": ((0, 19, 39, 25),),
    }
    fields.update(changes)
    return step_record(**fields)


def test_a_step_is_one_json_line_with_every_field(tmp_path: Path) -> None:
    """The line holds step, UTC time, instruction, model, types, reply, actions, usage, latency, tries, fallback, files."""
    recorder = TrajectoryRecorder(tmp_path / "run", clock=_clock)
    recorder.record(_step())
    lines = (tmp_path / "run" / "trajectory.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0]) == {
        "step": 1,
        "time": "2025-03-04T03:06:07.890+00:00",
        "instruction": "Save the notes",
        "model": "gpt-4o",
        "response_model": "gpt-4o-2024-08-06",
        "observation_type": "som",
        "action_space": "pyautogui",
        "platform": "ubuntu",
        "response": "```python\npyautogui.click(1, 2)\n```",
        "actions": ["pyautogui.click(1, 2)"],
        "usage": {"input_tokens": 100, "output_tokens": 20, "total_tokens": 120},
        "latency": 1.234568,
        "tries": 3,
        "context_fallback": True,
        "screenshot": "step_0001.png",
        "som_screenshot": "step_0001_som.png",
        "accessibility_tree": "step_0001.xml",
        "masks": [[0, 19, 39, 25]],
        "continuation": {
            "response_id": "resp_9",
            "call_ids": ["call_1"],
            "safety_checks": [["sc_1", "malicious", "careful"]],
        },
        "max_trajectory_length": 3,
        "a11y_tree_max_tokens": 10000,
    }
    assert (tmp_path / "run" / "step_0001.png").read_bytes() == PNG
    assert (tmp_path / "run" / "step_0001_som.png").read_bytes() == PNG
    assert (tmp_path / "run" / "step_0001.xml").read_text(encoding="utf-8") == XML


def test_unparsable_steps_and_missing_images_are_null(tmp_path: Path) -> None:
    """Actions that could not be parsed are null, and images the step did not have are null, not files."""
    recorder = TrajectoryRecorder(tmp_path)
    recorder.record(_step(actions=None, screenshot=None, som_screenshot=None, masks=None))
    line = json.loads((tmp_path / "trajectory.jsonl").read_text(encoding="utf-8"))
    assert (line["actions"], line["screenshot"], line["som_screenshot"], line["masks"]) == (
        None,
        None,
        None,
        None,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_0001.xml", "trajectory.jsonl"]


def test_no_base64_image_in_the_json(tmp_path: Path) -> None:
    """The JSON names image files; no base64 of any image appears in it."""
    TrajectoryRecorder(tmp_path).record(_step())
    text = (tmp_path / "trajectory.jsonl").read_text(encoding="utf-8")
    assert base64.b64encode(PNG[:48]).decode()[:40] not in text
    assert "iVBORw0KGgo" not in text
    assert len(text) < 2000


def test_every_step_is_fsynced_before_record_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each record fsyncs the JSON line (and each image), and the line is on disk when record returns."""
    synced: list[int] = []
    real = recording.os.fsync
    monkeypatch.setattr(recording.os, "fsync", lambda fd: (synced.append(fd), real(fd))[1])
    recorder = TrajectoryRecorder(tmp_path)
    for number in (1, 2):
        recorder.record(_step(som_screenshot=None))
        assert len(read_trajectory(tmp_path)) == number
    assert len(synced) == 2 * 3


def test_a_crash_mid_step_keeps_every_finished_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """When writing step 3 fails, the two finished steps are still complete, parsable lines."""
    recorder = TrajectoryRecorder(tmp_path)
    recorder.record(_step())
    recorder.record(_step())

    def disk_full(path: Path, data: bytes, mode: str = "wb") -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(recording, "_fsync_write", disk_full)
    with pytest.raises(OSError, match="No space"):
        recorder.record(_step())
    assert [e.step for e in read_trajectory(tmp_path)] == [1, 2]
    assert recorder.steps == 2


def test_steps_are_numbered_for_the_recorder_lifetime(tmp_path: Path) -> None:
    """Numbering and file names continue across steps, so files never collide."""
    recorder = TrajectoryRecorder(tmp_path)
    entries = [recorder.record(_step()) for _ in range(3)]
    assert [e.step for e in entries] == [1, 2, 3]
    assert (tmp_path / "step_0003.png").exists()


def test_an_existing_trajectory_is_kept_unless_overwrite(tmp_path: Path) -> None:
    """A second recorder on the same folder refuses; overwrite=True removes the old step files."""
    TrajectoryRecorder(tmp_path).record(_step())
    with pytest.raises(TrajectoryExistsError, match="already exists"):
        TrajectoryRecorder(tmp_path)
    recorder = TrajectoryRecorder(tmp_path, overwrite=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    recorder.record(_step(som_screenshot=None))
    assert len(read_trajectory(tmp_path)) == 1


@pytest.mark.parametrize("overwrite", ["false", "no", 0, 1, None])
def test_overwrite_takes_only_a_bool_and_a_wrong_one_deletes_nothing(
    tmp_path: Path, overwrite: object
) -> None:
    """overwrite="false" (from a config file or an environment variable) was truthy and deleted
    the recording; now anything but a bool is a ConfigError naming it, and nothing is removed."""
    TrajectoryRecorder(tmp_path).record(_step())
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(ConfigError, match="overwrite must be true or false; got"):
        TrajectoryRecorder(tmp_path, overwrite=overwrite)  # type: ignore[arg-type]
    assert sorted(p.name for p in tmp_path.iterdir()) == before


@pytest.mark.parametrize("directory", ["", "   ", "\t"])
def test_an_empty_directory_is_refused_not_taken_as_the_current_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, directory: str
) -> None:
    """Path("") is the current directory: with overwrite it lost its step files; now refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "trajectory.jsonl").write_text("{}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="directory needs a path; got the empty path"):
        TrajectoryRecorder(directory, overwrite=True)
    assert (tmp_path / "trajectory.jsonl").read_text(encoding="utf-8") == "{}\n"


def test_a_recorded_folder_is_a_replay_environment(tmp_path: Path) -> None:
    """The step files make the recorded folder serve the same observations back, set-of-marks images left out."""
    recorder = TrajectoryRecorder(tmp_path)
    recorder.record(_step())
    recorder.record(_step(screenshot=(OBSERVATIONS / "mousepad_file_menu.png").read_bytes()))
    env = ReplayEnv(tmp_path)
    assert env.names == ("step_0001", "step_0002")
    assert env.reset()["screenshot"] == PNG
    assert env.reset()["accessibility_tree"] == XML


def test_time_is_utc(tmp_path: Path) -> None:
    """The default clock writes a UTC ISO 8601 time."""
    entry = TrajectoryRecorder(tmp_path).record(_step())
    parsed = datetime.fromisoformat(entry.time)
    assert parsed.utcoffset() == timedelta(0)
    assert abs(parsed - datetime.now(UTC)) < timedelta(minutes=5)
