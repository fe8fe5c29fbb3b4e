"""How a task-list run is going and how it went: a progress line, per-step lines, a summary.

`RunListener` is what a runner tells as episodes start, step and end;
`Progress` writes that to a stream (stderr in the CLI): a line over the
episodes (done / failed / running, redrawn in place on a terminal) and one
line per model step of each active episode. `RunSummary` is the frozen
value a run ends with (episodes done, failed, skipped, stopped by the run's
budget, steps, tokens, cost when known, wall time) and `RunResult` carries it with the outcomes, so the
API returns what the CLI prints (`RunSummary.table()`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol, TextIO, overload

import attrs

from adapters._wire import printable
from adapters.accounting.cost import UsageTotals
from osharm_core.safety import SafetyTally

if TYPE_CHECKING:
    from adapters.runs.tasks import OsworldTask, TaskOutcome


class RunListener(Protocol):
    """Told by a runner as episodes start, take model steps and end."""

    def started(self, task: OsworldTask) -> None:
        """An episode began (its environment is being reset)."""
        ...

    def stepped(self, task: OsworldTask, step: int, max_steps: int) -> None:
        """An episode's model call number `step` came back."""
        ...

    def ended(self, outcome: TaskOutcome) -> None:
        """An episode ended (finished, failed or skipped)."""
        ...


class Quiet:
    """A `RunListener` that says nothing."""

    def started(self, task: OsworldTask) -> None:
        """Nothing."""

    def stepped(self, task: OsworldTask, step: int, max_steps: int) -> None:
        """Nothing."""

    def ended(self, outcome: TaskOutcome) -> None:
        """Nothing."""


@attrs.frozen(kw_only=True)
class RunSummary:
    """What a task-list run came to: episode counts, steps, `usage` (tokens and cost
    summed over the episodes' `usage_totals`), `safety` (the episodes' safety events
    counted) and wall time. Token counts are
    `None` when no reply reported any; `cost` is `None` unless every call's price was known."""

    episodes: int
    finished: int
    failed: int
    skipped: int
    stopped: int = 0
    steps: int
    usage: UsageTotals = attrs.field(factory=UsageTotals)
    safety: SafetyTally = attrs.field(factory=SafetyTally)
    wall_time: float

    @classmethod
    def of(cls, outcomes: Sequence[TaskOutcome], wall_time: float) -> RunSummary:
        """The summary of `outcomes`, for a run that took `wall_time` seconds."""
        usage = sum((o.usage for o in outcomes if o.usage is not None), UsageTotals())
        return cls(
            episodes=len(outcomes),
            finished=sum(o.status == "finished" for o in outcomes),
            failed=sum(o.status == "failed" for o in outcomes),
            skipped=sum(o.status == "skipped" for o in outcomes),
            stopped=sum(o.status == "stopped" for o in outcomes),
            steps=sum(o.steps for o in outcomes),
            usage=usage,
            safety=sum((o.safety for o in outcomes), SafetyTally()),
            wall_time=wall_time,
        )

    def _reported(self, count: int) -> int | None:
        usage = self.usage
        return count if usage.steps > usage.unreported_steps + usage.estimated_steps else None

    @property
    def input_tokens(self) -> int | None:
        """Prompt tokens over the run (`None` when no reply reported usage)."""
        return self._reported(self.usage.input_tokens)

    @property
    def output_tokens(self) -> int | None:
        """Generated tokens over the run (`None` when no reply reported usage)."""
        return self._reported(self.usage.output_tokens)

    @property
    def total_tokens(self) -> int | None:
        """Input plus output tokens over the run, estimates of replies billed but not used
        included (`None` when no reply reported usage and none was estimated)."""
        usage = self.usage
        return usage.tokens if usage.steps > usage.unreported_steps else None

    @property
    def cost(self) -> float | None:
        """The run's cost in USD when every model call's price was known, else `None`."""
        return self.usage.cost_usd

    def rows(self) -> list[tuple[str, str]]:
        """The summary as (label, value) rows; unknown values read `n/a`."""

        def known(value: int | None) -> str:
            return "n/a" if value is None else str(value)

        return [
            ("episodes", str(self.episodes)),
            ("done", str(self.finished)),
            ("failed", str(self.failed)),
            ("skipped", str(self.skipped)),
            ("stopped", str(self.stopped)),
            ("steps", str(self.steps)),
            ("input tokens", known(self.input_tokens)),
            ("output tokens", known(self.output_tokens)),
            ("total tokens", known(self.total_tokens)),
            ("cost", "n/a" if self.cost is None else f"${self.cost:.4f}"),
            ("safety events", self.safety.describe()),
            ("wall time", f"{self.wall_time:.1f} s"),
        ]

    def table(self) -> str:
        """The summary as a two-column text table, one row per line."""
        rows = self.rows()
        width = max(len(label) for label, _ in rows)
        return "".join(f"{label:<{width}}  {value}\n" for label, value in rows)


@attrs.frozen
class RunResult(Sequence["TaskOutcome"]):
    """A run's outcomes in task order (it is a sequence of them) and its `summary`."""

    outcomes: tuple[TaskOutcome, ...]
    summary: RunSummary

    @overload
    def __getitem__(self, index: int) -> TaskOutcome: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[TaskOutcome]: ...

    def __getitem__(self, index: int | slice) -> TaskOutcome | Sequence[TaskOutcome]:
        return self.outcomes[index]

    def __len__(self) -> int:
        return len(self.outcomes)

    def __iter__(self) -> Iterator[TaskOutcome]:
        return iter(self.outcomes)


def _name(task: OsworldTask) -> str:
    return f"{task.domain}/{task.example_id}"


def task_name(task: OsworldTask) -> str:
    """`domain/example_id` as output lines show a task (see `printable`)."""
    return printable(_name(task))


class Progress:
    """A `RunListener` writing a progress line and per-step lines to `stream` (an edge object).

    With `live` (a terminal) the progress line is redrawn in place and step
    lines scroll above it; otherwise each change is a line of its own.
    Call `close()` at the end to finish the progress line.
    """

    def __init__(
        self,
        stream: TextIO,
        total: int,
        *,
        live: bool,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream
        self.total = total
        self.live = live
        self._clock = clock
        self._start = clock()
        self.done = self.failed = self.skipped = self.stopped = 0
        self.running: set[str] = set()

    def line(self) -> str:
        """The progress line: a bar over the episodes and the counts."""
        ended = self.done + self.failed + self.skipped + self.stopped
        width = 20
        filled = width * ended // self.total if self.total else width
        return (
            f"[{'#' * filled}{'.' * (width - filled)}] {ended}/{self.total} episodes: "
            f"{self.done} done, {self.failed} failed, {self.skipped} skipped, "
            + (f"{self.stopped} not started (run budget), " if self.stopped else "")
            + f"{len(self.running)} running; {self._clock() - self._start:.0f} s"
        )

    def _write(self, text: str | None) -> None:
        if self.live:
            above = "" if text is None else f"\r\x1b[K{text}\n"
            self.stream.write(f"{above}\r\x1b[K{self.line()}")
        else:
            self.stream.write(f"{text}\n" if text is not None else f"{self.line()}\n")
        self.stream.flush()

    def started(self, task: OsworldTask) -> None:
        """Count `task` as running."""
        self.running.add(_name(task))
        if self.live:
            self._write(None)

    def stepped(self, task: OsworldTask, step: int, max_steps: int) -> None:
        """One line for the step, above the progress line."""
        self._write(f"[{task_name(task)}] step {step}/{max_steps}")

    def ended(self, outcome: TaskOutcome) -> None:
        """Count the episode's end and redraw."""
        self.running.discard(_name(outcome.task))
        if outcome.status == "finished":
            self.done += 1
        elif outcome.status == "failed":
            self.failed += 1
        elif outcome.status == "stopped":
            self.stopped += 1
        else:
            self.skipped += 1
        self._write(None)

    def close(self) -> None:
        """End the progress line (on a terminal)."""
        if self.live:
            self.stream.write("\n")
            self.stream.flush()


__all__ = [
    "Progress",
    "Quiet",
    "RunListener",
    "RunResult",
    "RunSummary",
    "printable",
    "task_name",
]
