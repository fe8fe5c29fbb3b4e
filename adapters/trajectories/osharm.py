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

import functools
import os
import shutil
import stat
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import attrs

from adapters._checks import flag_field, path_argument, positive_int
from adapters._files import _reason, append_fsynced, create_file, json_line, record_json, utf8
from adapters.errors import (
    AccessibilityTreeError,
    EnvironmentFailure,
    TrajectoryError,
    TrajectoryExistsError,
)
from adapters.record import ActionRecord, EpisodeEnd, StepRecord, part_bytes, tree_part
from adapters.trajectories.result_folders import (  # the layout's names, and its reader
    BETTER_LOG,
    CAPTIONS_DIR,
    FIRST_SCREENSHOT,
    JUDGMENT_DIR,
    LOCK_FILE,
    RECORDING_FILE,
    RESULT_FILE,
    TIMESTAMP_FORMAT,
    TRAJ_FILE,
    UNSCORED_FILE,
    is_result_folder,
    load_result_folder,
    read_better_log,
    result_folder_entries,
)
from osharm_core import (
    AgentConfig,
    ConfigError,
    linearize_accessibility_tree,
    thaw,
)
from osharm_core.config import check_config
from osharm_core.errors import check_flag, excerpt, is_finite_number, number_excerpt
from osharm_core.prompts import DEFAULT_PASSWORD
from osharm_core.step import StepRequest

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
    _append(path, json_line(value, what))


def _append(path: Path, line: bytes) -> None:
    """`line` appended to `path`, whole or not at all (see `append_fsynced`); a
    `TrajectoryError` naming the file when it cannot be (a full disk, a directory there)."""
    try:
        append_fsynced(path, line)
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
    return [
        p for p in directory.iterdir() if (p.is_symlink() or p.is_file()) and p.name != LOCK_FILE
    ]


class ResultWriter:
    """Writes one task's OS-Harm / OSWorld result folder as an episode runs: a `Recorder`.

    The episode loop calls `begin(observation)` once, `step(record)` after every model
    call, `action(record)` after every executed action, then `finish(end)`. A folder that already holds files (or
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
    episode ends (`finish`): then the folder is emptied and
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
        #: The local time: the default clock of an episode `run_episode` records here.
        self.clock = clock
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
        #: Whether `finish` marked the folder finished, and the score it wrote.
        self.finished = False
        self.score: float | None = None
        # better_log.json is rewritten after every call: each step is serialised once, here.
        self._step_texts: list[str] = []

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
        xml = utf8(tree) if isinstance(tree, str) else tree
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

    def step(self, record: StepRecord) -> None:
        """Add one model call to better_log.json (rewritten whole, atomically), with the table
        of the tree it saw (the agent's own linearization when it made one); a deferred
        writer's first reply that was not replayed (`prepaid`) claims its folder."""
        tree = record.accessibility_tree
        linear = None
        if tree:
            known = record.linearized
            linear = None if known is None else known.table_for(tree, self.config.platform)
            if linear is None:
                try:
                    linear = linearize_accessibility_tree(tree, self.config.platform)
                except AccessibilityTreeError:
                    linear = None
        step: dict[str, Any] = {
            "a11y_tree": linear,
            "screenshot_file": self.last_screenshot,
            "response": record.text,
            "actions": record.plain_actions,
        }
        if record.request is not None:
            step.update(_sent(record.request, self.config))
        if record.reply_frame is not None:
            step["reply_frame"] = record.reply_frame.to_json()
        if record.safety_events:  # not read by the judge; only when there are any
            step["safety_events"] = [event.to_json() for event in record.safety_events]
        # Serialised before anything is kept or written: a step JSON cannot hold leaves no trace.
        where = f"{BETTER_LOG}'s step {len(self._step_texts) + 1}"
        text = _indented(_dumps(step, where), "    ")
        self._log["steps"].append(step)
        self._step_texts.append(text)
        if not record.prepaid:
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

    def action(self, record: ActionRecord) -> None:
        """Record one executed action: the screenshot after it, then its traj.jsonl line (an
        action of `None`, the desktop moving on by itself, saves only the screenshot)."""
        stamp = record.started.strftime(TIMESTAMP_FORMAT)
        name = self._save(f"step_{record.step}_{stamp}.png", record.observation)
        if record.action is None:
            return
        line = json_line(
            {
                "step_num": record.step,
                "action_timestamp": stamp,
                "action": thaw(record.action),
                "reward": record.reward,
                "done": record.done,
                "info": dict(record.info),
                "screenshot_file": name,
            },
            f"step {record.step}'s action",
        )
        self._write(functools.partial(_append, self.directory / TRAJ_FILE, line))

    def finish(self, end: EpisodeEnd) -> None:
        """The episode ended: a budget cap's line (and better_log's `budget_exceeded`) when one
        ended it early; then OSWorld's error line when it failed, else the folder marked
        finished, last: `result.txt` with the score, or `unscored.txt` when nothing scored it
        (OSWorld's tools read only `result.txt`)."""
        if end.budget_exceeded is not None:
            self._budget_line(end.budget_exceeded)
        if end.failed is not None:
            self._error_line()
            return
        if self._claim():
            if self._step_texts:
                self._write_log()
            else:
                _remove(self.directory / BETTER_LOG)
        if end.score is not None:
            _write_atomically(self.directory / RESULT_FILE, f"{end.score}\n".encode())
        else:
            note = "the episode ended; its environment gave no score (delete this file to run it again)\n"
            _write_atomically(self.directory / UNSCORED_FILE, note.encode())
        self.finished, self.score = True, end.score

    def _error_line(self) -> None:
        """The line OSWorld's run.py appends when an episode fails (its text is always this);
        nothing from a deferred writer that recorded no live model call (its record is kept)."""
        if self._held is not None:
            return
        message = f"Time limit exceeded in {self.task.domain}/{self.task.example_id}"
        _append_line(self.directory / TRAJ_FILE, {"Error": message}, "the error line")

    def _budget_line(self, reason: str) -> None:
        """A budget cap ended the episode: an error line saying so, and better_log's `budget_exceeded`."""
        self._claim()
        self.ended_by = reason
        place = f"{self.task.domain}/{self.task.example_id}"
        _append_line(
            self.directory / TRAJ_FILE,
            {"Error": f"Budget exceeded in {place}: {reason}"},
            "the budget line",
        )
        # Not read by the judge (it ignores extra keys): why the episode stopped early.
        self._log["budget_exceeded"] = reason
        self._write_log()


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


__all__ = [
    "BETTER_LOG",
    "CAPTIONS_DIR",
    "FIRST_SCREENSHOT",
    "JUDGMENT_DIR",
    "RECORDING_FILE",
    "RESULT_FILE",
    "TIMESTAMP_FORMAT",
    "TRAJ_FILE",
    "UNSCORED_FILE",
    "ResultWriter",
    "TaskInfo",
    "check_writable",
    "finite_number",
    "folder_files",
    "is_result_folder",
    "load_result_folder",
    "prompt_params",
    "read_better_log",
    "result_folder",
    "result_folder_entries",
]
