"""A report's pages, rendered with Jinja2 (autoescaped) from the values `read` gives.

The layout of a report folder::

    index.html          the run: totals, its manifest, the task table (sorts and filters
                        with the page's own script, no server)
    report.css          the pages' style
    tasks/NNNN.html     one task: its instruction, verdicts and every step
    thumbs/NNNN.jpg     each task's last screenshot, small (the table's thumbnails)
    .osharm-report      marks the folder as a report (a new report replaces its pages)

Screenshots are not copied: the task pages link to them where they are, by relative paths.
The style sheet (`report.css`) is copied from the package beside index.html, the table's
script is inline; each page has a Content-Security-Policy that lets it load nothing from
the network and run only its own script.
"""

from __future__ import annotations

import functools
import json
import os
import re
import secrets
import urllib.parse
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import attrs
import jinja2

from adapters.report.gestures import Mark
from adapters.report.model import OUTCOMES, StepView, TaskView

#: The report's style sheet, beside index.html (shipped in the package, copied there).
STYLE: Final = "report.css"
#: How far an arrowhead reaches back along a drag, as a share of the screen's width.
_ARROW: Final = 0.012
_FENCE: Final = re.compile(r"```[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)


@functools.cache
def environment() -> jinja2.Environment:
    """The templates' environment: autoescaped (every value is escaped unless marked safe,
    and nothing from a trajectory is), undefined names an error."""
    env = jinja2.Environment(
        loader=jinja2.PackageLoader("adapters.report", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(count=count, usd=usd, duration=duration, share=share)
    return env


def count(value: int | None) -> str:
    """A token count as shown (`—`: not known).

    >>> count(12345), count(None)
    ('12,345', '—')
    """
    return "—" if value is None else f"{value:,}"


def usd(value: float | None) -> str:
    """A cost as shown.

    >>> usd(0.01234), usd(None)
    ('$0.0123', '—')
    """
    return "—" if value is None else f"${value:,.4f}"


def duration(seconds: float | None) -> str:
    """Seconds as shown.

    >>> duration(0.0421), duration(3.21), duration(125), duration(7384), duration(None)
    ('42 ms', '3.2 s', '2 min 05 s', '2 h 03 min', '—')
    """
    if seconds is None:
        return "—"
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {rest:02d} s"
    return f"{minutes // 60} h {minutes % 60:02d} min"


def share(part: float, whole: float) -> str:
    """`part` as a percentage of `whole`, for a CSS length (`12.5%`)."""
    return f"{100 * part / whole:.4f}%" if whole else "0%"


def url_to(target: Path, page_folder: Path) -> str:
    """A relative URL from a page in `page_folder` to the file `target` (each segment
    quoted); a file URL when there is no relative path (another drive).

    >>> url_to(Path("/r/a b/step_1_x@y.png"), Path("/r/report/tasks"))
    '../../a%20b/step_1_x%40y.png'
    """
    try:
        relative = os.path.relpath(os.path.abspath(target), os.path.abspath(page_folder))
    except ValueError:
        return Path(os.path.abspath(target)).as_uri()
    return "/".join(urllib.parse.quote(part, safe="") for part in Path(relative).parts)


@attrs.frozen
class Placed:
    """A mark placed on its picture: where (percentages of its width and height), and the
    drag's line and arrowhead (in screen pixels, for the SVG layer)."""

    mark: Mark
    left: str | None
    top: str | None
    line: tuple[float, float, float, float] | None
    head: str | None


def _arrowhead(line: tuple[float, float, float, float], screen: tuple[int, int]) -> str:
    x1, y1, x2, y2 = line
    length = max(((x2 - x1) ** 2 + (y2 - y1) ** 2) ** 0.5, 1e-9)
    reach = _ARROW * screen[0]
    ux, uy = (x2 - x1) / length, (y2 - y1) / length
    base_x, base_y = x2 - ux * reach, y2 - uy * reach
    side_x, side_y = -uy * reach / 2, ux * reach / 2
    points = ((x2, y2), (base_x + side_x, base_y + side_y), (base_x - side_x, base_y - side_y))
    return " ".join(f"{x:.1f},{y:.1f}" for x, y in points)


def placed(step: StepView) -> list[Placed]:
    """Each mark of `step` placed on its picture (marks without a point have no place)."""
    found = []
    screen = step.screen
    for mark in step.marks:
        left = top = head = None
        line = None
        if mark.at is not None and screen is not None:
            left, top = share(mark.at[0], screen[0]), share(mark.at[1], screen[1])
            if mark.start is not None and mark.start != mark.at:
                line = (*mark.start, *mark.at)
                head = _arrowhead(line, screen)
        found.append(Placed(mark, left, top, line, head))
    return found


def reply_parts(text: str) -> list[tuple[str, str]]:
    """A reply cut into its prose and its fenced code, in order: (`text` or `code`, part).

    >>> reply_parts("Click it.\\n```python\\npyautogui.click(1, 2)\\n```")
    [('text', 'Click it.\\n'), ('code', 'pyautogui.click(1, 2)\\n')]
    """
    parts: list[tuple[str, str]] = []
    at = 0
    for found in _FENCE.finditer(text):
        if found.start() > at:
            parts.append(("text", text[at : found.start()]))
        parts.append(("code", found[1]))
        at = found.end()
    if at < len(text) or not parts:
        parts.append(("text", text[at:]))
    return parts


def _summary(tasks: Sequence[TaskView]) -> dict[str, Any]:
    """The run's totals: tasks by outcome and by verdict, steps, tokens, cost, time, events."""

    def total(values: list[Any]) -> Any:
        known = [v for v in values if v is not None]
        return sum(known) if known else None

    costs = [t.cost_usd for t in tasks]
    return {
        "tasks": len(tasks),
        "outcomes": {o: sum(t.outcome == o for t in tasks) for o in OUTCOMES},
        "verdicts": {v: sum(t.verdict == v for t in tasks) for v in ("safe", "unsafe", "none")},
        "steps": sum(len(t.steps) for t in tasks),
        "input_tokens": total([t.input_tokens for t in tasks]),
        "output_tokens": total([t.output_tokens for t in tasks]),
        "cost_usd": total(costs),
        "cost_complete": None not in costs,
        "seconds": total([t.seconds for t in tasks]),
        "safety_events": sum(t.safety_count for t in tasks),
        "with_safety_events": sum(bool(t.safety_count) for t in tasks),
    }


def _manifest_rows(manifest: Mapping[str, Any] | None) -> list[tuple[str, Any]]:
    """The manifest's keys as the index shows them, in its order; the JSON parts as text."""
    if manifest is None:
        return []
    rows = []
    for key, value in manifest.items():
        if key in ("outcomes", "previous"):
            value = f"{len(value)} recorded" if isinstance(value, list) else value
        elif key == "command" and isinstance(value, list):
            value = " ".join(str(word) for word in value)
        if isinstance(value, dict | list):
            value = json.dumps(value, indent=1, ensure_ascii=False)
        rows.append((key, value))
    return rows


def render_index(
    tasks: Sequence[TaskView],
    pages: Sequence[str],
    thumbs: Sequence[str | None],
    *,
    title: str,
    manifest: Mapping[str, Any] | None,
    manifest_problem: str | None,
) -> str:
    """The run's page: its totals, manifest and task table."""
    template = environment().get_template("index.html.j2")
    return template.render(
        css=STYLE,
        title=title,
        nonce=secrets.token_urlsafe(16),
        generated=datetime.now(UTC).isoformat(timespec="seconds"),
        summary=_summary(tasks),
        manifest=_manifest_rows(manifest),
        manifest_problem=manifest_problem,
        rows=list(zip(tasks, pages, thumbs, strict=True)),
        domains=sorted({t.domain for t in tasks}),
        outcomes=OUTCOMES,
    )


def _step_items(task: TaskView, page_folder: Path) -> list[dict[str, Any]]:
    """What the task page shows of each step: its screenshot's URL, its marks placed, its
    reply's parts, and its actions (each with whether it is the reply's code, not repeated)."""
    items = []
    for step in task.steps:
        reply = reply_parts(step.response)
        code = {part.strip() for kind, part in reply if kind == "code"}
        items.append(
            {
                "step": step,
                "image": None if step.picture is None else url_to(step.picture.path, page_folder),
                "placed": placed(step),
                "reply": reply,
                "actions": [(action, action.strip() in code) for action in step.actions],
            }
        )
    return items


def render_task(
    task: TaskView, *, page_folder: Path, index: int, total: int, pages: Sequence[str]
) -> str:
    """One task's page: its instruction, verdicts and steps, each screenshot with its marks."""
    template = environment().get_template("task.html.j2")
    return template.render(
        css=f"../{STYLE}",
        task=task,
        nonce=secrets.token_urlsafe(16),
        steps=_step_items(task, page_folder),
        previous=pages[index - 1] if index > 0 else None,
        following=pages[index + 1] if index + 1 < total else None,
        position=index + 1,
        total=total,
    )


def style_sheet() -> bytes:
    """The pages' style sheet, as the package ships it."""
    return (Path(__file__).parent / "templates" / STYLE).read_bytes()


__all__ = [
    "Placed",
    "count",
    "duration",
    "environment",
    "placed",
    "render_index",
    "render_task",
    "reply_parts",
    "share",
    "style_sheet",
    "url_to",
    "usd",
]
