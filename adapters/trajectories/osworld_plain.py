"""Plain OSWorld result folders read back: `traj.jsonl` and screenshots, no better_log.json.

OSWorld's own `lib_run_single.py` writes, per task, `traj.jsonl` (one line per executed
action: `step_num`, `action_timestamp`, `action`, `reward`, `done`, `info`,
`screenshot_file`), `step_N_TIMESTAMP.png` (the screenshot after each action),
`result.txt` and `recording.mp4`; newer versions add the model's reply to each line
(`response`), and OS-Harm's fork saves the first screenshot as `step_0.png`. Each model
step becomes a `TrajectoryEntry` with its actions in order, the screenshot it saw (the one
after the previous step's last action; `step_0.png`, when there, for the first), the reply
its lines hold (a text, or "" when they hold none: it is never invented), each action's
line as read (`executed`), and `response_recorded=False`: the actions were parsed by
whatever agent ran, not from that reply by this library. A replay of such a folder
(`ReplayClient`) restates each step's actions as a reply, so the agent parses, and the
environment executes, the same actions.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from adapters._strict_json import _NotFinite, strict_loads
from adapters.errors import TrajectoryError, error_text
from adapters.trajectories.jsonl import (
    MAX_TRAJECTORY_STEPS,
    TrajectoryEntry,
    _plain_file_name,
    _read_regular,
    text_lines,
)
from adapters.trajectories.result_folders import FIRST_SCREENSHOT, TRAJ_FILE
from osharm_core.errors import excerpt, is_finite_number


def _line(raw: bytes, number: int, file: Path) -> dict[str, Any] | None:
    """One traj.jsonl line as an action's record; `None` for OSWorld's error line."""
    try:
        value = strict_loads(raw.decode("utf-8"))
    except (_NotFinite, ValueError, RecursionError) as exc:
        raise TrajectoryError(f"{file} line {number}: not JSON: {error_text(exc)}") from None
    if not isinstance(value, dict):
        raise TrajectoryError(f"{file} line {number}: expected an object")
    if set(value) == {"Error"}:
        return None
    step, action = value.get("step_num"), value.get("action")
    problem = (
        "step_num must be an integer >= 1"
        if isinstance(step, bool) or not isinstance(step, int) or step < 1
        else "action must be code or an action object"
        if not isinstance(action, str | dict)
        else "reward must be a number"
        if not is_finite_number(value.get("reward", 0))
        else "info must be an object"
        if not isinstance(value.get("info", {}), dict)
        else None
    )
    if problem is not None:
        raise TrajectoryError(f"{file} line {number}: {problem}; got {excerpt(value, 120)}")
    return value


def _own_file(folder: Path, name: object) -> str | None:
    """`name` when it names a regular file of the folder's own (no path, no link)."""
    if not isinstance(name, str) or not _plain_file_name(name):
        return None
    path = folder / name
    return name if path.is_file() and not path.is_symlink() else None


def _reply(records: list[dict[str, Any]]) -> str:
    """The reply a step's lines hold (OSWorld writes the same one on each), or ""."""
    return next((r["response"] for r in records if isinstance(r.get("response"), str)), "")


def plain_folder_entries(
    folder: str | os.PathLike[str], *, empty_ok: bool = False
) -> tuple[TrajectoryEntry, ...]:
    """A plain OSWorld task folder's model steps (see the module doc); a `TrajectoryError`
    naming the file when traj.jsonl is missing, holds no action (with `empty_ok`, both are
    no steps: an episode that ended before its first action), or a line is not an action's
    record. A torn last line (a run killed mid-write) is left out."""
    directory = Path(folder)
    file = directory / TRAJ_FILE
    try:
        data = _read_regular(file, "trajectory")
    except FileNotFoundError:
        if empty_ok:
            return ()
        raise TrajectoryError(f"no trajectory file in {directory} (no {TRAJ_FILE})") from None
    steps: dict[int, list[dict[str, Any]]] = {}
    for number, raw, unended in text_lines(data):
        try:
            record = _line(raw, number, file)
        except TrajectoryError:
            if unended:
                break  # torn by a kill mid-write
            raise
        if record is not None:
            steps.setdefault(record["step_num"], []).append(record)
        if len(steps) > MAX_TRAJECTORY_STEPS:
            raise TrajectoryError(f"{file} holds more than {MAX_TRAJECTORY_STEPS} steps")
    if not steps:
        if empty_ok:
            return ()
        raise TrajectoryError(f"{file} records no action")
    entries, seen = [], _own_file(directory, FIRST_SCREENSHOT)
    for number in sorted(steps):
        records = steps[number]
        actions = tuple(r["action"] for r in records)
        action_space = "computer_13" if any(isinstance(a, dict) for a in actions) else "pyautogui"
        entries.append(
            TrajectoryEntry(
                step=number,
                response=_reply(records),
                response_recorded=False,
                action_space=action_space,
                observation_type="screenshot",
                actions=actions,
                screenshot=seen,
                executed=tuple(records),
            )
        )
        seen = _own_file(directory, records[-1].get("screenshot_file"))
    return tuple(entries)


def restated_reply(actions: tuple[Any, ...] | None) -> str:
    """A reply that parses to `actions` (replaying a plain folder executes its recorded
    actions again, whatever reply its lines keep): each code or computer_13 action in a
    fenced block of its own, WAIT / DONE / FAIL on lines of their own after them, as the
    parsers read them."""
    blocks, words = [], []
    for action in actions or ():
        if isinstance(action, str) and action.strip() in ("WAIT", "DONE", "FAIL"):
            words.append(action.strip())
        elif isinstance(action, str):
            blocks.append(f"```python\n{action}\n```")
        else:
            blocks.append(f"```json\n{json.dumps(action, ensure_ascii=False)}\n```")
    return "\n".join([*blocks, *words])
