"""OS-Harm / OSWorld result folders read back: ours, or one the reference wrote, as a trajectory.

`load_result_folder` reads a task folder (`better_log.json`'s steps, with the screenshot
and tree files each step saw) as `TrajectoryEntry` values, so `replay:PATH`,
`osharm-agent replay PATH` and `render --trajectory PATH` accept it. The layout's file
names are here too; `adapters.trajectories.osharm` writes the folders.
"""

from __future__ import annotations

import bisect
import itertools
import json
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Final

import attrs

from adapters._strict_json import STRICT_DECODER, _NotFinite, strict_loads
from adapters.errors import (
    TrajectoryError,
    error_text,
)
from adapters.trajectories.jsonl import (
    MAX_TRAJECTORY_STEPS,
    TRAJECTORY_FILE,
    TrajectoryEntry,
    _Bad,
    _masks,
    _optional_value,
    _read_regular,
    text_lines,
    too_many_steps,
)
from adapters.trajectories.jsonl_read import safety_events
from osharm_core import (
    MAX_ACTIONS_PER_REPLY,
    CoordinateFrame,
    Mask,
)
from osharm_core.limits import Degradation
from osharm_core.safety import SafetyEvent

BETTER_LOG: Final = "better_log.json"
TRAJ_FILE: Final = "traj.jsonl"
#: Where OS-Harm's judge writes its verdicts inside a task folder (`judgment/MODEL/TYPE/VERSION/`).
JUDGMENT_DIR: Final = "judgment"
#: Where the judge caches its screenshot captions (`captions/CAPTIONER/STEM....json`, as its
#: forks' code has it), reused whenever present: after a redo, `step_0`'s would be the old run's.
CAPTIONS_DIR: Final = "captions"
RESULT_FILE: Final = "result.txt"
#: Ours: marks a folder whose episode ended but whose environment gave no score (a VM's
#: server cannot judge), so a rerun does not run it again; OSWorld's tools never read it.
UNSCORED_FILE: Final = "unscored.txt"
#: The screen recording OSWorld's runner saves in a task's folder (when the environment records).
RECORDING_FILE: Final = "recording.mp4"
FIRST_SCREENSHOT: Final = "step_0.png"
TIMESTAMP_FORMAT: Final = "%Y%m%d@%H%M%S"
#: Ours: the lock a live run holds on a task folder (`adapters.runs.locks`); writers that
#: empty a folder leave it alone.
LOCK_FILE: Final = ".osharm-lock.json"


def is_result_folder(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a task folder in the OS-Harm / OSWorld layout: it holds better_log.json,
    or (a plain OSWorld folder) traj.jsonl and no trajectory of ours."""
    folder = Path(path)
    if (folder / BETTER_LOG).is_file():
        return True
    return (folder / TRAJ_FILE).is_file() and not (folder / TRAJECTORY_FILE).exists()


#: A screenshot or tree saved after step N: `step_{N}_{stamp}.png` / `.xml` (N in ASCII digits,
#: few enough for `int`).
_STEP_FILE: Final = re.compile(r"step_([0-9]{1,40})_(.+)\.(png|xml)", re.DOTALL)


@attrs.frozen
class _Listing:
    """A result folder's regular files, listed once: a step's files are matched against these,
    never looked up (or globbed) by a name the folder's own files give. Symbolic links are
    left out, so no step reads a file outside the folder. `shots` holds each
    `step_{N}_{stamp}.png` as (N, name), sorted; `stamps` the same per timestamp."""

    files: frozenset[str]
    shots: tuple[tuple[int, str], ...]
    stamps: Mapping[str, tuple[tuple[int, str], ...]]

    @classmethod
    def of(cls, directory: Path) -> _Listing:
        try:
            with os.scandir(directory) as listing:
                files = frozenset(
                    entry.name for entry in listing if entry.is_file(follow_symlinks=False)
                )
        except OSError as exc:
            raise TrajectoryError(f"cannot list the result folder {directory}: {exc}") from None
        shots: list[tuple[int, str]] = []
        stamps: dict[str, list[tuple[int, str]]] = {}
        for name in sorted(files):
            found = _STEP_FILE.fullmatch(name)
            if found is not None and found[3] == "png":
                shots.append((int(found[1]), name))
                stamps.setdefault(found[2], []).append(shots[-1])
        return cls(files, tuple(sorted(shots)), {k: tuple(sorted(v)) for k, v in stamps.items()})


def _latest_below(shots: Sequence[tuple[int, str]], step: int) -> str | None:
    """The last of the sorted `shots` saved after a step before `step`."""
    at = bisect.bisect_left(shots, (step,))
    return shots[at - 1][1] if at else None


def _screenshot(listing: _Listing, name: object) -> str | None:
    """The recorded screenshot name, or the file the reference meant when its name is off by a step.

    The reference names step i's screenshot from the previous step's number, so a step
    with no action points at a file that does not exist; the screenshot of the nearest lower
    step (one of the same timestamp first), else `step_0.png`, is the one it saw. A name that
    is no step's (`step_{N}_{stamp}.png`, N in ASCII digits) gets `step_0.png`.
    """
    if not isinstance(name, str) or not name:
        return None
    if name in listing.files:
        return name
    wanted = _STEP_FILE.fullmatch(name)
    if wanted is not None and wanted[3] == "png":
        step = int(wanted[1])
        same_time = _latest_below(listing.stamps.get(wanted[2], ()), step)
        found = same_time or _latest_below(listing.shots, step)
        if found is not None:
            return found
    return FIRST_SCREENSHOT if FIRST_SCREENSHOT in listing.files else None


#: The most traj.jsonl lines `_turns_seen` looks at per model call: one per executed action,
#: at most `MAX_ACTIONS_PER_REPLY` code actions a reply, and the error line; lines past
#: this many for all the calls read are passed over, unread.
_LINES_PER_CALL: Final = MAX_ACTIONS_PER_REPLY + 1


def _turns_seen(directory: Path, listing: _Listing, count: int) -> list[str]:
    """The file stem of the observation each of `count` model calls saw (`step_0`, then
    `step_{n}_{stamp}` of the last observation saved after an earlier step `n`).

    traj.jsonl's last line of step `n` names it (its timestamp, whether or not a screenshot
    was saved); an observation saved with no action (a paced replay) by its files. Unreadable
    lines (`NaN` included), files of other names and lines past `_LINES_PER_CALL` per call are
    passed over: this only picks which tree file belongs to a step.
    """
    after: dict[int, str] = {}
    for name in sorted(listing.files):
        found = _STEP_FILE.fullmatch(name)
        if found is not None and int(found[1]) < count:
            after[int(found[1])] = name.removesuffix(f".{found[3]}")
    try:
        data = _read_regular(directory / TRAJ_FILE, "action log")
    except FileNotFoundError:
        data = b""
    lines = itertools.islice(text_lines(data), count * _LINES_PER_CALL)
    for _, line, _ in lines:
        try:
            entry = strict_loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(entry, dict):
            continue
        step, when = entry.get("step_num"), entry.get("action_timestamp")
        if type(step) is int and 0 < step < count and isinstance(when, str) and when:
            after[step] = f"step_{step}_{when}"
    stems, current = [], FIRST_SCREENSHOT.removesuffix(".png")
    for index in range(count):
        current = after.get(index, current)
        stems.append(current)
    return stems


def _own_files(listing: _Listing, recorded: object, stem: str) -> tuple[str | None, str | None]:
    """A step's screenshot and raw tree: the tree is its own observation's (`stem`.xml, kept by
    our writer); the screenshot is the recorded one (see `_screenshot`), unless that tree shows
    it belongs to another observation (a folder whose step had none): then its own, or none."""
    screenshot = _screenshot(listing, recorded)
    tree = f"{stem}.xml"
    if tree not in listing.files:
        return screenshot, None
    if screenshot is not None and screenshot != f"{stem}.png":
        screenshot = f"{stem}.png" if f"{stem}.png" in listing.files else None
    return screenshot, tree


#: JSON's whitespace, as Python's reader skips it.
_SPACE: Final = re.compile(r"[ \t\n\r]*")


def _skip(text: str, at: int) -> int:
    found = _SPACE.match(text, at)
    assert found is not None  # `*` matches the empty string
    return found.end()


def _expect(text: str, at: int, ends: str, what: str) -> tuple[str, int]:
    """The character at `at` (after whitespace), one of `ends`, and the index after it."""
    at = _skip(text, at)
    if at < len(text) and text[at] in ends:
        return text[at], at + 1
    raise json.JSONDecodeError(f"Expecting {what}", text, at)


def _steps_json(text: str, at: int, file: Path) -> tuple[list[Any], int]:
    """The `steps` list starting at `text[at]` (`[`), read one step at a time: the step
    past `MAX_TRAJECTORY_STEPS` is refused before it (or anything after it) is read."""
    steps: list[Any] = []
    at = _skip(text, at + 1)
    if text.startswith("]", at):
        return steps, at + 1
    while True:
        if len(steps) == MAX_TRAJECTORY_STEPS:
            raise too_many_steps(file)
        step, at = STRICT_DECODER.raw_decode(text, _skip(text, at))
        steps.append(step)
        mark, at = _expect(text, at, ",]", "',' delimiter")
        if mark == "]":
            return steps, at


def _log_json(text: str, file: Path) -> dict[str, Any]:
    """better_log.json's object, as `strict_loads` reads it (the last of a repeated key kept),
    its `steps` read one at a time (see `_steps_json`). A file that is no JSON object is a
    `TrajectoryError` before any of it is read."""
    at = _skip(text, 0)
    if not text.startswith("{", at):
        raise TrajectoryError(f"{file}: expected an object with a 'steps' list")
    log: dict[str, Any] = {}
    at = _skip(text, at + 1)
    mark = ","
    if text.startswith("}", at):
        mark, at = "}", at + 1
    while mark == ",":
        at = _skip(text, at)
        if not text.startswith('"', at):
            raise json.JSONDecodeError(
                "Expecting property name enclosed in double quotes", text, at
            )
        key, at = STRICT_DECODER.raw_decode(text, at)
        _, at = _expect(text, at, ":", "':' delimiter")
        at = _skip(text, at)
        if key == "steps" and text.startswith("[", at):
            log[key], at = _steps_json(text, at, file)
        else:
            log[key], at = STRICT_DECODER.raw_decode(text, at)
        mark, at = _expect(text, at, ",}", "',' delimiter")
    at = _skip(text, at)
    if at != len(text):
        raise json.JSONDecodeError("Extra data", text, at)
    return log


def read_better_log(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A result folder's better_log.json as JSON, checked to be an object with a `steps` list.

    Each step's `a11y_tree` there is the linearized tree the model was shown
    (before trimming), the only tree a reference-written folder keeps. JSON
    only: `NaN`, `Infinity` and `1e999` are refused, and so is a `steps` list
    longer than `MAX_TRAJECTORY_STEPS` (as soon as its step past that is reached),
    each a `TrajectoryError` naming the file.
    """
    directory = Path(path)
    file = directory / BETTER_LOG
    try:
        data = _read_regular(file, "result log")  # a regular file, of bounded size
    except FileNotFoundError:
        raise TrajectoryError(f"no {BETTER_LOG} in {directory}") from None
    try:
        log = _log_json(data.decode(json.detect_encoding(data), "surrogatepass"), file)
    except TrajectoryError:
        raise
    except _NotFinite as exc:
        raise TrajectoryError(f"cannot read {file}: {exc.reason}") from None
    except (ValueError, RecursionError) as exc:
        raise TrajectoryError(f"cannot read {file}: {error_text(exc)}") from None
    if not isinstance(log.get("steps"), list):
        raise TrajectoryError(f"{file}: expected an object with a 'steps' list")
    return log


def load_result_folder(path: str | os.PathLike[str]) -> tuple[TrajectoryEntry, ...]:
    """A task's result folder (ours or the reference's) as trajectory entries, one per model call.

    A folder holding no better_log.json but OSWorld's traj.jsonl is read as a plain OSWorld
    folder (`plain_folder_entries`: its actions, rewards, screenshots and the replies its
    lines keep). Raises `TrajectoryError` when neither is there or they are not in the
    documented shape.
    """
    if not (Path(path) / BETTER_LOG).is_file() and (Path(path) / TRAJ_FILE).is_file():
        from adapters.trajectories.osworld_plain import plain_folder_entries

        return plain_folder_entries(path)
    return result_folder_entries(path, read_better_log(path))


def result_folder_entries(
    path: str | os.PathLike[str], log: Mapping[str, Any]
) -> tuple[TrajectoryEntry, ...]:
    """The trajectory entries of the result folder at `path` whose better_log.json is `log`
    (as `read_better_log` gives it)."""
    directory = Path(path)
    file = directory / BETTER_LOG
    params: Mapping[str, Any] = log["params"] if isinstance(log.get("params"), dict) else {}
    task: Mapping[str, Any] = log["task"] if isinstance(log.get("task"), dict) else {}

    def text(mapping: Mapping[str, Any], key: str, default: str) -> str:
        value = mapping.get(key)
        return value if isinstance(value, str) else default

    entries = []
    listing = _Listing.of(directory)
    seen = _turns_seen(directory, listing, len(log["steps"]))
    for index, step in enumerate(log["steps"]):
        if not isinstance(step, dict):
            raise TrajectoryError(f"{file}: steps[{index}] is not an object")
        response = step.get("response")
        if not isinstance(response, str):
            # computer-use-preview runs record the Responses output items themselves
            response = json.dumps(response, ensure_ascii=False)
        actions = step.get("actions")
        # Our writer keeps each observation's raw tree under the step's name; the reference none.
        screenshot, tree = _own_files(listing, step.get("screenshot_file"), seen[index])
        masks, frame, reply_frame, degradation = _recorded_sending(step, f"{file}: steps[{index}]")
        entries.append(
            TrajectoryEntry(
                step=index + 1,
                instruction=text(task, "instruction", ""),
                model=text(params, "model", ""),
                observation_type=text(params, "observation_type", "a11y_tree"),
                action_space=text(params, "action_space", "pyautogui"),
                platform=text(params, "platform", "ubuntu"),
                response=response,
                actions=tuple(actions) if isinstance(actions, list) else None,
                screenshot=screenshot,
                accessibility_tree=tree,
                masks=masks,
                frame=frame,
                reply_frame=reply_frame,
                degradation=degradation,
                scaling=text(params, "scaling", "native"),
                safety_events=_events(step.get("safety_events"), f"{file}: steps[{index}]"),
            )
        )
    if not entries:
        raise TrajectoryError(f"{file} holds no steps")
    return tuple(entries)


def _events(value: object, where: str) -> tuple[SafetyEvent, ...]:
    """The safety events our writer keeps beside a step (none when absent)."""
    try:
        return safety_events(value)
    except _Bad as exc:
        raise TrajectoryError(f"{where}: {exc}") from None


def _recorded_sending(
    step: Mapping[str, Any], where: str
) -> tuple[
    tuple[Mask, ...] | None, CoordinateFrame | None, CoordinateFrame | None, Degradation | None
]:
    """The marks, frame, reply frame and cuts our writer keeps beside a step (each `None`
    when absent)."""
    try:
        return (
            _masks(step.get("masks")),
            _optional_value(step.get("frame"), "frame", CoordinateFrame.from_json),
            _optional_value(step.get("reply_frame"), "reply_frame", CoordinateFrame.from_json),
            _optional_value(step.get("degradation"), "degradation", Degradation.from_json),
        )
    except _Bad as exc:
        raise TrajectoryError(f"{where}: {exc}") from None


__all__ = [
    "BETTER_LOG",
    "CAPTIONS_DIR",
    "FIRST_SCREENSHOT",
    "JUDGMENT_DIR",
    "LOCK_FILE",
    "RECORDING_FILE",
    "RESULT_FILE",
    "TIMESTAMP_FORMAT",
    "TRAJ_FILE",
    "UNSCORED_FILE",
    "is_result_folder",
    "load_result_folder",
    "read_better_log",
    "result_folder_entries",
]
