"""A result tree read for a report: its task folders, and each one's steps, outcome, usage,
verdicts and safety events.

Three kinds of task folder are read: our JSONL trajectories (`trajectory.jsonl`), OS-Harm /
OSWorld result folders (`better_log.json`, through `adapters.trajectories.result_folders`)
and plain OSWorld folders (`traj.jsonl` and `step_N_*.png`, no better_log.json, through
`adapters.trajectories.osworld_plain`). A folder that cannot be read is a task shown as
unreadable, with why; it never stops the report. Every file is read bounded (`read_regular`), never through a
symbolic link a folder holds, and screenshots only as far as their PNG header.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import attrs

from adapters._files import open_flags, read_regular
from adapters._strict_json import strict_loads
from adapters.errors import error_text
from adapters.report.gestures import clipped, step_marks, used_tags
from adapters.report.model import Picture, ReportError, SafetyEvent, StepView, TaskView, Verdict
from adapters.runs.manifest import MANIFEST_FILE, read_manifest
from adapters.trajectories.jsonl import (
    FINISHED_FILE,
    MAX_TRAJECTORY_BYTES,
    TRAJECTORY_FILE,
    TrajectoryEntry,
    open_trajectory,
    text_lines,
)
from adapters.trajectories.osworld_plain import plain_folder_entries
from adapters.trajectories.result_folders import (
    BETTER_LOG,
    CAPTIONS_DIR,
    JUDGMENT_DIR,
    RESULT_FILE,
    TRAJ_FILE,
    UNSCORED_FILE,
    read_better_log,
    result_folder_entries,
)
from osharm_core import OsharmError, png_size, thaw

#: Files that make a folder a task folder (the report does not look inside it for others).
TASK_FILES: Final = frozenset(
    {BETTER_LOG, TRAJECTORY_FILE, TRAJ_FILE, RESULT_FILE, UNSCORED_FILE, FINISHED_FILE}
)
#: The most folders looked at under a tree's root, and how deep (a run's layout is 5 deep).
MAX_FOLDERS: Final = 200_000
MAX_DEPTH: Final = 8
#: The most task folders one report shows.
MAX_TASKS: Final = 20_000
#: The most judgment.json files read per task, and the largest one.
MAX_JUDGMENTS: Final = 64
MAX_JUDGMENT_BYTES: Final = 1 << 20
#: The largest small file read whole (result.txt, finished.json, a traj.jsonl line's file).
MAX_SMALL_BYTES: Final = 64 * 1024
#: The largest traj.jsonl of a plain OSWorld folder read.
MAX_TRAJ_BYTES: Final = 64 * 1024 * 1024
#: The largest screenshot file shown (and read for a thumbnail), and its most pixels (a 6K
#: screen's; a browser, or a thumbnail, decodes it whole: some 100 MB).
MAX_IMAGE_BYTES: Final = 64 * 1024 * 1024
MAX_PICTURE_PIXELS: Final = 25_000_000
#: The most characters of a reply, of a step's actions as JSON, of a judge's reasoning, and
#: of one safety event a page shows (each cut with a note past that).
MAX_REPLY_CHARS: Final = 200_000
MAX_ACTIONS_CHARS: Final = 20_000
MAX_REASONING_CHARS: Final = 20_000
MAX_EVENT_CHARS: Final = 2_000
#: The most safety events shown per step.
MAX_EVENTS: Final = 50


def _text(exc: BaseException) -> str:
    return clipped(" ".join(error_text(exc).split()), 500)


# --- the tree --------------------------------------------------------------------------


def _entries(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as listing:
            return list(listing)
    except OSError:
        return []


def task_folders(root: Path, skip: Path | None = None) -> list[Path]:
    """The task folders under `root` (`root` itself when it is one), sorted; `skip` (the
    report's own folder) and hidden folders are passed over, links are not followed.
    More than `MAX_FOLDERS` folders, or `MAX_TASKS` tasks, is a `ReportError`."""
    found: list[Path] = []
    stack, seen = [(root, 0)], 0
    while stack:
        directory, depth = stack.pop()
        seen += 1
        if seen > MAX_FOLDERS or len(found) > MAX_TASKS:
            raise ReportError(
                f"{root} holds more than {min(seen, MAX_FOLDERS):,} folders or {MAX_TASKS:,} "
                "tasks; point the report at one run's folder"
            )
        entries = _entries(directory)
        if any(e.name in TASK_FILES and e.is_file(follow_symlinks=False) for e in entries):
            found.append(directory)
            continue
        if depth < MAX_DEPTH:
            stack.extend(
                (Path(e.path), depth + 1)
                for e in entries
                if e.is_dir(follow_symlinks=False)
                and not e.name.startswith(".")
                and e.name not in (JUDGMENT_DIR, CAPTIONS_DIR)
                and Path(e.path) != skip
            )
    return sorted(found)


@attrs.frozen
class RunRecord:
    """The manifest kept at a tree's root (`None`: none), why it cannot be read, and the last
    outcome each task folder had in a run that ran it (by folder, relative to the root)."""

    manifest: Mapping[str, Any] | None = None
    problem: str | None = None
    outcomes: Mapping[str, Mapping[str, Any]] = attrs.field(factory=dict)

    @classmethod
    def at(cls, root: Path) -> RunRecord:
        """The record at `root`'s manifest.json."""
        try:
            manifest = read_manifest(root)
        except OsharmError as exc:
            return cls(problem=_text(exc))
        if manifest is None:
            return cls()
        outcomes: dict[str, Mapping[str, Any]] = {}
        for run in [*_listed(manifest.get("previous")), manifest]:
            for outcome in _listed(run.get("outcomes") if isinstance(run, dict) else None):
                match outcome:
                    case {"folder": str(folder), "status": str(status)} if status in (
                        "finished",
                        "failed",
                    ):
                        outcomes[folder] = outcome
        return cls(manifest, None, outcomes)


def _listed(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


# --- one task --------------------------------------------------------------------------


def _names(folder: Path) -> frozenset[str]:
    """The regular files directly in `folder` (links left out)."""
    return frozenset(e.name for e in _entries(folder) if e.is_file(follow_symlinks=False))


def read_task(root: Path, folder: Path, run: RunRecord) -> TaskView:
    """The task in `folder` (under `root`), as the report shows it; one that cannot be read
    is `unreadable`, with why in `problem`."""
    place = folder.relative_to(root)
    base = TaskView(
        key=place.as_posix(),
        folder=folder,
        domain=place.parts[-2] if len(place.parts) >= 2 else "local",
        example_id=place.parts[-1] if place.parts else folder.name,
    )
    try:
        files = _names(folder)
        for name in (BETTER_LOG, TRAJECTORY_FILE):
            if name not in files and os.path.lexists(folder / name):
                raise ReportError(f"{name} is not a regular file")
        if BETTER_LOG in files:
            task = _result_folder(base, folder)
        elif TRAJECTORY_FILE in files:
            task = _trajectory(base, folder)
        else:
            task = _plain_folder(base, folder, files)
        task = _ended(task, files, run.outcomes.get(base.key))
        return _totals(attrs.evolve(task, verdicts=verdicts(folder)), files, run)
    except (OsharmError, OSError, ValueError, RecursionError) as exc:
        return attrs.evolve(base, outcome="unreadable", problem=_text(exc))


def _trajectory(base: TaskView, folder: Path) -> TaskView:
    loaded = open_trajectory(folder)
    extras = _line_extras(loaded.path, len(loaded.entries))
    first = loaded.entries[0]
    return attrs.evolve(
        base,
        source="jsonl",
        model=first.model,
        observation_type=first.observation_type,
        action_space=first.action_space,
        instruction=first.instruction,
        steps=tuple(step_view(e, folder, x) for e, x in zip(loaded.entries, extras, strict=True)),
        note=loaded.torn_tail,
    )


def _line_extras(path: Path, count: int) -> list[Mapping[str, Any]]:
    """What each complete line of a trajectory holds besides its entry (its `safety_events`),
    one mapping per entry; a line holding none gives an empty one."""
    data = read_regular(path, "trajectory", MAX_TRAJECTORY_BYTES, ReportError)
    extras: list[Mapping[str, Any]] = []
    for _, line, _ in text_lines(data):
        if len(extras) == count:
            break
        value: Any = {}
        if b'"safety_events"' in line:
            try:
                value = strict_loads(line)
            except (ValueError, RecursionError):
                value = {}
        extras.append(value if isinstance(value, dict) else {})
    return extras + [{}] * (count - len(extras))


def _result_folder(base: TaskView, folder: Path) -> TaskView:
    log = read_better_log(folder)
    entries = result_folder_entries(folder, log)
    params = _mapping(log.get("params"))
    task = _mapping(log.get("task"))
    injection = _mapping(task.get("injection"))
    shown = " / ".join(str(injection[k]) for k in ("type", "goal_id") if k in injection)
    raw = [_mapping(step) for step in log["steps"]]
    return attrs.evolve(
        base,
        source="osharm",
        model=_string(params.get("model")),
        observation_type=_string(params.get("observation_type")),
        action_space=_string(params.get("action_space")),
        instruction=_string(task.get("instruction")),
        injection=clipped(shown, 200),
        jailbreak=task.get("jailbreak") is True,
        steps=tuple(step_view(e, folder, x) for e, x in zip(entries, raw, strict=True)),
    )


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, dict) else {}


def _string(value: object) -> str:
    return value if isinstance(value, str) else ""


def _plain_folder(base: TaskView, folder: Path, files: frozenset[str]) -> TaskView:
    """A plain OSWorld folder, read as the library reads it (`plain_folder_entries`): each
    step's actions, the reply its lines keep (if any) and the screenshot it saw."""
    entries = plain_folder_entries(folder, empty_ok=True) if TRAJ_FILE in files else ()
    views = tuple(step_view(entry, folder, {}) for entry in entries)
    return attrs.evolve(base, source="osworld", steps=views)


def _traj_lines(folder: Path, files: frozenset[str]) -> Iterator[Mapping[str, Any]]:
    """traj.jsonl's readable lines (objects), each once; unreadable ones are passed over."""
    if TRAJ_FILE not in files:
        return
    data = read_regular(
        folder / TRAJ_FILE, "action log", MAX_TRAJ_BYTES, ReportError, follow_links=False
    )
    for _, line, _ in text_lines(data):
        try:
            value = strict_loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(value, dict):
            yield value


# --- one step --------------------------------------------------------------------------


def step_view(entry: TrajectoryEntry, folder: Path, extra: Mapping[str, Any]) -> StepView:
    """One step: its screenshot checked, its actions as marks, its usage (a result folder's
    step keeps none but what `extra`, its raw record, may hold) and its safety events."""
    name = entry.som_screenshot or entry.screenshot
    picture, note = picture_at(folder, name)
    frame = entry.frame
    screen = (frame.screen_width, frame.screen_height) if frame is not None else None
    marks = step_marks(entry.actions, entry.masks)
    usage = entry.usage
    recorded = _mapping(extra.get("usage"))
    return StepView(
        number=entry.step,
        response=_cut(entry.response, MAX_REPLY_CHARS, "reply"),
        picture=picture,
        picture_note=note,
        screen=screen or (None if picture is None else picture.size),
        marks=marks,
        boxes=tuple(entry.masks or ()),
        tags=used_tags(marks),
        actions=_actions_text(entry.actions),
        parsed=entry.actions is not None,
        input_tokens=_count(usage.input_tokens, recorded.get("input_tokens")),
        output_tokens=_count(usage.output_tokens, recorded.get("output_tokens")),
        cost_usd=_amount(entry.cost_usd, extra.get("cost_usd")),
        latency=_amount(entry.latency, extra.get("latency")),
        time=entry.time,
        safety=safety_events(extra.get("safety_events")),
    )


def _count(value: int | None, recorded: object) -> int | None:
    if value is not None:
        return value
    return recorded if type(recorded) is int and recorded >= 0 else None


def _amount(value: float | None, recorded: object) -> float | None:
    if value is not None:
        return value
    ok = type(recorded) in (int, float) and 0 <= recorded < float("inf")  # type: ignore[operator]
    return float(recorded) if ok else None  # type: ignore[arg-type]


def _cut(text: str, limit: int, what: str) -> str:
    if len(text) <= limit:
        return text
    return f"{text[:limit]}\n[… the {what} goes on for {len(text) - limit:,} more characters]"


def _actions_text(actions: Sequence[Any] | None) -> tuple[str, ...]:
    """Each action as shown: code as it is, an object as JSON (each cut when very long)."""
    shown = []
    for action in actions or ():
        text = (
            action
            if isinstance(action, str)
            else json.dumps(thaw(action), ensure_ascii=False, default=repr)
        )
        shown.append(_cut(text, MAX_ACTIONS_CHARS, "action"))
    return tuple(shown)


def safety_events(value: object) -> tuple[SafetyEvent, ...]:
    """A step's recorded `safety_events` as shown: each one's name (its `code`, `kind`,
    `type`, `name` or `category`, else `event`) and what it says (its `message`, `detail` or
    `reason`, else the whole event as JSON), at most `MAX_EVENTS`."""
    events = []
    for event in _listed(value)[:MAX_EVENTS]:
        fields = _mapping(event)
        kinds = [fields[k] for k in ("code", "kind", "type", "name", "category") if k in fields]
        words = [fields[k] for k in ("message", "detail", "reason") if k in fields]
        kind = kinds[0] if kinds and isinstance(kinds[0], str) else "event"
        said = words[0] if words and isinstance(words[0], str) else None
        text = said if said is not None else json.dumps(event, ensure_ascii=False, default=repr)
        events.append(SafetyEvent(clipped(kind, 80), clipped(text, MAX_EVENT_CHARS)))
    return tuple(events)


def _head(path: Path, size: int) -> tuple[bytes, int]:
    """The first `size` bytes of the regular file at `path` (never through a link, never
    waiting on a FIFO), and the file's size."""
    flags = os.O_RDONLY | open_flags("O_NOFOLLOW", "O_NONBLOCK", "O_NOCTTY", "O_BINARY")
    fd = os.open(path, flags)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ReportError(f"{path.name} is not a regular file")
        return os.read(fd, size), info.st_size
    finally:
        os.close(fd)


def picture_at(folder: Path, name: str | None) -> tuple[Picture | None, str | None]:
    """The screenshot `name` in `folder`, checked from its PNG header (a regular file, not a
    link, at most `MAX_IMAGE_BYTES`, a PNG of at most `MAX_PICTURE_PIXELS` pixels), or why
    it is not shown."""
    if name is None:
        return None, "no screenshot recorded"
    try:
        head, length = _head(folder / name, 33)
        width, height = png_size(head)
    except FileNotFoundError:
        return None, f"{clipped(name, 80)} is missing"
    except (OsharmError, OSError) as exc:
        return None, f"{clipped(name, 80)} is not shown: {_text(exc)}"
    if length > MAX_IMAGE_BYTES or width * height > MAX_PICTURE_PIXELS:
        size = f"{width:,} x {height:,} pixels, {length:,} bytes"
        return None, f"{clipped(name, 80)} is refused: {size}, past the report's limits"
    return Picture(folder / name, (width, height)), None


# --- outcome, verdicts, totals -----------------------------------------------------------


def _small_text(path: Path) -> str:
    return read_regular(path, "file", MAX_SMALL_BYTES, ReportError, follow_links=False).decode(
        "utf-8", "replace"
    )


def _scored(task: TaskView, score: object) -> TaskView:
    match score:
        case int() | float() if not isinstance(score, bool) and score == score:
            value = float(score)
            return attrs.evolve(task, score=value, outcome="success" if value > 0 else "failure")
    return attrs.evolve(task, outcome="unscored")


def _ended(task: TaskView, files: frozenset[str], ran: Mapping[str, Any] | None) -> TaskView:
    """How the task ended: its score (result.txt, or finished.json's), no score
    (unscored.txt), an error (OSWorld's error line, or the run's manifest saying it failed),
    or not at all (`unfinished`)."""
    folder = task.folder
    if RESULT_FILE in files:
        text = _small_text(folder / RESULT_FILE).strip()
        try:
            return _scored(task, float(text))
        except ValueError:
            return attrs.evolve(task, outcome="unscored", detail=f"result.txt holds {text!r:.60}")
    if UNSCORED_FILE in files:
        return attrs.evolve(task, outcome="unscored")
    if FINISHED_FILE in files and task.source == "jsonl":
        try:
            marker = strict_loads(_small_text(folder / FINISHED_FILE))
        except (ValueError, RecursionError):
            marker = {}
        return _scored(task, _mapping(marker).get("score"))
    errors = [line["Error"] for line in _traj_lines(folder, files) if "Error" in line]
    if errors:
        return attrs.evolve(task, outcome="error", detail=clipped(str(errors[-1]), 500))
    if ran is not None and ran.get("status") == "failed":
        return attrs.evolve(task, outcome="error", detail=clipped(str(ran.get("detail")), 500))
    return task


def verdicts(folder: Path) -> tuple[Verdict, ...]:
    """The judge's verdicts a folder holds (`judgment/MODEL/TYPE/VERSION/judgment.json`)."""
    found: list[Verdict] = []
    for model in _subfolders(folder / JUDGMENT_DIR):
        for kind in _subfolders(model):
            for version in _subfolders(kind):
                if len(found) < MAX_JUDGMENTS and "judgment.json" in _names(version):
                    judge = f"{model.name} / {kind.name} / {version.name}"
                    found.append(_verdict(judge, version / "judgment.json"))
    return tuple(found)


def _subfolders(directory: Path) -> list[Path]:
    entries = _entries(directory)
    return sorted(Path(e.path) for e in entries if e.is_dir(follow_symlinks=False))[:MAX_JUDGMENTS]


def _verdict(judge: str, path: Path) -> Verdict:
    try:
        data = read_regular(path, "judgment", MAX_JUDGMENT_BYTES, ReportError, follow_links=False)
        value = strict_loads(data.decode("utf-8"))
    except (OsharmError, OSError, ValueError, RecursionError) as exc:
        return Verdict(judge, problem=_text(exc))
    fields = _mapping(value)
    step = fields.get("violation_step")
    reasoning = fields.get("reasoning")
    return Verdict(
        judge,
        success=fields.get("success") if isinstance(fields.get("success"), bool) else None,
        safety=fields.get("safety") if isinstance(fields.get("safety"), bool) else None,
        violation_step=step if type(step) is int and step >= 0 else None,
        reasoning=_cut(reasoning, MAX_REASONING_CHARS, "reasoning")
        if isinstance(reasoning, str)
        else "",
        problem=None if fields else "judgment.json is not a JSON object",
    )


def _totals(task: TaskView, files: frozenset[str], run: RunRecord) -> TaskView:
    """The task's tokens, cost and wall time: its steps' (the run's manifest's when its steps
    keep none: result folders do not), and the violation step of an unsafe verdict marked."""
    ran = _mapping(run.outcomes.get(task.key))
    steps = task.steps
    unsafe = {v.violation_step for v in task.verdicts if v.safety is False}
    if unsafe - {None}:
        steps = tuple(attrs.evolve(s, violation=s.number - 1 in unsafe) for s in steps)
    return attrs.evolve(
        task,
        steps=steps,
        input_tokens=_sum([s.input_tokens for s in steps], ran.get("input_tokens")),
        output_tokens=_sum([s.output_tokens for s in steps], ran.get("output_tokens")),
        cost_usd=_sum([s.cost_usd for s in steps], ran.get("cost_usd"), every=True),
        seconds=_seconds(task, files, ran.get("seconds")),
    )


def _sum(values: Sequence[Any], recorded: object, *, every: bool = False) -> Any:
    """The steps' sum (`every`: only when each is known), else what the manifest recorded."""
    known = [v for v in values if v is not None]
    if known and (len(known) == len(values) or not every):
        return sum(known)
    return recorded if type(recorded) in (int, float) else None


def _seconds(task: TaskView, files: frozenset[str], recorded: object) -> float | None:
    """Wall time: from the first step's time to the last's end (our trajectories), else the
    run's manifest's, else the span of the folder's file times."""
    times = [_instant(s.time) for s in task.steps]
    first, last = (times[0], times[-1]) if len(times) >= 2 else (None, None)
    if first is not None and last is not None and last >= first:
        return (last - first).total_seconds() + (task.steps[-1].latency or 0.0)
    if type(recorded) in (int, float):
        return float(recorded)  # type: ignore[arg-type]
    stamps = []
    for name in files - {MANIFEST_FILE}:
        try:
            stamps.append(os.lstat(task.folder / name).st_mtime)
        except OSError:
            continue
    return max(stamps) - min(stamps) if len(stamps) >= 2 else None


def _instant(text: str) -> datetime | None:
    """A step's time (our writer's: UTC, with its offset); `None` for none, or one without
    an offset (it cannot be set against the others)."""
    try:
        moment = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    return None if moment is None or moment.tzinfo is None else moment


__all__ = [
    "RunRecord",
    "picture_at",
    "read_task",
    "safety_events",
    "step_view",
    "task_folders",
    "verdicts",
]
