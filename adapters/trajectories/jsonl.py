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

from __future__ import annotations

import contextlib
import fnmatch
import json
import logging
import math
import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import attrs
from returns.result import Failure, Result, Success

from adapters._checks import path_argument
from adapters._files import create_file, open_appending, read_regular
from adapters._strict_json import _NotFinite, strict_loads
from adapters.contract import ModelResponse, Usage
from adapters.errors import TrajectoryError, TrajectoryExistsError, UnwritableRecord
from adapters.record import ActionRecord, EpisodeEnd, StepRecord
from osharm_core import (
    Action,
    Continuation,
    Mask,
    StoredAction,
    thaw,
)
from osharm_core.errors import check_flag, excerpt
from osharm_core.frames import CoordinateFrame
from osharm_core.limits import Degradation
from osharm_core.prompts import DEFAULT_PASSWORD

logger = logging.getLogger(__name__)

TRAJECTORY_FILE: Final = "trajectory.jsonl"
#: Written beside `trajectory.jsonl` when its episode ended (not failed): a rerun skips it.
FINISHED_FILE: Final = "finished.json"
#: The largest trajectory file (or result folder's better_log.json) a reader loads.
MAX_TRAJECTORY_BYTES: Final = 256 * 1024 * 1024
#: The most steps a reader takes from one trajectory (or better_log.json), far above any
#: real run: a file of more is refused as soon as its step past this is reached, so a few
#: megabytes of tiny steps cannot cost gigabytes and minutes.
MAX_TRAJECTORY_STEPS: Final = 10_000


def _replayed_from(response: ModelResponse) -> str | None:
    """`PATH#STEP` when a replay (or the replayed prefix of a fork) gave this response."""
    source = response.raw.get("replay")
    return None if source is None else f"{source}#{response.raw.get('step')}"


@attrs.frozen(kw_only=True)
class TrajectoryEntry:
    """One line of `trajectory.jsonl`, as a value.

    File names (`screenshot`, `som_screenshot`, `accessibility_tree`) are
    relative to the trajectory's directory. `model` is the model the agent
    was configured with, `response_model` the one that answered.
    `dropped_actions` (written only when not 0) counts the code actions past
    `MAX_ACTIONS_PER_REPLY` that the reply held and the agent left out.
    `finish_reason` and `refusal` (written only when the provider gave them)
    say why the model stopped and whether it declared a refusal;
    `replayed_from` (written only when set) names the recorded step a replay
    or the prefix of a fork answered with, so a fork's hand-over is visible.
    `usage` holds `cached_input_tokens` and `reasoning_tokens` only when the
    provider reported them; `cost_usd` (written only when known) is the
    step's price from the price table; `budget_exceeded` (written only when
    set) says which cap this step reached, which ended the episode after it.
    `frame` (written only when the screenshot was scaled) and `degradation`
    (written only when the request was cut down to fit `server_profile`)
    record how the model's view relates to the screen and what was left out;
    `scaling` (written only when not "native") is the setting that made the frame.
    `reply_frame` (written only when set) is the frame the reply's coordinates
    were read in when it was not `frame`: a replayed reply (`replayed_from`)
    recorded under other scaling, read in the frame it was written in (an
    identity frame: screen pixels). `read_frame` is the one to parse the reply in.
    `episode_step` (written only when it is not the one the lines before imply:
    the previous line's plus 1, or 1 on the first line) is the step's place in
    the agent's episode; `1` after `agent.reset()` starts a new episode (see
    `episode_steps`). `max_trajectory_length` and `a11y_tree_max_tokens` (always
    written) and `ubuntu_attributes`, `som_test_original` and
    `custom_client_password` (written only when true) are the other settings
    that shape the prompt; all five are `None` on a line written before they
    were recorded, which states none of them. The client password itself is
    not kept (it is a secret), only whether it was not the default.
    """

    step: int
    time: str = ""
    instruction: str = ""
    model: str = ""
    response_model: str = ""
    observation_type: str = "a11y_tree"
    action_space: str = "pyautogui"
    platform: str = "ubuntu"
    response: str
    actions: tuple[Action | StoredAction, ...] | None = None
    usage: Usage = attrs.field(factory=Usage)
    latency: float | None = None
    tries: int = 1
    context_fallback: bool = False
    screenshot: str | None = None
    som_screenshot: str | None = None
    accessibility_tree: str | None = None
    masks: tuple[Mask, ...] | None = None
    continuation: Continuation | None = None
    dropped_actions: int = 0
    finish_reason: str | None = None
    refusal: str | None = None
    replayed_from: str | None = None
    cost_usd: float | None = None
    budget_exceeded: str | None = None
    frame: CoordinateFrame | None = None
    reply_frame: CoordinateFrame | None = None
    degradation: Degradation | None = None
    scaling: str = "native"
    episode_step: int | None = None
    max_trajectory_length: int | None = None
    a11y_tree_max_tokens: int | None = None
    ubuntu_attributes: bool | None = None
    som_test_original: bool | None = None
    custom_client_password: bool | None = None

    @property
    def read_frame(self) -> CoordinateFrame | None:
        """The frame the reply was read in (`None`: screen pixels)."""
        frame = self.frame if self.reply_frame is None else self.reply_frame
        return None if frame is None or frame.is_identity else frame

    def to_json(self) -> dict[str, Any]:
        """The entry as the JSON object written on its line."""
        frame = self.frame
        optional = {
            "finish_reason": self.finish_reason,
            "refusal": self.refusal,
            "dropped_actions": self.dropped_actions,
            "replayed_from": self.replayed_from,
            "budget_exceeded": self.budget_exceeded,
            "frame": None if frame is None or frame.is_identity else frame.to_json(),
            "reply_frame": None if self.reply_frame is None else self.reply_frame.to_json(),
            "degradation": None if self.degradation is None else self.degradation.to_json(),
            "scaling": None if self.scaling == "native" else self.scaling,
            "episode_step": self.episode_step,
        }
        extra: dict[str, Any] = {key: value for key, value in optional.items() if value}
        if self.cost_usd is not None:
            extra["cost_usd"] = self.cost_usd
        extra.update(_prompt_settings_json(self))
        return {
            "step": self.step,
            "time": self.time,
            "instruction": self.instruction,
            "model": self.model,
            "response_model": self.response_model,
            "observation_type": self.observation_type,
            "action_space": self.action_space,
            "platform": self.platform,
            "response": self.response,
            "actions": None if self.actions is None else thaw(list(self.actions)),
            "usage": usage_json(self.usage),
            "latency": self.latency,
            "tries": self.tries,
            "context_fallback": self.context_fallback,
            "screenshot": self.screenshot,
            "som_screenshot": self.som_screenshot,
            "accessibility_tree": self.accessibility_tree,
            "masks": None if self.masks is None else [list(m) for m in self.masks],
            "continuation": None
            if self.continuation is None
            else {
                "response_id": self.continuation.response_id,
                "call_ids": list(self.continuation.call_ids),
                "safety_checks": [list(c) for c in self.continuation.safety_checks],
                **({"native": self.continuation.native} if self.continuation.native else {}),
            },
            **extra,
        }


#: The settings that shape the prompt a line states besides model, observation type, action
#: space, platform and scaling: the two counts always, the three flags only when true.
PROMPT_COUNTS: Final = ("max_trajectory_length", "a11y_tree_max_tokens")
PROMPT_FLAGS: Final = ("ubuntu_attributes", "som_test_original", "custom_client_password")


def _prompt_settings_json(entry: TrajectoryEntry) -> dict[str, Any]:
    fields = attrs.asdict(entry, recurse=False)
    counts = {k: fields[k] for k in PROMPT_COUNTS if fields[k] is not None}
    return {**counts, **{k: True for k in PROMPT_FLAGS if fields[k]}}


def usage_json(usage: Usage) -> dict[str, int | None]:
    """`usage` as JSON: the three counts always, cached and reasoning tokens only when reported."""
    counts = attrs.asdict(usage)
    return {k: v for k, v in counts.items() if k in _BASE_USAGE_KEYS or v is not None}


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _fsync_write(path: Path, data: bytes) -> None:
    """Write `data` to a new file at `path`, fsynced; never through a symbolic link nor over a
    file already there (`TrajectoryError`), and removed again when the write fails."""
    create_file(path, data, TrajectoryError)


def _fsync_append(path: Path, data: bytes) -> None:
    """Append `data` to the regular file `path` (made when missing; a symbolic link there is
    refused, not followed) and fsync it.

    When that fails part-way (a full disk), the file is cut back to its old
    length before the `OSError` is re-raised, so no half line is left for the
    next append to be glued onto.
    """
    fd = open_appending(path, TrajectoryError)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise TrajectoryError(f"{path} is not a regular file; cannot append to it")
        try:
            rest = memoryview(data)
            while rest:
                rest = rest[os.write(fd, rest) :]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, info.st_size)
            raise
    finally:
        os.close(fd)


def _read_regular(
    path: Path, what: str, limit: int | None = None, *, follow_links: bool = True
) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes
    (default `MAX_TRAJECTORY_BYTES`); a `TrajectoryError` names `what` otherwise.

    A FIFO (which would block) or a device such as /dev/zero (which never ends)
    is refused, not read; with `follow_links=False` (a step file a recording or
    result folder names) so is a symbolic link. `FileNotFoundError` passes
    through; other `OSError`s become `TrajectoryError` (see
    `adapters._files.read_regular`).
    """
    cap = MAX_TRAJECTORY_BYTES if limit is None else limit
    return read_regular(path, what, cap, TrajectoryError, follow_links=follow_links)


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
            _fsync_write(self.directory / FINISHED_FILE, _json_line(marker, FINISHED_FILE))

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
            "accessibility_tree": (f"{stem}.xml", _utf8(step.accessibility_tree)),
            "som_screenshot": (f"{stem}_som.png", step.som_screenshot),
        }
        files = {key: None if data is None else name for key, (name, data) in contents.items()}
        entry = self._entry(number, step, files)
        line = _json_line(entry.to_json(), f"step {number}")
        written: list[Path] = []
        try:
            for name, data in contents.values():
                if data is not None:
                    _fsync_write(self.directory / name, data)
                    written.append(self.directory / name)
            _fsync_append(self.path, line)
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
        )


def record_json(value: Any, what: str, *, indent: int | None = None) -> str:
    """`value` as the strict JSON text a record holds (readable text, no `NaN`); an
    `UnwritableRecord` naming `what` when JSON cannot hold it (a `NaN`, an object JSON has
    no form for, nesting past the encoder's depth)."""
    try:
        return json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent)
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnwritableRecord(f"{what} cannot be written as JSON: {exc}") from None


def _json_line(value: Any, what: str) -> bytes:
    """`value` as one line of UTF-8 JSON: readable text, or escapes where text is not valid Unicode."""
    text = record_json(value, what)
    try:
        return (text + "\n").encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates: \uXXXX escapes round-trip them
        return (json.dumps(value, allow_nan=False) + "\n").encode("ascii")


def _utf8(text: str | None) -> bytes | None:
    """A tree as UTF-8; characters that cannot be encoded (lone surrogates) are written as escapes."""
    return None if text is None else text.encode("utf-8", errors="backslashreplace")


# --- reading ---------------------------------------------------------------------

_BASE_USAGE_KEYS: Final = ("input_tokens", "output_tokens", "total_tokens")
_USAGE_KEYS: Final = (*_BASE_USAGE_KEYS, "cached_input_tokens", "reasoning_tokens")


class _Bad(Exception):
    pass


#: The longest file name (in bytes) the usual file systems take (NAME_MAX).
_NAME_MAX: Final = 255


def _plain_file_name(name: str) -> bool:
    r"""Whether `name` can name a file directly inside a directory: not empty, `.` or `..`,
    no `/`, `\`, `:` or NUL, valid Unicode (no lone surrogate), at most 255 bytes of UTF-8.

    `:` because on Windows `D:x.png` is relative to drive D's current folder, not this one
    (and `x.png:s` names a stream of `x.png`).

    >>> _plain_file_name("step_0001.png"), _plain_file_name("../step_0001.png")
    (True, False)
    >>> _plain_file_name("D:step_0001.png"), _plain_file_name("step_0001.png:s")
    (False, False)
    >>> _plain_file_name("step\x00.xml"), _plain_file_name("step_\ud800.xml")
    (False, False)
    """
    if name in ("", ".", "..") or any(c in name for c in "/\\:\0"):
        return False
    try:
        return len(name.encode("utf-8")) <= _NAME_MAX
    except UnicodeEncodeError:
        return False


def _file_name(obj: Mapping[str, Any], key: str) -> str | None:
    """A line's file name (`screenshot`, ...): null, or a plain name in the trajectory's directory."""
    name: str | None = _get(obj, key, (str, type(None)), None)
    if name is not None and not _plain_file_name(name):
        raise _Bad(f"'{key}' must name a file in the trajectory's directory; got {excerpt(name)}")
    return name


def _get(obj: Mapping[str, Any], key: str, kinds: tuple[type, ...], default: Any) -> Any:
    if key not in obj:
        return default
    value = obj[key]
    if isinstance(value, bool) and bool not in kinds:
        raise _Bad(f"'{key}' must be {' or '.join(k.__name__ for k in kinds)}, not a boolean")
    if not isinstance(value, kinds):
        names = " or ".join("null" if k is type(None) else k.__name__ for k in kinds)
        raise _Bad(f"'{key}' must be {names}; got {type(value).__name__}")
    return value


def _actions(value: object) -> tuple[Action, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Bad(f"'actions' must be a list or null; got {type(value).__name__}")
    for action in value:
        if not isinstance(action, str | dict):
            raise _Bad(f"'actions' items must be strings or objects; got {type(action).__name__}")
    return tuple(value)


def _int_or_none(value: object, key: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _Bad(f"'{key}' must be an integer or null; got {excerpt(value)}")
    return value


def _usage(value: object) -> Usage:
    if value is None:
        return Usage()
    if not isinstance(value, dict):
        raise _Bad(f"'usage' must be an object; got {type(value).__name__}")
    return Usage(**{k: _int_or_none(value.get(k), f"usage.{k}") for k in _USAGE_KEYS})


def _seconds_or_cost(value: object, key: str) -> float | None:
    """A finite number >= 0 (`latency`, `cost_usd`) as a float, or `None`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _Bad(f"'{key}' must be a number >= 0 or null; got {excerpt(value)}")
    try:
        number = float(value)
    except OverflowError:
        raise _Bad(
            f"'{key}' must be a number >= 0 or null; got a {len(str(value))}-digit integer"
        ) from None
    if not math.isfinite(number) or number < 0:
        raise _Bad(f"'{key}' must be a number >= 0 or null; got {excerpt(value)}")
    return number


def _masks(value: object) -> tuple[Mask, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _Bad(f"'masks' must be a list or null; got {type(value).__name__}")
    masks: list[Mask] = []
    for box in value:
        if (
            not isinstance(box, list)
            or len(box) != 4
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in box)
        ):
            raise _Bad(f"'masks' items must be [x, y, w, h] integer lists; got {excerpt(box)}")
        masks.append((box[0], box[1], box[2], box[3]))
    return tuple(masks)


def _count(value: object, key: str, low: int) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _Bad(f"'{key}' must be an integer >= {low} or null; got {excerpt(value)}")
    return value


def _prompt_settings(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The prompt settings a line states: the counts it holds, and the flags when it states
    either count (a line that does not was written before they were recorded)."""
    counts = {
        "max_trajectory_length": _count(
            obj.get("max_trajectory_length"), "max_trajectory_length", 0
        ),
        "a11y_tree_max_tokens": _count(obj.get("a11y_tree_max_tokens"), "a11y_tree_max_tokens", 1),
    }
    unset = False if any(v is not None for v in counts.values()) else None
    return {**counts, **{k: _get(obj, k, (bool,), unset) for k in PROMPT_FLAGS}}


def _episode_step(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _Bad(f"'episode_step' must be an integer >= 1 or null; got {excerpt(value)}")
    return value


def episode_steps(entries: Sequence[TrajectoryEntry]) -> tuple[int, ...]:
    """Each entry's place in its agent episode (1 where a new episode starts).

    A line's `episode_step` when it has one, else the previous line's plus 1
    (1 for the first), so a file written before resets were recorded is one
    episode.

    >>> episode_steps([TrajectoryEntry(step=n, response="", episode_step=e)
    ...                for n, e in ((1, None), (2, None), (3, 1), (4, None))])
    (1, 2, 1, 2)
    """
    places: list[int] = []
    for entry in entries:
        places.append(entry.episode_step or (places[-1] + 1 if places else 1))
    return tuple(places)


def _continuation(value: object) -> Continuation | None:
    if value is None:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("response_id"), str):
        raise _Bad("'continuation' must be null or an object with a string 'response_id'")
    calls = value.get("call_ids", [])
    checks = value.get("safety_checks", [])
    if not isinstance(calls, list) or not all(isinstance(c, str) for c in calls):
        raise _Bad("'continuation.call_ids' must be a list of strings")
    if not isinstance(checks, list) or not all(
        isinstance(c, list) and len(c) == 3 and all(isinstance(x, str) for x in c) for c in checks
    ):
        raise _Bad("'continuation.safety_checks' must be a list of [id, code, message] lists")
    native = value.get("native", "")
    if not isinstance(native, str):
        raise _Bad("'continuation.native' must be a string")
    return Continuation(
        value["response_id"], tuple(calls), tuple((c[0], c[1], c[2]) for c in checks), native
    )


def _optional_value(value: object, key: str, read: Callable[[object], Any]) -> Any:
    if value is None:
        return None
    try:
        return read(value)
    except ValueError as exc:
        raise _Bad(f"'{key}': {exc}") from None


def _entry(obj: object, position: int) -> TrajectoryEntry:
    if not isinstance(obj, dict):
        raise _Bad(f"expected a JSON object; got {type(obj).__name__}")
    if not isinstance(obj.get("response"), str):
        raise _Bad("'response' (the reply text) is missing or not a string")
    return TrajectoryEntry(
        step=_get(obj, "step", (int,), position),
        time=_get(obj, "time", (str,), ""),
        instruction=_get(obj, "instruction", (str,), ""),
        model=_get(obj, "model", (str,), ""),
        response_model=_get(obj, "response_model", (str,), ""),
        observation_type=_get(obj, "observation_type", (str,), "a11y_tree"),
        action_space=_get(obj, "action_space", (str,), "pyautogui"),
        platform=_get(obj, "platform", (str,), "ubuntu"),
        response=obj["response"],
        actions=_actions(obj.get("actions")),
        usage=_usage(obj.get("usage")),
        latency=_seconds_or_cost(obj.get("latency"), "latency"),
        tries=_get(obj, "tries", (int,), 1),
        context_fallback=_get(obj, "context_fallback", (bool,), False),
        dropped_actions=_get(obj, "dropped_actions", (int,), 0),
        finish_reason=_get(obj, "finish_reason", (str, type(None)), None),
        refusal=_get(obj, "refusal", (str, type(None)), None),
        replayed_from=_get(obj, "replayed_from", (str, type(None)), None),
        cost_usd=_seconds_or_cost(obj.get("cost_usd"), "cost_usd"),
        budget_exceeded=_get(obj, "budget_exceeded", (str, type(None)), None),
        screenshot=_file_name(obj, "screenshot"),
        som_screenshot=_file_name(obj, "som_screenshot"),
        accessibility_tree=_file_name(obj, "accessibility_tree"),
        masks=_masks(obj.get("masks")),
        continuation=_continuation(obj.get("continuation")),
        frame=_optional_value(obj.get("frame"), "frame", CoordinateFrame.from_json),
        reply_frame=_optional_value(
            obj.get("reply_frame"), "reply_frame", CoordinateFrame.from_json
        ),
        degradation=_optional_value(obj.get("degradation"), "degradation", Degradation.from_json),
        scaling=_get(obj, "scaling", (str,), "native"),
        episode_step=_episode_step(obj.get("episode_step")),
        **_prompt_settings(obj),
    )


def parse_entry(line: str, position: int = 1) -> Result[TrajectoryEntry, str]:
    """One `trajectory.jsonl` line as a `TrajectoryEntry`, or a message saying what is wrong.

    Only `response` is required, so a hand-written file of
    `{"response": "..."}` lines is a valid script for `ReplayClient`;
    `position` is the step number used when the line has none.

    >>> parse_entry('{"response": "DONE"}').unwrap().response
    'DONE'
    >>> parse_entry('{"step": 1}').failure()
    "'response' (the reply text) is missing or not a string"
    """
    try:
        obj = strict_loads(line)
    except _NotFinite as exc:
        return Failure(f"not JSON: {exc.reason}")
    except ValueError as exc:
        return Failure(f"not JSON: {exc}")
    except RecursionError:
        return Failure("JSON nested too deeply to read")
    try:
        return Success(_entry(obj, position))
    except _Bad as exc:
        return Failure(str(exc))


def trajectory_path(path: str | os.PathLike[str]) -> Path:
    """The `trajectory.jsonl` for `path`: the file itself, or the one inside a directory."""
    p = Path(path)
    return p / TRAJECTORY_FILE if p.is_dir() else p


@attrs.frozen
class TrajectoryFile:
    """A trajectory as read from disk: its complete steps, and the torn last line, if any.

    `torn_tail` says what was left out when the file ends in a partial line
    (a writer killed in the middle of a step); `None` when the file is whole.
    """

    path: Path
    entries: tuple[TrajectoryEntry, ...]
    torn_tail: str | None = None

    def __fspath__(self) -> str:
        """The file it was read from: a trajectory already read is a path `open_trajectory`
        gives back as it is, so a reader handed one (`ReplayClient`, `ForkClient`) replays
        exactly these entries, with no second read."""
        return os.fspath(self.path)


def too_many_steps(file: object) -> TrajectoryError:
    """The error for a trajectory holding more than `MAX_TRAJECTORY_STEPS` steps."""
    return TrajectoryError(
        f"{file} holds more than {MAX_TRAJECTORY_STEPS} steps (MAX_TRAJECTORY_STEPS), more "
        "than any run takes; it is not read further"
    )


#: A line that is not blank (`bytes.strip` would leave something), from its first byte.
_TEXT_LINE: Final = re.compile(rb"^[ \t\r\x0b\x0c]*[^ \t\r\x0b\x0c\n][^\n]*", re.MULTILINE)


def text_lines(data: bytes) -> Iterator[tuple[int, bytes, bool]]:
    r"""Each line of `data` that is not blank, one at a time: its number (from 1), its bytes
    (no line end), and whether it is the last line and has no line end (perhaps torn).

    Blank lines are skipped by the regular expression, not one by one, and no list of lines
    is made, so a reader that stops early reads no further.

    >>> list(text_lines(b'a\n\n  \nb'))
    [(1, b'a', False), (4, b'b', True)]
    """
    number, seen = 1, 0
    for found in _TEXT_LINE.finditer(data):
        number += data.count(b"\n", seen, found.start())
        seen = found.start()
        yield number, found.group(), found.end() == len(data)


def _line(raw: bytes) -> Result[str, str]:
    try:
        return Success(raw.decode("utf-8"))
    except UnicodeDecodeError as exc:
        return Failure(f"not UTF-8 ({exc.reason} at byte {exc.start})")


def open_trajectory(path: str | os.PathLike[str]) -> TrajectoryFile:
    """Every complete step of a recorded trajectory, and a note on a torn last line.

    `path` is a `trajectory.jsonl`, a directory holding one, or an OS-Harm /
    OSWorld task result folder (read through its better_log.json; a folder
    holding better_log.json is a result folder, whatever else it holds: a
    `trajectory.jsonl` beside it is not read). A `TrajectoryFile` already read
    is given back as it is.

    Blank lines are skipped. A last line with no line end that cannot be read
    is a torn tail: it is left out and described in `torn_tail`, since a
    writer only ever cuts its own last line short. Anything else unreadable
    raises `TrajectoryError` naming the file and line, as does a step past
    `MAX_TRAJECTORY_STEPS` (at once, before the lines after it are read).
    """
    if isinstance(path, TrajectoryFile):
        return path
    # An OS-Harm / OSWorld result folder (that module builds on this one's entries).
    from adapters.trajectories.osharm import BETTER_LOG, is_result_folder, load_result_folder

    folder = Path(path)
    if folder.is_dir() and is_result_folder(folder):
        return TrajectoryFile(folder / BETTER_LOG, load_result_folder(folder))
    file = trajectory_path(path)
    try:
        data = _read_regular(file, "trajectory")
    except FileNotFoundError:
        raise TrajectoryError(f"no trajectory file at {file}") from None
    entries: list[TrajectoryEntry] = []
    torn: str | None = None
    for number, raw, unended in text_lines(data):
        parsed = _line(raw).bind(lambda line: parse_entry(line, len(entries) + 1))
        match parsed:
            case Success(entry):
                if len(entries) == MAX_TRAJECTORY_STEPS:
                    raise too_many_steps(f"{file} (line {number})")
                entries.append(entry)
            case Failure(message) if unended:
                torn = (
                    f"line {number} ({len(raw)} bytes, no line end) is torn and left out: {message}"
                )
            case Failure(message):
                raise TrajectoryError(f"{file}, line {number}: {message}")
    if not entries:
        what = f"; its only line is torn: {torn}" if torn else ""
        raise TrajectoryError(f"trajectory {file} holds no steps{what}")
    return TrajectoryFile(file, tuple(entries), torn)


def read_trajectory(path: str | os.PathLike[str]) -> tuple[TrajectoryEntry, ...]:
    """Every complete step of a recorded trajectory (a `trajectory.jsonl` or a directory holding one).

    A torn last line is left out with a warning (see `open_trajectory`).
    Raises `TrajectoryError` naming the file and line when the file is
    missing, unreadable or malformed anywhere else.
    """
    loaded = open_trajectory(path)
    if loaded.torn_tail is not None:
        logger.warning("%s: %s", loaded.path, loaded.torn_tail)
    return loaded.entries
