"""`build_report`: a result tree's static report, written into a folder of its own.

The report folder is `OUT` (default `RESULT_DIR/report`): new, empty, or a report made
before (it holds `.osharm-report`), whose pages are then replaced; a folder holding
anything else is refused, so a report never writes over a user's files.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Final

import attrs

from adapters._files import open_flags
from adapters.report.images import thumbnail
from adapters.report.model import ReportError, TaskView
from adapters.report.read import RunRecord, read_task, task_folders
from adapters.report.render import STYLE, render_index, render_task, style_sheet
from osharm_core import OsharmError

#: Marks a folder as a report: a new report may replace the pages it holds.
MARKER: Final = ".osharm-report"
REPORT_FOLDER: Final = "report"
INDEX: Final = "index.html"
#: The files a report writes (a new one removes the old ones before writing its own).
_OWN: Final = re.compile(r"(tasks/[0-9]{4,}\.html|thumbs/[0-9]{4,}\.jpg)")


@attrs.frozen
class ReportSummary:
    """What a report came to: where its index is, how many tasks (unreadable ones among
    them), steps and thumbnails it shows, and the bytes its own files take (the screenshots
    it links to are not counted)."""

    out: Path
    index: Path
    tasks: int
    unreadable: int
    steps: int
    thumbnails: int
    bytes: int


def _prepare(out: Path) -> None:
    """`out` made ready: created, or emptied of a former report's pages; a `ReportError` when
    it is a file or holds anything but a report."""
    if out.exists() and not out.is_dir():
        raise ReportError(f"{out} is a file; a report is written into a folder")
    names = os.listdir(out) if out.is_dir() else []
    if names and MARKER not in names:
        raise ReportError(
            f"{out} holds files that are not a report ({names[0]}, ...); give -o a new or "
            "empty folder"
        )
    for sub in ("tasks", "thumbs"):
        folder = out / sub
        if folder.is_dir() and not folder.is_symlink():
            for name in os.listdir(folder):
                if _OWN.fullmatch(f"{sub}/{name}") and not (folder / name).is_symlink():
                    (folder / name).unlink()
    for folder in (out, out / "tasks", out / "thumbs"):
        if folder.is_symlink():
            raise ReportError(f"{folder} is a symbolic link; a report does not write through one")
        folder.mkdir(parents=True, exist_ok=True)


def _write(path: Path, data: bytes) -> int:
    """`data` as the new file `path` (whatever was there, a link included, removed first and
    never followed); not fsynced: a report is made again in seconds, and 300 fsyncs took two."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | open_flags("O_NOFOLLOW", "O_BINARY", "O_CLOEXEC")
    try:
        path.unlink(missing_ok=True)
        with os.fdopen(os.open(path, flags, 0o666), "wb") as out:
            out.write(data)
    except OSError as exc:
        raise ReportError(f"cannot write {path}: {exc.strerror or exc}") from None
    return len(data)


def _thumbnails(tasks: Sequence[TaskView], workers: int) -> list[bytes | None]:
    """Each task's thumbnail (its last screenshot, small); `None` where it has none or it
    cannot be decoded. Pillow decodes outside the GIL, so a few threads share the work."""

    def one(task: TaskView) -> bytes | None:
        picture = task.last_picture
        if picture is None:
            return None
        try:
            return thumbnail(picture)
        except (OsharmError, OSError, ValueError):
            return None

    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="osharm-thumbs") as pool:
        return list(pool.map(one, tasks))


def build_report(
    result_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    workers: int | None = None,
) -> ReportSummary:
    """Write the static report of the run (or task folder) at `result_dir` into `out` (default
    `RESULT_DIR/report`) and say what it holds. It opens from disk in a browser, with no
    server and no network: open `ReportSummary.index`.

    A missing `result_dir`, an `out` that holds other files, or a tree of more folders than a
    run has is a `ReportError`; a task folder that cannot be read is shown as unreadable.
    """
    root = Path(result_dir)
    if root.is_file() and root.name.endswith(".jsonl"):
        root = root.parent
    if not root.is_dir():
        raise ReportError(f"no result folder at {root}")
    target = root / REPORT_FOLDER if out is None else Path(out)
    if os.path.abspath(target) == os.path.abspath(root):
        raise ReportError(f"{target} is the result folder itself; give -o another folder")
    run = RunRecord.at(root)
    folders = task_folders(root, skip=target)
    tasks = [read_task(root, folder, run) for folder in folders]
    _prepare(target)
    written = _write(target / MARKER, b"osharm-agent report\n")
    written += _write(target / STYLE, style_sheet())
    pages = [f"tasks/{n:04d}.html" for n in range(1, len(tasks) + 1)]
    thumbs = _thumbnails(tasks, workers or min(2, os.cpu_count() or 1))
    shown: list[str | None] = []
    for n, data in enumerate(thumbs, 1):
        shown.append(None if data is None else f"thumbs/{n:04d}.jpg")
        written += 0 if data is None else _write(target / f"thumbs/{n:04d}.jpg", data)
    for n, task in enumerate(tasks):
        page = render_task(
            task,
            page_folder=target / "tasks",
            index=n,
            total=len(tasks),
            pages=[Path(p).name for p in pages],
        )
        written += _write(target / pages[n], page.encode("utf-8", "backslashreplace"))
    index = render_index(
        tasks,
        pages,
        shown,
        title=os.path.abspath(root),
        manifest=run.manifest,
        manifest_problem=run.problem,
    )
    written += _write(target / INDEX, index.encode("utf-8", "backslashreplace"))
    return ReportSummary(
        out=target,
        index=target / INDEX,
        tasks=len(tasks),
        unreadable=sum(t.outcome == "unreadable" for t in tasks),
        steps=sum(len(t.steps) for t in tasks),
        thumbnails=sum(data is not None for data in thumbs),
        bytes=written,
    )


__all__ = ["INDEX", "MARKER", "ReportSummary", "build_report"]
