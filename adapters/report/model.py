"""What a report shows, as values: each task and each of its steps, read from a result tree.

Everything in them that came from a trajectory (replies, instructions, actions, judges'
reasoning, safety events, file names) is untrusted text, escaped where it is rendered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

import attrs

from adapters.errors import ReportError
from adapters.report.gestures import Box, Mark

#: A task's outcomes, in the order the report lists them.
OUTCOMES: Final = ("success", "failure", "unscored", "error", "unfinished", "unreadable")


@attrs.frozen
class SafetyEvent:
    """One safety event a step recorded: its kind (or `event`) and what it says."""

    kind: str
    text: str


@attrs.frozen
class Verdict:
    """One judgment.json: the judge (`MODEL / TYPE / VERSION`), its verdicts (`None`: not
    given), the step it found the first violation at (0-based, as the judge counts) and its
    reasoning; `problem` says why the file could not be read."""

    judge: str
    success: bool | None = None
    safety: bool | None = None
    violation_step: int | None = None
    reasoning: str = ""
    problem: str | None = None


@attrs.frozen
class Picture:
    """A screenshot on disk, checked: a regular file whose PNG header gives its `size`."""

    path: Path
    size: tuple[int, int]


@attrs.frozen
class StepView:
    """One model step as the report shows it.

    `picture` is the screenshot the model saw (`None`, with `picture_note` saying why, when
    there is none to show); `screen` the size of the screen its actions' pixels are on (the
    frame's, else the picture's own), so a mark lands on its pixel whatever the picture's
    scale. `boxes` are the set-of-marks boxes, `tags` those the actions used. `actions`
    are the parsed actions as shown (code, or an object's JSON); `parsed` is false when
    the reply could not be parsed.
    """

    number: int
    response: str
    picture: Picture | None = None
    picture_note: str | None = None
    screen: tuple[int, int] | None = None
    marks: tuple[Mark, ...] = ()
    boxes: tuple[Box, ...] = ()
    tags: frozenset[int] = frozenset()
    actions: tuple[str, ...] = ()
    parsed: bool = True
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    latency: float | None = None
    time: str = ""
    safety: tuple[SafetyEvent, ...] = ()
    violation: bool = False


@attrs.frozen
class TaskView:
    """One task folder as the report shows it: where it is (`key`, its path under the tree's
    root), what it was asked, how it ended, its steps and totals, and the judges' verdicts.
    `source` is `jsonl` (our trajectory), `osharm` (a result folder with better_log.json) or
    `osworld` (a plain OSWorld folder: traj.jsonl and screenshots). `problem` says why it
    could not be read (its `outcome` is then `unreadable`)."""

    key: str
    folder: Path
    domain: str
    example_id: str
    source: str = ""
    model: str = ""
    observation_type: str = ""
    action_space: str = ""
    instruction: str = ""
    outcome: str = "unfinished"
    score: float | None = None
    detail: str = ""
    steps: tuple[StepView, ...] = ()
    input_tokens: int | None = None
    output_tokens: int | None = None
    cost_usd: float | None = None
    seconds: float | None = None
    verdicts: tuple[Verdict, ...] = ()
    injection: str = ""
    jailbreak: bool = False
    problem: str | None = None
    note: str | None = None

    @property
    def safety_count(self) -> int:
        """How many safety events its steps recorded."""
        return sum(len(step.safety) for step in self.steps)

    @property
    def verdict(self) -> str:
        """`unsafe` when a judge found it unsafe, `safe` when every judge that said found it
        safe, `none` when no judgment says."""
        said = [v.safety for v in self.verdicts if v.safety is not None]
        if not said:
            return "none"
        return "safe" if all(said) else "unsafe"

    @property
    def last_picture(self) -> Picture | None:
        """The last screenshot its steps show (its thumbnail's source)."""
        shown = [step.picture for step in self.steps if step.picture is not None]
        return shown[-1] if shown else None


__all__ = ["OUTCOMES", "Picture", "ReportError", "SafetyEvent", "StepView", "TaskView", "Verdict"]
