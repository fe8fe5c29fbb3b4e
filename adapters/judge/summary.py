"""What judging a result tree came to: one outcome per folder, and the summary table.

Pure: `JudgeSummary.of(outcomes)` counts the folders judged now, already
judged (resumed) and failed, the success and safety rates over every folder
with a verdict, by domain and by the task's kind (misuse, injection,
misbehaviour, other), the failures by kind, and the judge's usage and cost.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Sequence
from typing import Final, Literal

import attrs

from adapters.accounting.cost import UsageTotals
from adapters.judge.folders import FolderPlace, TaskKind
from adapters.judge.verdict import JudgeFailure, Verdict

#: `judged`: given a verdict now; `skipped`: it had one already (resumed); `failed`: none.
Status = Literal["judged", "skipped", "failed"]


@attrs.frozen(kw_only=True)
class FolderOutcome:
    """One trajectory folder's outcome: where it is, its task's kind, its status, its verdict
    (`None` when it failed) or failure, and the usage its judge and caption calls took."""

    place: FolderPlace
    kind: TaskKind
    status: Status
    verdict: Verdict | None = None
    failure: JudgeFailure | None = None
    usage: UsageTotals = attrs.field(factory=UsageTotals)

    def line(self) -> str:
        """The outcome as one line of the judge's report (the CLI escapes it)."""
        where = f"[{self.place.key}]"
        if self.failure is not None:
            return f"{where} failed ({self.failure.kind}): {self.failure.message}"
        assert self.verdict is not None
        verdict = self.verdict
        done = "completed" if verdict.success else "not completed"
        safe = "safe" if verdict.safety else f"unsafe at step {verdict.violation_step}"
        status = "already judged" if self.status == "skipped" else "judged"
        return f"{where} {status}: {safe}, {done}"


@attrs.frozen
class GroupRow:
    """The tasks of one group with a verdict, how many succeeded and were safe, and how
    many of the group's folders failed."""

    group: str
    tasks: int
    successes: int
    safe: int
    failed: int

    @staticmethod
    def rate(count: int, of: int) -> str:
        """`count` of `of` as a percentage (`-` when `of` is 0).

        >>> GroupRow.rate(1, 3), GroupRow.rate(0, 0)
        ('33.3%', '-')
        """
        return f"{100 * count / of:.1f}%" if of else "-"

    def cells(self) -> tuple[str, ...]:
        """The row as table cells."""
        return (
            self.group,
            str(self.tasks),
            self.rate(self.successes, self.tasks),
            self.rate(self.safe, self.tasks),
            str(self.failed),
        )


def _row(group: str, outcomes: Iterable[FolderOutcome]) -> GroupRow:
    chosen = list(outcomes)
    verdicts = [o.verdict for o in chosen if o.verdict is not None]
    return GroupRow(
        group,
        len(verdicts),
        sum(v.success for v in verdicts),
        sum(v.safety for v in verdicts),
        sum(o.status == "failed" for o in chosen),
    )


_HEADER: Final = ("group", "tasks", "success", "safe", "failed")


@attrs.frozen
class JudgeSummary:
    """The summary of one judging: which judgments (`spec`), the outcomes, their usage."""

    spec: str
    outcomes: tuple[FolderOutcome, ...]

    @classmethod
    def of(cls, spec: str, outcomes: Sequence[FolderOutcome]) -> JudgeSummary:
        """The summary of `outcomes`, written as `spec` (`MODEL/TYPE/VERSION`)."""
        return cls(spec, tuple(outcomes))

    def count(self, status: Status) -> int:
        """How many folders ended with `status`."""
        return sum(o.status == status for o in self.outcomes)

    @property
    def usage(self) -> UsageTotals:
        """The judge's and captioner's usage and cost in this run (resumed folders cost nothing)."""
        return sum((o.usage for o in self.outcomes), UsageTotals())

    def rows(self) -> list[GroupRow]:
        """All folders, then one row per domain, then one per task kind."""
        by_domain = collections.defaultdict(list)
        by_kind = collections.defaultdict(list)
        for outcome in self.outcomes:
            by_domain[outcome.place.domain].append(outcome)
            by_kind[outcome.kind].append(outcome)
        return [
            _row("all", self.outcomes),
            *(_row(f"domain {name}", by_domain[name]) for name in sorted(by_domain)),
            *(_row(f"kind {name}", by_kind[name]) for name in sorted(by_kind)),
        ]

    def failures(self) -> dict[str, int]:
        """How many folders failed, by the failure's kind."""
        kinds = (o.failure.kind for o in self.outcomes if o.failure is not None)
        return dict(sorted(collections.Counter(kinds).items()))

    def table(self) -> str:
        """The summary: a counts line, the rates table, the failures, the judge's usage."""
        lines = [
            f"judge {self.spec}: {len(self.outcomes)} folder(s): {self.count('judged')} judged, "
            f"{self.count('skipped')} already judged, {self.count('failed')} failed"
        ]
        cells = [_HEADER, *(row.cells() for row in self.rows())]
        widths = [max(len(row[i]) for row in cells) for i in range(len(_HEADER))]
        for row in cells:
            first = row[0].ljust(widths[0])
            rest = (cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))
            lines.append("  ".join([first, *rest]))
        failures = self.failures()
        if failures:
            lines.append("failures: " + ", ".join(f"{kind} {n}" for kind, n in failures.items()))
        usage = self.usage
        lines.append(f"judge usage: {usage.describe()}" if usage.steps else "judge usage: none")
        return "\n".join(lines) + "\n"


__all__ = ["FolderOutcome", "GroupRow", "JudgeSummary", "Status"]
