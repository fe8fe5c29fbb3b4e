"""Our trajectory format, written and read: one JSON line per agent step, images as files beside it.

A recorded directory looks like this::

    trajectory.jsonl      one JSON object per step (see `TrajectoryEntry`)
    step_0001.png         the screenshot the agent saw at step 1 (when there was one)
    step_0001.xml         the raw accessibility tree at step 1 (when there was one)
    step_0001_som.png     the set-of-marks image sent at step 1 (`som` only)

Each step is flushed and fsynced before `record` returns, so a crash loses
nothing already done. A step is recorded whole or not at all: its line is
serialised before anything is written (any text, lone surrogates included,
becomes valid JSON; NaN and infinities are refused), and the step's files are
removed again when its line cannot be written. A crash in the middle of a
line leaves a torn last line, which readers skip and report. The JSON holds
no API key (the recorder never sees one) and no base64 image (images are
files, the JSON names them). The screenshot and tree files make the
directory a valid `ReplayEnv` directory.
"""

import fnmatch
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

from adapters._checks import path_argument
from adapters._files import append_fsynced, create_file, json_line, record_json, utf8
from adapters.errors import TrajectoryError, TrajectoryExistsError
from adapters.record import ActionRecord, EpisodeEnd, StepRecord
from adapters.trajectories.jsonl_format import (
    FINISHED_FILE,
    MAX_TRAJECTORY_BYTES,
    MAX_TRAJECTORY_STEPS,
    PROMPT_COUNTS,
    PROMPT_FLAGS,
    TRAJECTORY_FILE,
    TrajectoryEntry,
    _read_regular,
    _replayed_from,
    usage_json,
)
from adapters.trajectories.jsonl_read import (
    TrajectoryFile,
    _Bad,
    _masks,
    _optional_value,
    _plain_file_name,
    episode_steps,
    open_trajectory,
    parse_entry,
    read_trajectory,
    text_lines,
    too_many_steps,
    trajectory_path,
)
from osharm_core.errors import check_flag
from osharm_core.prompts import DEFAULT_PASSWORD


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _fsync_write(path: Path, data: bytes) -> None:
    """Write `data` to a new file at `path`, fsynced; never through a symbolic link nor over a
    file already there (`TrajectoryError`), and removed again when the write fails."""
    create_file(path, data, TrajectoryError)


#: The names of a recording's step files (`overwrite` removes every file named so).
STEP_FILES: Final = "step_[0-9]*.*"


def recording_files(directory: str | os.PathLike[str]) -> tuple[Path, ...]:
    """What a `TrajectoryRecorder` on `directory` would write over: its `trajectory.jsonl`
    (first), the step files (`step_` and a digit, `STEP_FILES`) and `finished.json`, symbolic
    links included (dangling or not); empty when there is none."""
    folder = Path(directory)
    try:
        names = sorted(os.listdir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return ()
    except OSError as exc:
        raise TrajectoryError(f"cannot list {folder}: {exc.strerror or exc}") from None
    steps = [folder / name for name in names if fnmatch.fnmatchcase(name, STEP_FILES)]
    finished = (folder / FINISHED_FILE,) * (FINISHED_FILE in names)
    return (folder / TRAJECTORY_FILE,) * (TRAJECTORY_FILE in names) + tuple(steps) + finished


class TrajectoryRecorder:
    """Writes a trajectory directory, one step at a time (an edge object: clock and files).

    `directory` is created when missing. A directory that already holds a
    `trajectory.jsonl` or step files (`step_` and a digit) raises `TrajectoryExistsError`
    unless `overwrite=True`, which deletes them first (a symbolic link is removed, its
    target left alone; a flag that is not a bool, or an empty `directory`, is a
    `ConfigError`). Step files are created new, never written through a
    link or over a file that appeared since. Steps are
    numbered from 1 for the recorder's lifetime (an agent reset does not
    restart the numbering, so file names never collide); the first step after
    a reset carries `"episode_step": 1`, so a rebuilt step's history starts
    there. `clock` gives the UTC time written with each step.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        overwrite: bool = False,
        clock: Callable[[], datetime] = _utc_now,
    ) -> None:
        self.directory = path_argument("directory", directory)
        check_flag("overwrite", overwrite)
        self.path = self.directory / TRAJECTORY_FILE
        self._clock = clock
        self._steps = 0
        self._episode_step = 0  # the last recorded step's place in its episode
        self.directory.mkdir(parents=True, exist_ok=True)
        old = recording_files(self.directory)
        if old and not overwrite:
            held = (
                f"{self.path} already exists"
                if old[0] == self.path
                else f"{self.directory} already holds step files ({old[0].name}, ...)"
            )
            raise TrajectoryExistsError(f"{held}; choose another directory or overwrite it")
        for path in old:
            try:
                path.unlink()
            except OSError as exc:
                raise TrajectoryError(
                    f"cannot remove the old {path}: {exc.strerror or exc}"
                ) from None

    @property
    def steps(self) -> int:
        """How many steps were recorded so far."""
        return self._steps

    def begin(self, observation: Mapping[str, Any]) -> None:
        """Nothing to write: each step's line carries the observation it saw."""

    def action(self, record: ActionRecord) -> None:
        """Nothing to write: a trajectory keeps model steps, not the actions executed."""

    def finish(self, end: EpisodeEnd) -> None:
        """Mark the trajectory finished (`finished.json`: its score and, when a budget cap
        ended it, why), unless the episode failed: a rerun then skips it."""
        if end.failed is None:
            marker = {"score": end.score, "budget_exceeded": end.budget_exceeded}
            _fsync_write(self.directory / FINISHED_FILE, json_line(marker, FINISHED_FILE))

    def record(self, step: StepRecord) -> TrajectoryEntry:
        """`step` under its old name (kept for a release)."""
        return self.step(step)

    def step(self, step: StepRecord) -> TrajectoryEntry:
        """Write the step's images, then its JSON line; returns the entry written.

        Raises `TrajectoryError` (writing nothing) when the step cannot be
        serialised, and re-raises an `OSError` (a full disk) after removing
        the step's files and cutting the file back to its last whole line,
        so no step is ever half on disk.
        """
        number = self._steps + 1
        stem = f"step_{number:04d}"
        contents = {
            "screenshot": (f"{stem}.png", step.screenshot),
            "accessibility_tree": (f"{stem}.xml", utf8(step.accessibility_tree)),
            "som_screenshot": (f"{stem}_som.png", step.som_screenshot),
        }
        files = {key: None if data is None else name for key, (name, data) in contents.items()}
        entry = self._entry(number, step, files)
        line = json_line(entry.to_json(), f"step {number}")
        written: list[Path] = []
        try:
            for name, data in contents.values():
                if data is not None:
                    _fsync_write(self.directory / name, data)
                    written.append(self.directory / name)
            append_fsynced(self.path, line)
        except (OSError, TrajectoryError):
            for path in written:
                path.unlink(missing_ok=True)
            raise
        self._steps = number
        self._episode_step = entry.episode_step or self._episode_step + 1
        return entry

    def _entry(
        self, number: int, step: StepRecord, files: dict[str, str | None]
    ) -> TrajectoryEntry:
        response = step.response
        place = None if step.history is None else step.history + 1
        return TrajectoryEntry(
            step=number,
            time=self._clock().astimezone(UTC).isoformat(timespec="milliseconds"),
            instruction=step.instruction,
            model=step.config.model,
            response_model=response.model,
            observation_type=step.config.observation_type,
            action_space=step.config.action_space,
            platform=step.config.platform,
            response=response.text,
            actions=step.actions,
            usage=response.usage,
            latency=round(step.latency, 6),
            tries=response.tries,
            context_fallback=response.context_fallback,
            screenshot=files["screenshot"],
            som_screenshot=files["som_screenshot"],
            accessibility_tree=files["accessibility_tree"],
            masks=step.masks,
            continuation=response.continuation,
            dropped_actions=step.dropped_actions,
            finish_reason=response.finish_reason,
            refusal=response.refusal,
            replayed_from=_replayed_from(response),
            cost_usd=None if step.cost_usd is None else round(step.cost_usd, 10),
            budget_exceeded=step.budget_exceeded,
            frame=step.frame,
            reply_frame=step.reply_frame,
            degradation=step.degradation,
            scaling=step.config.scaling,
            episode_step=None if place == self._episode_step + 1 else place,
            max_trajectory_length=step.config.max_trajectory_length,
            a11y_tree_max_tokens=step.config.a11y_tree_max_tokens,
            ubuntu_attributes=step.config.ubuntu_attributes,
            som_test_original=step.config.som_test_original,
            custom_client_password=step.config.client_password != DEFAULT_PASSWORD,
            safety_events=step.safety_events,
        )


__all__ = [
    "FINISHED_FILE",
    "MAX_TRAJECTORY_BYTES",
    "MAX_TRAJECTORY_STEPS",
    "PROMPT_COUNTS",
    "PROMPT_FLAGS",
    "STEP_FILES",
    "TRAJECTORY_FILE",
    "TrajectoryEntry",
    "TrajectoryFile",
    "TrajectoryRecorder",
    "_Bad",
    "_masks",
    "_optional_value",
    "_plain_file_name",
    "_read_regular",
    "episode_steps",
    "json_line",
    "open_trajectory",
    "parse_entry",
    "read_trajectory",
    "record_json",
    "recording_files",
    "text_lines",
    "too_many_steps",
    "trajectory_path",
    "usage_json",
    "utf8",
]
