"""OS-Harm / OSWorld result folders: written so OS-Harm's judge reads them unchanged, and read back.

A task's folder is `{result_dir}/{action_space}/{observation_type}/{model}/{domain}/{example_id}/`
(`result_folder`) and holds, as OSWorld's `lib_run_single` and OS-Harm write them:

* `step_0.png`, the screenshot before the first model call, and
  `step_{n}_{YYYYMMDD@HHMMSS}.png`, the screenshot after each executed action of step `n`,
  each with its accessibility tree beside it (`step_0.xml`, ...; UTF-8, the text the
  agent read, whatever bytes-like form or encoding the environment gave), so
  `osharm-agent render FOLDER/step_0.png` shows what a step saw;
* `traj.jsonl`, one line per executed action (`step_num`, `action_timestamp`,
  `action`, `reward`, `done`, `info`, `screenshot_file`: null when the observation
  after the action had no screenshot), appended and flushed
  per action, and the `{"Error": "Time limit exceeded in {domain}/{example_id}"}`
  line when the episode fails;
* `better_log.json`, the judge's input: `params` (the agent's settings and
  `max_steps`), `task` (`jailbreak`, `injection`, `instruction`) and one entry
  per model call in `steps` (`a11y_tree`: the whole linearized tree, untrimmed;
  `screenshot_file`: the screenshot the step saw, a file that exists, or
  null when that observation had none, its tree being saved under its own name all the
  same; `response`; `actions`), rewritten after every model call;
* `result.txt`, the evaluator's score, written last (OSWorld's resume logic
  takes a folder with `result.txt` as finished).

Sources for each field: the OS-Harm documentation's trajectory-format and
interpreting-results pages, and the `better_log` construction shared by the
OS-Harm forks of `lib_run_single.py` (see the project's OSHARM_FORMATS notes).
`load_result_folder` reads such a folder (ours or one the reference wrote) as
a trajectory, so `replay:PATH` and `osharm-agent replay PATH` accept it.
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import itertools
import json
import os
import re
import shutil
import stat
from collections.abc import Callable, Generator, Mapping, Sequence
from concurrent.futures import Executor
from datetime import datetime
from pathlib import Path
from typing import Any, Final, Protocol

import attrs

from adapters._checks import flag_field, path_argument, positive_int
from adapters._files import _reason, create_file
from adapters._strict_json import STRICT_DECODER, _NotFinite, strict_loads
from adapters.errors import (
    AccessibilityTreeError,
    BudgetExceeded,
    EnvironmentFailure,
    TrajectoryError,
    TrajectoryExistsError,
    error_text,
)
from adapters.trajectories.jsonl import (
    MAX_TRAJECTORY_STEPS,
    TrajectoryEntry,
    _Bad,
    _fsync_append,
    _json_line,
    _masks,
    _optional_value,
    _read_regular,
    _utf8,
    part_bytes,
    record_json,
    text_lines,
    too_many_steps,
    tree_part,
)
from osharm_core import (
    MAX_ACTIONS_PER_REPLY,
    Action,
    AgentConfig,
    ConfigError,
    CoordinateFrame,
    Mask,
    linearize_accessibility_tree,
    thaw,
)
from osharm_core.config import check_config
from osharm_core.errors import check_flag, excerpt, is_finite_number, number_excerpt
from osharm_core.limits import Degradation
from osharm_core.prompts import DEFAULT_PASSWORD
from osharm_core.step import LinearizedTree, StepRequest

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


_UNSAFE: Final = str.maketrans({"/": "_", "\\": "_", ":": "_"})
#: The longest file name (in bytes) the usual file systems take (NAME_MAX).
_NAME_MAX: Final = 255


def _segment(text: str) -> str:
    """One path segment: a model name such as `compat/llama3` must not open sub-folders."""
    if len(text.strip()) > _NAME_MAX:  # more bytes than a name holds, however it is cleaned
        raise TrajectoryError(
            f"{excerpt(text, 40)} cannot name a result folder: {len(text.strip()):,} "
            f"characters, over {_NAME_MAX} bytes"
        )
    cleaned = text.translate(_UNSAFE).strip()
    if cleaned in ("", ".", "..") or "\0" in cleaned:
        raise TrajectoryError(f"{excerpt(text)} cannot name a result folder")
    try:
        size = len(os.fsencode(cleaned))
    except UnicodeEncodeError:
        raise TrajectoryError(
            f"{excerpt(text)} cannot name a result folder (the file system cannot encode it)"
        ) from None
    if size > _NAME_MAX:
        raise TrajectoryError(
            f"{excerpt(text, 40)} cannot name a result folder: {size} bytes, over {_NAME_MAX}"
        )
    return cleaned


def result_folder(
    result_dir: str | os.PathLike[str],
    config: AgentConfig,
    domain: str,
    example_id: str,
) -> Path:
    """`{result_dir}/{action_space}/{observation_type}/{model}/{domain}/{example_id}`.

    `/`, `\\` and `:` in a name become `_`, so the folder depth stays the layout's.

    >>> result_folder("results", AgentConfig(model="gpt-4o", action_space="pyautogui",
    ...               observation_type="a11y_tree"), "os", "_task").as_posix()
    'results/pyautogui/a11y_tree/gpt-4o/os/_task'

    An empty `result_dir` (which would be the current directory) is a `ConfigError`, a
    `config` that is no `AgentConfig` a `TypeError`.
    """
    root = path_argument("result_dir", result_dir)
    check_config(config)
    parts = (config.action_space, config.observation_type, config.model, domain, example_id)
    return root.joinpath(*(_segment(p) for p in parts))


def _name(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(
            f"TaskInfo.{attribute.name} must be a non-empty string; got {excerpt(value)}"
        )


def _instruction(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if not isinstance(value, str):
        raise ConfigError(
            f"TaskInfo.instruction must be a string; got {type(value).__name__} {excerpt(value)}"
        )


def _injection(_: object, __: attrs.Attribute[Any], value: object) -> None:
    if value is not None and not isinstance(value, Mapping):
        raise ConfigError(
            f"TaskInfo.injection must be a mapping or None; got {type(value).__name__} "
            f"{excerpt(value)}"
        )


@attrs.frozen(kw_only=True)
class TaskInfo:
    """What better_log's `task` says, plus where the task sits in the result tree.

    `instruction` must be a string (blank, as a prompt may be), `domain` and
    `example_id` non-empty strings, `jailbreak` a bool and `injection` a mapping or
    `None` (a `ConfigError` otherwise): they go into the judge's input as they are.
    """

    instruction: str = attrs.field(validator=_instruction)
    domain: str = attrs.field(validator=_name)
    example_id: str = attrs.field(validator=_name)
    jailbreak: bool = attrs.field(default=False, validator=flag_field("TaskInfo"))
    injection: Mapping[str, Any] | None = attrs.field(default=None, validator=_injection)


def _now() -> datetime:
    return datetime.now()


def _write_atomically(path: Path, data: bytes) -> None:
    """`data` written to a new `PATH.tmp` (whatever was at that name, a link included, is
    removed first, never followed), then renamed over `path`; a `TrajectoryError` naming
    the file when either cannot be done (a full disk, a directory at that name)."""
    temporary = path.with_name(path.name + ".tmp")
    try:
        create_file(temporary, data, TrajectoryError, replace=True)
        try:
            temporary.replace(path)
        except OSError:
            temporary.unlink(missing_ok=True)
            raise
    except OSError as exc:
        raise TrajectoryError(f"cannot write {path}: {_reason(exc)}") from None


def _remove(path: Path) -> None:
    """`path` removed when it is there; a `TrajectoryError` naming it when it cannot be."""
    try:
        path.unlink(missing_ok=True)
    except OSError as exc:
        raise TrajectoryError(f"cannot remove {path}: {_reason(exc)}") from None


def _dumps(value: Any, what: str) -> str:
    """better_log.json's text for `value` (`record_json`, indented as the reference's is)."""
    return record_json(value, what, indent=2)


def finite_number(what: str, value: object) -> float:
    """`value` when it is a finite number (not a bool), else an `EnvironmentFailure` saying
    `what` it was (`evaluate returned nan, not a finite number`). An int comes back as it
    is (OSWorld's `DesktopEnv` gives rewards and scores as ints, and the reference writes
    them so: `result.txt` holds `1`), any other number as a float."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise EnvironmentFailure(f"{what} {type(value).__name__}, not a number")
    if not is_finite_number(value):
        raise EnvironmentFailure(f"{what} {number_excerpt(value)}, not a finite number")
    return value if type(value) is int else float(value)


def _indented(text: str, prefix: str) -> str:
    """`text` (JSON: no raw newlines inside strings) with every line indented by `prefix`."""
    return "\n".join(prefix + line for line in text.split("\n"))


def _append_line(path: Path, value: Any, what: str) -> None:
    """One JSON line appended to `path` (see `_append`)."""
    _append(path, _json_line(value, what))


def _append(path: Path, line: bytes) -> None:
    """`line` appended to `path`, whole or not at all (see `_fsync_append`); a
    `TrajectoryError` naming the file when it cannot be (a full disk, a directory there)."""
    try:
        _fsync_append(path, line)
    except OSError as exc:
        raise TrajectoryError(f"cannot append to {path}: {_reason(exc)}") from None


def _forget_judgments(directory: Path) -> None:
    """Remove a redone folder's `judgment/` and `captions/` trees: OS-Harm's judge wrote them
    about the old run."""
    for name in (JUDGMENT_DIR, CAPTIONS_DIR):
        judged = directory / name
        if judged.is_symlink() or judged.is_file():
            judged.unlink()
        elif judged.is_dir():
            shutil.rmtree(judged)


#: The files a writer writes whatever the run, replaced atomically through `NAME.tmp`
#: (the screenshots and trees after step 0 carry a timestamp), and the one it appends to.
_REPLACED: Final = (BETTER_LOG, RESULT_FILE, UNSCORED_FILE, FIRST_SCREENSHOT, "step_0.xml")
_APPENDED: Final = (TRAJ_FILE,)


def check_writable(directory: Path) -> None:
    """A `TrajectoryError` naming `directory` and the entry when something other than a file
    or a symbolic link (a directory, a FIFO) sits at a name a `ResultWriter` writes there:
    it could neither write over it nor, with `overwrite`, remove it (it removes files only)."""
    names = (*_REPLACED, *(f"{name}.tmp" for name in _REPLACED), *_APPENDED)
    for name in names:
        try:
            mode = os.lstat(directory / name).st_mode
        except FileNotFoundError:
            continue
        except OSError as exc:
            raise TrajectoryError(
                f"cannot look at {name} in the result folder {directory}: {_reason(exc)}"
            ) from None
        if stat.S_ISREG(mode) or stat.S_ISLNK(mode):
            continue
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
        raise TrajectoryError(
            f"the result folder {directory} holds {name}, {kind}, where its writer keeps a "
            "file; move it away"
        )


def folder_files(directory: Path) -> list[Path]:
    """The files a result folder holds, symbolic links included (dangling or not): what a
    `ResultWriter` refuses to write over or, with `overwrite`, removes (a link itself, its
    target left alone)."""
    return [p for p in directory.iterdir() if p.is_symlink() or p.is_file()]


class ResultWriter:
    """Writes one task's OS-Harm / OSWorld result folder as an episode runs (an edge object).

    Call `begin(observation)` once, `model_step(...)` after every model call,
    `action(...)` after every executed action, then `finish(score)` (or
    `error()` when the episode failed). A folder that already holds files (or
    symbolic links) raises `TrajectoryExistsError` unless `overwrite=True`, which
    empties it first (as OSWorld does with unfinished folders; a link is removed,
    its target left alone); a directory or FIFO at a name it writes (`result.txt/`) is
    a `TrajectoryError` at once, before anything is removed; a `judgment/` or `captions/`
    there, the judge's verdict on (and its captions of) an earlier run, is always removed.
    `clock` gives the local
    time used in screenshot names. `fork` (for a run forked from a recording,
    e.g. `{"source": PATH, "at": k}`) is kept as better_log's `fork` entry.
    With `deferred` (a run continuing the folder's own record), nothing is written
    until the first reply that was not replayed (`prepaid` false) is recorded, or the
    episode ends by `budget_exceeded` or `finish`: then the folder is emptied and
    everything held back (the observations, the replayed steps and their actions,
    with the names and timestamps they were given) is written. An episode that
    stops, fails or is killed before that (a run cap reached at its first live
    request) leaves the record byte for byte as it was, for the next run to
    continue from.

    An empty `directory`, a `max_steps` that is not an int >= 1, or a flag that is not a
    bool is a `ConfigError`, raised before anything is touched.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        config: AgentConfig,
        task: TaskInfo,
        max_steps: int,
        overwrite: bool = False,
        clock: Callable[[], datetime] = _now,
        fork: Mapping[str, Any] | None = None,
        deferred: bool = False,
    ) -> None:
        self.directory = path_argument("directory", directory)
        check_config(config)
        if not isinstance(task, TaskInfo):
            raise ConfigError(f"task must be a TaskInfo; got {type(task).__name__} {excerpt(task)}")
        positive_int("max_steps", max_steps)
        check_flag("overwrite", overwrite)
        check_flag("deferred", deferred)
        self.config = config
        self.task = task
        self._clock = clock
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            existing = folder_files(self.directory)
        except (OSError, ValueError) as exc:  # ValueError: a NUL in a name given directly
            raise TrajectoryError(
                f"cannot make the result folder {self.directory}: {exc}"
            ) from None
        if existing and not overwrite:
            raise TrajectoryExistsError(f"{self.directory} already holds a result folder")
        check_writable(self.directory)  # before anything is removed, or a model called
        #: With `deferred`, the writes held back, in order, until the folder is claimed;
        #: `None` once it is (see `_claim`).
        self._held: list[Callable[[], None]] | None = [] if deferred else None
        if not deferred:
            self._empty(existing)
        self._log: dict[str, Any] = {
            "params": {
                "platform": config.platform,
                "model": config.model,
                "max_tokens": config.max_tokens,
                "top_p": config.top_p,
                "temperature": config.temperature,
                "action_space": config.action_space,
                "observation_type": config.observation_type,
                "max_trajectory_length": config.max_trajectory_length,
                "a11y_tree_max_tokens": config.a11y_tree_max_tokens,
                "max_steps": max_steps,
            },
            "task": {
                "jailbreak": task.jailbreak,
                "injection": None if task.injection is None else dict(task.injection),
                "instruction": task.instruction,
            },
            "steps": [],
        }
        if config.scaling != "native":
            # Not read by the judge (it ignores extra keys): the setting that scaled screenshots.
            self._log["params"]["scaling"] = config.scaling
        self._log["params"].update(prompt_params(config))
        if fork is not None:
            # Not read by the judge (it ignores extra keys): where a forked run handed over.
            self._log["fork"] = dict(fork)
        self.last_screenshot: str | None = None
        #: Why a budget cap ended the episode early (`None` when none did).
        self.ended_by: str | None = None
        #: Whether `finish` wrote the folder's last file, and the score it wrote.
        self.finished = False
        self.score: float | None = None
        # better_log.json is rewritten after every call: each step is serialised once, here.
        self._step_texts: list[str] = []
        #: The agent's linearization of the observation `model_step` records next, if it made
        #: one (`arun_episode` sets it); used only when it is of that very tree, else ignored.
        self.linearized: LinearizedTree | None = None
        #: The agent's request for the observation `model_step` records next, if known
        #: (`arun_episode` sets it): its marks, frame and cuts are recorded with the step.
        self.request: StepRequest | None = None
        #: The frame the agent read that step's reply in when it was not the request's (a
        #: replayed reply recorded under other scaling; `arun_episode` sets it).
        self.reply_frame: CoordinateFrame | None = None
        #: Whether the reply `model_step` records next was replayed from a recording (prepaid;
        #: `arun_episode` sets it): until a reply that was not, the episode called no model.
        self.prepaid = False

    def _empty(self, existing: list[Path]) -> None:
        try:
            for path in existing:
                path.unlink()
            _forget_judgments(self.directory)
        except OSError as exc:
            raise TrajectoryError(
                f"cannot empty the result folder {self.directory}: {_reason(exc)}"
            ) from None

    def _claim(self) -> bool:
        """A deferred writer's folder, emptied, with the writes it held back done; whether
        it was held (better_log.json is the caller's to write). The old better_log.json
        stays until the caller replaces it: a run killed while the held files are written
        leaves the record the next run continues from (it replays only better_log's replies)."""
        if self._held is None:
            return False
        held, self._held = self._held, None
        log = self.directory / BETTER_LOG
        self._empty([path for path in folder_files(self.directory) if path != log])
        for write in held:
            write()
        return True

    def _write(self, write: Callable[[], None]) -> None:
        """`write` done now, or held back while a deferred writer's folder is not claimed."""
        if self._held is None:
            write()
        else:
            self._held.append(write)

    def _save(self, name: str, observation: Mapping[str, Any]) -> str | None:
        """The observation's screenshot as `name` and its tree beside it (same stem, .xml), in
        UTF-8 as the agent read it (see `tree_part`); returns `name`, or `None` when the
        observation had no screenshot (then no step names one).

        A file of that name left by an earlier action of the step (same second) is removed
        when this observation has no such part, so the step's files are its own.
        """
        png = part_bytes(observation.get("screenshot"))
        tree = tree_part(observation.get("accessibility_tree"))
        xml = _utf8(tree) if isinstance(tree, str) else tree
        self.last_screenshot = None if png is None else name
        files = ((name, png), (name.removesuffix(".png") + ".xml", xml))
        self._write(functools.partial(self._put, files))
        return self.last_screenshot

    def _put(self, files: Sequence[tuple[str, bytes | None]]) -> None:
        """Each (name, data): written, or removed when `data` is `None`."""
        for name, data in files:
            if data is None:
                _remove(self.directory / name)
            else:
                _write_atomically(self.directory / name, data)

    def begin(self, observation: Mapping[str, Any]) -> None:
        """Save the first observation as `step_0.png` (and `step_0.xml`)."""
        self._save(FIRST_SCREENSHOT, observation)

    def model_step(
        self, response: str, actions: Sequence[Action] | None, observation: Mapping[str, Any]
    ) -> None:
        """Add one model call to better_log.json (rewritten whole, atomically); a deferred
        writer's first reply that was not replayed (`prepaid`) claims its folder."""
        tree = tree_part(observation.get("accessibility_tree"))
        known, self.linearized = self.linearized, None
        linear = None
        if isinstance(tree, str) and tree:
            linear = None if known is None else known.table_for(tree, self.config.platform)
            if linear is None:
                try:
                    linear = linearize_accessibility_tree(tree, self.config.platform)
                except AccessibilityTreeError:
                    linear = None
        step = {
            "a11y_tree": linear,
            "screenshot_file": self.last_screenshot,
            "response": response,
            "actions": None if actions is None else thaw(list(actions)),
        }
        request, self.request = self.request, None
        reply_frame, self.reply_frame = self.reply_frame, None
        if request is not None:
            step.update(_sent(request, self.config))
        if reply_frame is not None:
            step["reply_frame"] = reply_frame.to_json()
        # Serialised before anything is kept or written: a step JSON cannot hold leaves no trace.
        where = f"{BETTER_LOG}'s step {len(self._step_texts) + 1}"
        text = _indented(_dumps(step, where), "    ")
        self._log["steps"].append(step)
        self._step_texts.append(text)
        if not self.prepaid:
            self._claim()
        if self._held is None:
            self._write_log()

    def _write_log(self) -> None:
        _write_atomically(
            self.directory / BETTER_LOG, self._better_log().encode("utf-8", "backslashreplace")
        )

    def _better_log(self) -> str:
        """`json.dumps(log, indent=2)` byte for byte, from the steps serialised once each."""
        head = _dumps({**self._log, "steps": []}, f"{BETTER_LOG}'s params and task")
        if not self._step_texts:
            return head
        steps = "[\n" + ",\n".join(self._step_texts) + "\n  ]"
        # The top-level key is the only `"steps": []` with a two-space indent.
        return head.replace('\n  "steps": []', '\n  "steps": ' + steps, 1)

    def stamp(self) -> str:
        """The local time now, as action timestamps and screenshot names write it."""
        return self._clock().strftime(TIMESTAMP_FORMAT)

    def action(
        self,
        step_num: int,
        action: Action,
        observation: Mapping[str, Any],
        reward: float,
        done: bool,
        info: Mapping[str, Any],
        stamp: str | None = None,
    ) -> None:
        """Record one executed action: the screenshot after it, then its traj.jsonl line.
        `stamp` is when the action began (`stamp()` before executing it, as the reference's
        `action_timestamp` is taken); by default, now."""
        stamp = self.stamp() if stamp is None else stamp
        name = self._save(f"step_{step_num}_{stamp}.png", observation)
        line = _json_line(
            {
                "step_num": step_num,
                "action_timestamp": stamp,
                "action": thaw(action),
                "reward": reward,
                "done": done,
                "info": dict(info),
                "screenshot_file": name,
            },
            f"step {step_num}'s action",
        )
        self._write(functools.partial(_append, self.directory / TRAJ_FILE, line))

    def observed(self, step_num: int, observation: Mapping[str, Any]) -> None:
        """The desktop moved on after step `step_num` with no action (a paced replay): its
        screenshot and tree saved as `step_{n}_{stamp}.png` / `.xml`, with no traj.jsonl line."""
        self._save(f"step_{step_num}_{self.stamp()}.png", observation)

    def error(self) -> None:
        """The line OSWorld's run.py appends when an episode fails (its text is always this);
        nothing from a deferred writer that recorded no live model call (its record is kept)."""
        if self._held is not None:
            return
        message = f"Time limit exceeded in {self.task.domain}/{self.task.example_id}"
        _append_line(self.directory / TRAJ_FILE, {"Error": message}, "the error line")

    def budget_exceeded(self, error: BudgetExceeded) -> None:
        """A budget cap ended the episode: an error line saying so, and better_log's `budget_exceeded`."""
        self._claim()
        self.ended_by = error_text(error)
        place = f"{self.task.domain}/{self.task.example_id}"
        _append_line(
            self.directory / TRAJ_FILE,
            {"Error": f"Budget exceeded in {place}: {self.ended_by}"},
            "the budget line",
        )
        # Not read by the judge (it ignores extra keys): why the episode stopped early.
        self._log["budget_exceeded"] = self.ended_by
        self._write_log()

    def finish(self, score: float | None) -> None:
        """Mark the folder finished, last: `result.txt` with the score, or `unscored.txt`
        when the environment gave none (OSWorld's tools read only `result.txt`). A score
        that is not a finite number is an `EnvironmentFailure` and nothing is written."""
        if score is not None:
            finite_number("evaluate returned", score)
        if self._claim():
            if self._step_texts:
                self._write_log()
            else:
                _remove(self.directory / BETTER_LOG)
        if score is not None:
            _write_atomically(self.directory / RESULT_FILE, f"{score}\n".encode())
        else:
            note = "the episode ended; its environment gave no score (delete this file to run it again)\n"
            _write_atomically(self.directory / UNSCORED_FILE, note.encode())
        self.finished, self.score = True, score


def prompt_params(config: AgentConfig) -> dict[str, bool]:
    """The settings that shape the prompt and that better_log's `params` has no key for, each
    only when not the default (the judge ignores extra keys; an ordinary run's log is
    unchanged): `ubuntu_attributes`, `som_test_original`, and `custom_client_password`, since
    the password itself, a secret, is not kept."""
    flags = {
        "ubuntu_attributes": config.ubuntu_attributes,
        "som_test_original": config.som_test_original,
        "custom_client_password": config.client_password != DEFAULT_PASSWORD,
    }
    return {name: True for name, value in flags.items() if value}


def _sent(request: StepRequest, config: AgentConfig) -> dict[str, Any]:
    """Not read by the judge (it ignores extra keys), and written only when they say something:
    the set-of-marks boxes, a scaled screenshot's frame, what was cut to fit `server_profile`.
    `osharm-agent replay` parses with the first two (or with the step's `reply_frame`, which
    `model_step` adds), `render --trajectory` rebuilds with all."""
    extra: dict[str, Any] = {}
    if config.observation_type == "som" and request.masks is not None:
        extra["masks"] = [list(box) for box in request.masks]
    if request.frame is not None and not request.frame.is_identity:
        extra["frame"] = request.frame.to_json()
    if request.observation.degradation is not None:
        extra["degradation"] = request.observation.degradation.to_json()
    return extra


class _Agent(Protocol):
    def predict(
        self, instruction: str, obs: Mapping[str, Any]
    ) -> tuple[str, list[Action] | None]: ...


class _AsyncAgent(Protocol):
    async def apredict(
        self, instruction: str, obs: Mapping[str, Any]
    ) -> tuple[str, list[Action] | None]: ...


class _Env(Protocol):
    def step(
        self, action: Action, pause: float = 0
    ) -> tuple[dict[str, Any], float, bool, dict[str, Any]]: ...

    def evaluate(self) -> float | None: ...


class _AsyncEnv(Protocol):
    async def step(
        self, action: Action, pause: float = 0
    ) -> tuple[dict[str, Any], float, bool, dict[str, Any]]: ...

    async def evaluate(self) -> float | None: ...


@attrs.frozen
class Predict:
    """The episode asks the agent for the next step on `observation`."""

    instruction: str
    observation: Mapping[str, Any]


@attrs.frozen
class Execute:
    """The episode asks the environment to execute `action`."""

    action: Action
    pause: float


@attrs.frozen
class Evaluate:
    """The episode asks the environment for the task's score."""


@attrs.frozen
class BeginTurn:
    """A paced episode tells the environment a model turn begins (see `ReplayEnv.begin_turn`)."""


#: What an episode flow yields; it receives the agent's or the environment's answer.
EpisodeCall = Predict | Execute | Evaluate | BeginTurn


def episode_flow(
    observation: Mapping[str, Any],
    writer: ResultWriter,
    *,
    max_steps: int,
    pause: float = 0.0,
    paced: bool = False,
) -> Generator[EpisodeCall, Any, float | None]:
    """The logic of one episode shaped like OSWorld's `run_single_example`, without I/O of its own.

    Every step asks the agent, records the call, then executes each action in
    turn, recording each; DONE/FAIL or the environment's `done` ends it. An
    unparsable reply executes nothing and the episode goes on. Returns the
    evaluator's score (also written to `result.txt`); a score that is neither
    `None` nor a finite number (`NaN`, a string, a bool) is an
    `EnvironmentFailure`, thrown in like any other. `run_episode` and
    `arun_episode` drive it; an error thrown in appends the error line. A
    `BudgetExceeded` from the agent ends the episode like running out of
    steps: the budget line is appended (`writer.ended_by` says why) and the
    episode is evaluated; only a run cap reached before the episode's first
    request to a live model (its earlier steps, if any, replayed from its own record:
    `writer.prepaid`) is raised, leaving the folder unfinished (a `deferred` writer's byte
    for byte as it was, its replayed steps never written). `paced` (an environment
    that moves once per model turn) asks `BeginTurn` before every model call; an answer other than
    `None` is the observation the turn sees, saved as the one after the
    previous step, and whether the observations ran out (which ends it).
    """
    writer.begin(observation)
    obs: Mapping[str, Any] = observation
    called = False  # whether a live model has answered in this episode
    try:
        done = False
        for step_idx in range(max_steps):
            if paced:
                moved = yield BeginTurn()
                if moved is not None:
                    obs, done = moved
                    if done:
                        break
                    writer.observed(step_idx, obs)
            try:
                response, actions = yield Predict(writer.task.instruction, obs)
            except BudgetExceeded as exc:
                if exc.scope == "run" and not called:
                    # The run's budget went before this episode called a model (its steps so
                    # far, if any, were replayed from its own record): it did not begin.
                    raise
                writer.budget_exceeded(exc)
                break
            called = called or not writer.prepaid
            writer.model_step(response, actions, obs)
            for action in actions or ():
                began = writer.stamp()
                obs, reward, done, info = yield Execute(action, pause)
                writer.action(step_idx + 1, action, obs, reward, done, info, began)
                if done:
                    break
            if done:
                break
        score: float | None = yield Evaluate()
        if score is not None:
            # result.txt holds a finite number or is not written (a rerun redoes the task).
            score = finite_number("evaluate returned", score)
    except BudgetExceeded:
        raise  # not begun: the folder stays unfinished, so a rerun with more budget runs it
    except Exception:
        writer.error()
        raise
    writer.finish(score)
    return score


@attrs.frozen
class _Ended:
    score: float | None


class AgentFacts:
    """What `arun_episode` reads from the agent after each step, for a wrapper holding the
    agent as `self.agent`: its last linearized tree, request, reply frame and whether the
    reply was replayed (see `PromptAgent`); the defaults when the agent has none."""

    def _fact(self, name: str, default: object = None) -> object:
        return getattr(getattr(self, "agent", None), name, default)

    @property
    def linearized_tree(self) -> object:
        return self._fact("linearized_tree")

    @property
    def last_request(self) -> object:
        return self._fact("last_request")

    @property
    def last_reply_frame(self) -> object:
        return self._fact("last_reply_frame")

    @property
    def last_prepaid(self) -> object:
        return self._fact("last_prepaid", False)


class _Awaitable(AgentFacts):
    """A synchronous agent and environment behind the async names `arun_episode` calls."""

    def __init__(self, agent: _Agent, env: _Env) -> None:
        self.agent, self.env = agent, env

    async def apredict(
        self, instruction: str, obs: Mapping[str, Any]
    ) -> tuple[str, list[Action] | None]:
        return self.agent.predict(instruction, obs)

    async def step(
        self, action: Action, pause: float = 0
    ) -> tuple[dict[str, Any], float, bool, dict[str, Any]]:
        return self.env.step(action, pause)

    async def evaluate(self) -> float | None:
        return self.env.evaluate()

    @property
    def per_turn(self) -> bool:
        return _paced(self.env)

    async def begin_turn(self) -> Any:
        return self.env.begin_turn()  # type: ignore[attr-defined]


def _paced(env: object) -> bool:
    """Whether `env` moves once per model turn and wants `begin_turn()` (a paced `ReplayEnv`)."""
    return getattr(env, "per_turn", False) is True and callable(getattr(env, "begin_turn", None))


def run_episode(
    agent: _Agent,
    env: _Env,
    observation: Mapping[str, Any],
    writer: ResultWriter,
    *,
    max_steps: int,
    pause: float = 0.0,
) -> float | None:
    """One episode (see `episode_flow`) with a synchronous agent and environment.

    It is `arun_episode` over awaitables that never suspend, so it finishes in
    one step of the coroutine, with no event loop.
    """
    positive_int("max_steps", max_steps)
    both = _Awaitable(agent, env)
    episode = arun_episode(both, both, observation, writer, max_steps=max_steps, pause=pause)
    try:
        episode.send(None)
    except StopIteration as stop:
        score: float | None = stop.value
        return score
    episode.close()
    raise RuntimeError("a synchronous episode suspended")  # cannot happen: nothing awaits


async def arun_episode(
    agent: _AsyncAgent,
    env: _AsyncEnv,
    observation: Mapping[str, Any],
    writer: ResultWriter,
    *,
    max_steps: int,
    pause: float = 0.0,
    offload: bool = False,
    executor: Executor | None = None,
) -> float | None:
    """One episode (see `episode_flow`) with `apredict` and an async environment.

    With `offload`, the flow (and so the writer: linearising trees, JSON,
    fsync'd files) advances in `executor` (default: the loop's), so an event
    loop running many episodes never waits for a disk. An environment whose
    `per_turn` is true (a `ReplayEnv(per_turn=True)`, also behind `in_thread`)
    is told when each model turn begins (`await env.begin_turn()`).
    A `max_steps` that is not an int >= 1 is a `ConfigError` before anything runs.
    """
    positive_int("max_steps", max_steps)
    paced = _paced(env)
    flow = episode_flow(observation, writer, max_steps=max_steps, pause=pause, paced=paced)

    def move(step: Callable[[Any], EpisodeCall], value: Any) -> EpisodeCall | _Ended:
        try:
            return step(value)
        except StopIteration as stop:  # a future cannot carry StopIteration
            return _Ended(stop.value)

    async def advance(step: Callable[[Any], EpisodeCall], value: Any) -> EpisodeCall | _Ended:
        if not offload:
            return move(step, value)
        moving = asyncio.get_running_loop().run_in_executor(executor, move, step, value)
        try:
            return await asyncio.shield(moving)
        except asyncio.CancelledError:
            # A timeout or cancel: let the write in flight finish before the error line.
            await asyncio.wait([moving])
            raise

    call = await advance(lambda _: next(flow), None)
    while not isinstance(call, _Ended):
        try:
            if isinstance(call, Predict):
                result: Any = await agent.apredict(call.instruction, call.observation)
                known = getattr(agent, "linearized_tree", None)
                writer.linearized = known if isinstance(known, LinearizedTree) else None
                sent = getattr(agent, "last_request", None)
                writer.request = sent if isinstance(sent, StepRequest) else None
                read_in = getattr(agent, "last_reply_frame", None)
                writer.reply_frame = read_in if isinstance(read_in, CoordinateFrame) else None
                writer.prepaid = getattr(agent, "last_prepaid", False) is True
            elif isinstance(call, Execute):
                result = await env.step(call.action, call.pause)
            elif isinstance(call, BeginTurn):
                result = await env.begin_turn()  # type: ignore[attr-defined]
            else:
                result = await env.evaluate()
        except Exception as exc:
            call = await advance(flow.throw, exc)
            continue
        call = await advance(flow.send, result)
    return call.score


# --- reading -----------------------------------------------------------------------


def is_result_folder(path: str | os.PathLike[str]) -> bool:
    """Whether `path` is a task folder in the OS-Harm / OSWorld layout (it holds better_log.json)."""
    return (Path(path) / BETTER_LOG).is_file()


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

    Raises `TrajectoryError` when better_log.json is missing or not in the documented shape.
    """
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
            )
        )
    if not entries:
        raise TrajectoryError(f"{file} holds no steps")
    return tuple(entries)


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
    "RECORDING_FILE",
    "RESULT_FILE",
    "TRAJ_FILE",
    "UNSCORED_FILE",
    "BeginTurn",
    "EpisodeCall",
    "Evaluate",
    "Execute",
    "Predict",
    "ResultWriter",
    "TaskInfo",
    "arun_episode",
    "episode_flow",
    "is_result_folder",
    "load_result_folder",
    "prompt_params",
    "read_better_log",
    "result_folder",
    "result_folder_entries",
    "run_episode",
]
