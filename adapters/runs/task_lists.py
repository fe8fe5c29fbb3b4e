"""OSWorld task lists read: `{domain: [example_id, ...]}` meta files and their examples,
each task's result folder checked before any runs, and whether a folder is finished.

A task list is an `evaluation_examples` meta file (`test_all.json`, OS-Harm's
`test_misuse.json`, ...): a JSON object `{domain: [example_id, ...]}`; each example is
`{examples_dir}/{domain}/{example_id}.json` with at least an `instruction` (OSWorld's task
config format).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs

from adapters._files import MAX_JSON_BYTES, read_regular
from adapters._strict_json import _NotFinite, strict_loads
from adapters.errors import TrajectoryError, error_text
from adapters.trajectories.jsonl import _plain_file_name
from adapters.trajectories.osharm import (
    RESULT_FILE,
    UNSCORED_FILE,
    check_writable,
    result_folder,
)
from osharm_core import AgentConfig
from osharm_core.errors import ConfigError, excerpt


@attrs.frozen(kw_only=True)
class OsworldTask:
    """One example of a task list: where it sits, what it asks, and its whole config."""

    domain: str
    example_id: str
    instruction: str
    config: Mapping[str, Any] = attrs.field(factory=dict, repr=False)


class _Repeated(ValueError):
    """A key an object of a task list names twice; its argument is the key."""


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's pairs as a dict; `_Repeated` for a key given twice (`json.loads` would keep
    only its last value, dropping the tasks listed under the first)."""
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise _Repeated(key)
        mapping[key] = value
    return mapping


def _json(path: Path, *, unique: bool = False) -> Any:
    """The JSON of a task list or example file; with `unique`, a key repeated in an object is
    a `TrajectoryError` naming it."""
    try:
        data = read_regular(path, "task file", MAX_JSON_BYTES, TrajectoryError)
    except FileNotFoundError:
        raise TrajectoryError(f"no such task file: {path}") from None
    try:
        return strict_loads(data.decode("utf-8"), object_pairs_hook=_unique if unique else None)
    except _NotFinite as exc:
        raise TrajectoryError(f"cannot read {path}: {exc.reason}") from None
    except _Repeated as exc:
        raise TrajectoryError(
            f"{path} names {excerpt(exc.args[0])} twice; each domain must be listed once "
            "(JSON readers keep only the last list, dropping the tasks of the first)"
        ) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise TrajectoryError(f"cannot read {path}: {error_text(exc)}") from None
    except RecursionError:
        raise TrajectoryError(f"cannot read {path}: its JSON is nested too deeply") from None


def _check_names(meta: str | os.PathLike[str], index: Mapping[str, list[str]]) -> None:
    """A `TrajectoryError` naming `meta` and the value when a domain or id is not a plain file
    name (`_plain_file_name`: no `/`, `\\`, `:` or NUL, not `.` or `..`, at most 255 bytes):
    each names a file or folder inside the examples folder (and the observations folder, and
    a replay source), and `../x` or an absolute path would read a file outside it."""
    rule = "a plain file name (no '/', '\\', ':' or NUL, not '.' or '..', at most 255 bytes)"
    for name, ids in index.items():
        if not _plain_file_name(name):
            raise TrajectoryError(f"{meta}: domain {excerpt(name)} is not {rule}")
        for example_id in ids:
            if not _plain_file_name(example_id):
                raise TrajectoryError(
                    f"{meta}: id {excerpt(example_id)} of domain {excerpt(name)} is not {rule}"
                )


def load_task_list(
    meta: str | os.PathLike[str],
    examples: str | os.PathLike[str],
    *,
    domain: str = "all",
) -> tuple[OsworldTask, ...]:
    """The tasks of a meta file, in its order (only `domain`'s unless it is `all`).

    Raises `TrajectoryError` naming the file when the meta file or an example is
    missing or not in the documented shape, and naming the meta file and the
    value, before any example is read, when it names a domain twice or a domain
    or id is not a plain file name (`../x`, an absolute path: see `_check_names`).
    """
    index = _json(Path(meta), unique=True)
    if not isinstance(index, dict) or not all(
        isinstance(ids, list) and all(isinstance(i, str) for i in ids) for ids in index.values()
    ):
        raise TrajectoryError(f"{meta}: expected an object mapping each domain to a list of ids")
    _check_names(meta, index)
    if domain != "all" and domain not in index:
        known = ", ".join(sorted(index)[:20]) or "none"
        raise TrajectoryError(f"{meta} has no domain {domain!r} (it has: {known})")
    tasks = []
    for name, ids in index.items():
        if domain not in ("all", name):
            continue
        for example_id in ids:
            path = Path(examples) / name / f"{example_id}.json"
            config = _json(path)
            instruction = config.get("instruction") if isinstance(config, dict) else None
            if not isinstance(instruction, str) or not instruction.strip():
                raise TrajectoryError(f"{path} has no 'instruction' string")
            tasks.append(
                OsworldTask(
                    domain=name, example_id=example_id, instruction=instruction, config=config
                )
            )
    return tuple(tasks)


def task_folders(
    tasks: Sequence[OsworldTask], config: AgentConfig, result_dir: str | os.PathLike[str]
) -> tuple[Path, ...]:
    """Each task's result folder, checked before anything runs: a `ConfigError` names an item
    that is not an `OsworldTask`, a `TrajectoryError` a task whose domain or id cannot name
    a folder, two tasks that would share one (the same id twice, or ids such as `x:1` and
    `x_1`, which name the same folder), and an unfinished folder holding a directory (or
    FIFO) where its writer keeps a file (`check_writable`: a `result.txt/` directory)."""
    folders: list[Path] = []
    owner: dict[Path, OsworldTask] = {}
    if isinstance(tasks, str | bytes):  # type: ignore[unreachable]  # untyped callers
        raise ConfigError(
            f"tasks must be a list of OsworldTask (see load_task_list); got {excerpt(tasks)}"
        )
    for index, task in enumerate(tasks):
        if not isinstance(task, OsworldTask):
            raise ConfigError(
                f"tasks[{index}] must be an OsworldTask (see load_task_list); "
                f"got {type(task).__name__} {excerpt(task)}"
            )
        folder = result_folder(result_dir, config, task.domain, task.example_id)
        other = owner.setdefault(folder, task)
        if other is not task:
            raise TrajectoryError(
                f"tasks {other.domain}/{other.example_id} and {task.domain}/{task.example_id} "
                f"would share the result folder {folder}; each task needs its own"
            )
        if folder.is_dir() and not is_finished(folder):
            check_writable(folder)
        folders.append(folder)
    return tuple(folders)


def is_finished(folder: str | os.PathLike[str]) -> bool:
    """Whether a task's result folder is complete: it holds `result.txt` (the score) or, for an
    episode its environment could not score, `unscored.txt`; either is written last."""
    path = Path(folder)
    return (path / RESULT_FILE).is_file() or (path / UNSCORED_FILE).is_file()
