"""Result trees on disk, as the judge reads and writes them.

A trajectory folder is any folder holding `better_log.json` (OS-Harm's own
discovery rule), found by walking a result tree without following links and
without entering `judgment/` or `captions/`. In it the judge reads the
instruction, each step's response, linearized tree and screenshot (through
`adapters.trajectories.result_folders`, which resolves the reference's
off-by-one screenshot names), and the last screenshot saved; it writes

* `judgment/{judge_model}/{judge_type}/{prompt_version}/judgment.json`: OS-Harm's
  four keys (`reasoning`, `success`, `safety`, `violation_step`), indented by two
  spaces as OS-Harm writes them, so its summarizers read ours;
* `judgment_error.json` beside it when the judge gave no verdict (ours: the
  failure's kind and message; never read as a verdict, and gone once a verdict is
  written);
* `captions/{captioner}/{stem}.last_screenshot_caption.json`, the final
  screenshot's caption (`caption`, `response`, as OS-Harm's forks cache it, and
  ours: `screenshot` and its `sha256`, so a caption is reused only for the same
  image).

A model name such as `compat/llama3` names one folder (`compat_llama3`), as the
result folders' own model segment does.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal

import attrs

from adapters._files import MAX_JSON_BYTES, create_file, read_regular, record_json
from adapters._strict_json import strict_loads
from adapters.errors import TrajectoryError, UsageError
from adapters.judge.prompts import (
    FINAL_STATE_TYPES,
    OBSERVING_TYPES,
    STEP_CAPTION_TYPES,
    JudgedStep,
    JudgeType,
    Trajectory,
)
from adapters.judge.verdict import JudgeFailure, Verdict, verdict_from_arguments
from adapters.trajectories.result_folders import (
    BETTER_LOG,
    CAPTIONS_DIR,
    FIRST_SCREENSHOT,
    JUDGMENT_DIR,
    read_better_log,
    result_folder_entries,
)
from osharm_core.errors import excerpt

JUDGMENT_FILE: Final = "judgment.json"
#: Ours: why the judge gave a folder no verdict (see the module doc).
FAILURE_FILE: Final = "judgment_error.json"
CAPTION_SUFFIX: Final = ".last_screenshot_caption.json"
#: The largest screenshot the judge reads (bytes).
MAX_SCREENSHOT_BYTES: Final = 32 * 1024 * 1024

#: What a task tests, from its metadata and its id (OS-Harm's id prefixes: `_x` misuse,
#: `__x` injection, `___x` misbehaviour); `other` for the rest (plain OSWorld tasks).
TaskKind = Literal["misuse", "injection", "misbehaviour", "other"]
#: The observation types whose parts the step-by-step judge shows.
ObservationType = Literal["screenshot", "a11y_tree", "screenshot_a11y_tree", "som"]

#: OS-Harm's task id prefixes, longest first.
_PREFIXES: Final[tuple[tuple[str, TaskKind], ...]] = (
    ("___", "misbehaviour"),
    ("__", "injection"),
    ("_", "misuse"),
)
_UNSAFE: Final = str.maketrans({"/": "_", "\\": "_", ":": "_"})
_SHOT: Final = re.compile(r"step_([0-9]{1,9})(?:_.+)?\.png", re.DOTALL)


def segment(name: str) -> str:
    """`name` as one path segment (`/`, `\\` and `:` made `_`).

    >>> segment("compat/llama3:8b")
    'compat_llama3_8b'
    """
    cleaned = name.translate(_UNSAFE).strip()
    if cleaned in ("", ".", "..") or "\0" in cleaned or len(cleaned) > 200:
        raise UsageError(f"{excerpt(name)} cannot name a judgment folder")
    return cleaned


@attrs.frozen
class JudgmentSpec:
    """Which judgments: `judge_model/judge_type/prompt_version`, the folders under `judgment/`.

    >>> JudgmentSpec.parse("compat/llama3/aer/osharm-core-1")
    JudgmentSpec(model='compat_llama3', judge_type='aer', version='osharm-core-1')
    """

    model: str = attrs.field(converter=segment)
    judge_type: str = attrs.field(converter=segment)
    version: str = attrs.field(converter=segment)

    @classmethod
    def parse(cls, text: str) -> JudgmentSpec:
        """A spec from its `MODEL/TYPE/VERSION` text (the model may hold `/` itself)."""
        parts = text.strip().rsplit("/", 2)
        if len(parts) != 3 or not all(p.strip() for p in parts):
            raise UsageError(
                f"{excerpt(text)} is not JUDGE_MODEL/JUDGE_TYPE/PROMPT_VERSION "
                "(e.g. gpt-4.1/aer/v3 for OS-Harm's own judge)"
            )
        return cls(*parts)

    def directory(self, folder: Path) -> Path:
        """Where these judgments sit in a trajectory `folder`."""
        return folder / JUDGMENT_DIR / self.model / self.judge_type / self.version

    def __str__(self) -> str:
        return f"{self.model}/{self.judge_type}/{self.version}"


@attrs.frozen
class FolderPlace:
    """A trajectory folder in a result tree: its path, its `key` (the path from the tree's
    root, which matches folders across trees), its domain (its parent's name) and task id."""

    folder: Path
    key: str
    domain: str
    example_id: str


def trajectory_folders(root: Path) -> list[FolderPlace]:
    """Every folder holding better_log.json under `root` (itself included), in path order."""
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory of result folders")
    found = []
    for path, dirs, files in os.walk(root):
        here = Path(path)
        if BETTER_LOG in files and (here / BETTER_LOG).is_file():
            key = here.relative_to(root).as_posix()
            found.append(FolderPlace(here, key, here.parent.name or "-", here.name))
            dirs.clear()  # a task's own folder holds no other task
        dirs[:] = sorted(d for d in dirs if d not in (JUDGMENT_DIR, CAPTIONS_DIR))
    return sorted(found, key=lambda place: place.key)


def task_kind(example_id: str, task: Mapping[str, Any]) -> TaskKind:
    """What a task tests: injected content in its metadata or folder name makes an injection
    task; else OS-Harm's id prefix decides; else a jailbreak run is misuse.

    >>> task_kind("_harassment_email", {}), task_kind("___send_api_keys", {})
    ('misuse', 'misbehaviour')
    >>> task_kind("0b17a146__inject__website__stop_task", {}), task_kind("0b17a146", {})
    ('injection', 'other')
    """
    if task.get("injection") or "__inject__" in example_id:
        return "injection"
    for prefix, kind in _PREFIXES:
        if example_id.startswith(prefix):
            return kind
    return "misuse" if task.get("jailbreak") is True else "other"


def _task(log: Mapping[str, Any]) -> Mapping[str, Any]:
    task = log.get("task")
    return task if isinstance(task, Mapping) else {}


def folder_kind(place: FolderPlace) -> TaskKind:
    """The kind of the task in `place` (by its id alone when better_log cannot be read)."""
    try:
        task = _task(read_better_log(place.folder))
    except (TrajectoryError, OSError):
        task = {}
    return task_kind(place.example_id, task)


@attrs.frozen
class LoadedFolder:
    """A trajectory folder read for the judge: the trajectory, its task's kind, its last
    screenshot (file stem and PNG bytes; `None` when it saved none), and, for the judge
    types that caption each step, each step's screenshot to caption (stem and bytes, `None`
    for a step that saw none; empty for the other types)."""

    trajectory: Trajectory
    kind: TaskKind
    final: tuple[str, bytes] | None
    pictures: tuple[tuple[str, bytes] | None, ...] = ()


def _shown(judge_type: JudgeType, observation: str) -> tuple[bool, bool]:
    """Whether the judge is shown each step's screenshot and each step's tree."""
    if judge_type in OBSERVING_TYPES:
        return observation != "a11y_tree", observation in ("a11y_tree", "screenshot_a11y_tree")
    return False, judge_type == "a11y_tree"


def _screenshot(folder: Path, name: str) -> bytes:
    return read_regular(
        folder / name, "screenshot", MAX_SCREENSHOT_BYTES, TrajectoryError, follow_links=False
    )


def load_folder(
    place: FolderPlace, judge_type: JudgeType, observation_type: ObservationType | None
) -> LoadedFolder:
    """What the judge reads of `place`: the steps (with the screenshots and trees the judge
    type shows; `observation_type` `None` shows what the run's agent saw) and the last
    screenshot. A folder that cannot be read is a `TrajectoryError`."""
    folder = place.folder
    log = read_better_log(folder)
    entries = result_folder_entries(folder, log)
    params = log.get("params")
    ran = params.get("observation_type") if isinstance(params, Mapping) else None
    shots, trees = _shown(judge_type, observation_type or str(ran or "screenshot_a11y_tree"))
    captioned = judge_type in STEP_CAPTION_TYPES
    steps, pictures = [], []
    for entry, step in zip(entries, log["steps"], strict=True):
        tree = step.get("a11y_tree") if trees else None
        wanted = entry.screenshot if shots or captioned else None
        picture = (wanted.removesuffix(".png"), _screenshot(folder, wanted)) if wanted else None
        png = None if picture is None else picture[1]
        steps.append(
            JudgedStep(
                response=entry.response,
                tree=tree if isinstance(tree, str) else None,
                screenshot=png if shots else None,
            )
        )
        if captioned:
            pictures.append(picture)
    task = _task(log)
    instruction = task.get("instruction")
    trajectory = Trajectory(instruction if isinstance(instruction, str) else "", tuple(steps))
    final = final_screenshot(folder) if judge_type in FINAL_STATE_TYPES else None
    kind = task_kind(place.example_id, task)
    return LoadedFolder(trajectory, kind, final, tuple(pictures))


def final_screenshot(folder: Path) -> tuple[str, bytes] | None:
    """The stem and bytes of the last screenshot saved in `folder`: the highest-numbered
    `step_N_STAMP.png` (regular files only), else `step_0.png`, else `None`."""
    with os.scandir(folder) as listing:
        shots = [
            (int(found[1]), entry.name)
            for entry in listing
            if (found := _SHOT.fullmatch(entry.name)) and entry.is_file(follow_symlinks=False)
        ]
    if not shots:
        return None
    _, name = max(shots, key=lambda shot: (shot[0], shot[1] != FIRST_SCREENSHOT, shot[1]))
    return name.removesuffix(".png"), _screenshot(folder, name)


def _read_json(path: Path, what: str) -> object:
    """The JSON in the regular file `path`, or `None` when there is none; a file that is no
    JSON raises `ValueError`, one that cannot be read `TrajectoryError`."""
    try:
        data = read_regular(path, what, MAX_JSON_BYTES, TrajectoryError, follow_links=False)
    except FileNotFoundError:
        return None
    return strict_loads(data)


def read_judgment(directory: Path) -> Verdict | JudgeFailure | None:
    """The verdict in `directory`'s judgment.json (ours or OS-Harm's), what is wrong with it,
    or `None` when there is none."""
    try:
        found = _read_json(directory / JUDGMENT_FILE, "judgment")
    except (ValueError, RecursionError, TrajectoryError) as exc:
        return JudgeFailure("malformed_arguments", f"{directory / JUDGMENT_FILE}: {exc}")
    return None if found is None else verdict_from_arguments(found, None)


def _write(path: Path, value: Any, what: str) -> None:
    """`value` as JSON (indented by two spaces) at `path`, replacing what was there at once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f".{path.name}.partial")
    create_file(partial, (record_json(value, what, indent=2) + "\n").encode(), replace=True)
    os.replace(partial, path)


def write_judgment(directory: Path, verdict: Verdict) -> None:
    """Write `verdict` as `directory`'s judgment.json, and drop an earlier failure's record."""
    _write(directory / JUDGMENT_FILE, verdict.to_json(), "the judgment")
    (directory / FAILURE_FILE).unlink(missing_ok=True)


def write_failure(directory: Path, failure: JudgeFailure) -> None:
    """Record why the judge gave no verdict, beside where judgment.json goes (which is left
    as it was: a failed rejudging keeps the earlier verdict)."""
    record = {"kind": failure.kind, "message": failure.message, "said": failure.said}
    _write(directory / FAILURE_FILE, record, "the judge's failure")


def _caption_file(folder: Path, captioner: str, stem: str) -> Path:
    return folder / CAPTIONS_DIR / segment(captioner) / f"{stem}{CAPTION_SUFFIX}"


def digest(png: bytes) -> str:
    """The SHA-256 of a screenshot, as the caption cache records it."""
    return hashlib.sha256(png).hexdigest()


def cached_caption(folder: Path, captioner: str, stem: str, png: bytes) -> str | None:
    """The caption `captioner` gave this very screenshot before, when cached."""
    try:
        found = _read_json(_caption_file(folder, captioner, stem), "caption")
    except (ValueError, RecursionError, TrajectoryError):
        return None
    if not isinstance(found, Mapping) or found.get("sha256") != digest(png):
        return None
    caption = found.get("caption")
    return caption if isinstance(caption, str) and caption.strip() else None


def cache_caption(
    folder: Path, captioner: str, stem: str, png: bytes, caption: str, response: Mapping[str, Any]
) -> None:
    """Keep `caption` of the screenshot `stem` for the next judging of `folder`."""
    record = {
        "caption": caption,
        "response": dict(response),
        "screenshot": f"{stem}.png",
        "sha256": digest(png),
    }
    _write(_caption_file(folder, captioner, stem), record, "the caption")


def judgment_specs(root: Path) -> list[str]:
    """The `MODEL/TYPE/VERSION` of every judgment.json under `root`'s trajectory folders."""
    found: set[str] = set()
    for place in trajectory_folders(root):
        for file in (place.folder / JUDGMENT_DIR).glob(f"*/*/*/{JUDGMENT_FILE}"):
            found.add(file.parent.relative_to(place.folder / JUDGMENT_DIR).as_posix())
    return sorted(found)


__all__ = [
    "FAILURE_FILE",
    "JUDGMENT_FILE",
    "MAX_SCREENSHOT_BYTES",
    "FolderPlace",
    "JudgmentSpec",
    "LoadedFolder",
    "ObservationType",
    "TaskKind",
    "cache_caption",
    "cached_caption",
    "final_screenshot",
    "folder_kind",
    "judgment_specs",
    "load_folder",
    "read_judgment",
    "segment",
    "task_kind",
    "trajectory_folders",
    "write_failure",
    "write_judgment",
]
