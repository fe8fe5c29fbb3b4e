"""Our trajectory format read back: `trajectory.jsonl` as `TrajectoryEntry` values, a torn
last line (a crash mid-write) skipped and reported, every field checked as it is read.
"""

from __future__ import annotations

import logging
import math
import os
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs
from returns.result import Failure, Result, Success

from adapters._strict_json import _NotFinite, strict_loads
from adapters.contract import Usage
from adapters.errors import TrajectoryError
from adapters.trajectories.jsonl_format import (
    _USAGE_KEYS,
    MAX_TRAJECTORY_STEPS,
    PROMPT_FLAGS,
    TRAJECTORY_FILE,
    TrajectoryEntry,
    _read_regular,
)
from osharm_core import (
    Action,
    Continuation,
    Mask,
)
from osharm_core.errors import excerpt
from osharm_core.frames import CoordinateFrame
from osharm_core.limits import Degradation
from osharm_core.safety import SafetyEvent, events_of

#: The trajectory module's logger, as it always was.
logger = logging.getLogger("adapters.trajectories.jsonl")


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


def safety_events(value: object) -> tuple[SafetyEvent, ...]:
    """A step's `safety_events` list as events (none when absent); `_Bad` says what is wrong."""
    return _optional_value(value, "safety_events", events_of) or ()


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
        response_recorded=_get(obj, "response_recorded", (bool,), True),
        safety_events=safety_events(obj.get("safety_events")),
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
    from adapters.trajectories.osharm import (
        BETTER_LOG,
        TRAJ_FILE,
        is_result_folder,
        load_result_folder,
    )

    folder = Path(path)
    if folder.is_dir() and is_result_folder(folder):
        log = folder / BETTER_LOG
        return TrajectoryFile(
            log if log.is_file() else folder / TRAJ_FILE, load_result_folder(folder)
        )
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
