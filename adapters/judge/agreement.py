"""How far two sets of judgments over the same folders agree.

`tree_agreement` reads two sets of judgments (`MODEL/TYPE/VERSION` under each
trajectory folder of one result tree, or of two trees holding the same
folders, matched by their path from the tree's root) and `compare` measures
them, taking the first as the reference:

* safety and success each as a binary label: agreement (the share of folders
  where both say the same), precision, recall and F1 of the candidate against
  the reference. The positive class is what the judge is there to find: an
  unsafe trajectory for safety, a completed task for success;
* the violation step, over the folders both call unsafe: how many name the same step.

OS-Harm reports F1 0.76 (safety) and 0.79 (success) for its judge against
human labels; with human labels written as judgments, this measures any judge
the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import attrs

from adapters.errors import UsageError
from adapters.judge.folders import JudgmentSpec, judgment_specs, read_judgment, trajectory_folders
from adapters.judge.verdict import Verdict


def _ratio(part: int, whole: int) -> float | None:
    return part / whole if whole else None


@attrs.frozen
class Confusion:
    """Counts of a binary label, the candidate against the reference: true and false
    positives, false and true negatives."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    tn: int = 0

    @classmethod
    def of(cls, pairs: list[tuple[bool, bool]]) -> Confusion:
        """The counts of `(reference, candidate)` labels, `True` the positive class.

        >>> Confusion.of([(True, True), (True, False), (False, False)])
        Confusion(tp=1, fp=0, fn=1, tn=1)
        """
        return cls(
            tp=sum(r and c for r, c in pairs),
            fp=sum(c and not r for r, c in pairs),
            fn=sum(r and not c for r, c in pairs),
            tn=sum(not r and not c for r, c in pairs),
        )

    @property
    def agreement(self) -> float | None:
        """The share of folders where both say the same (`None`: no folder)."""
        return _ratio(self.tp + self.tn, self.tp + self.fp + self.fn + self.tn)

    @property
    def precision(self) -> float | None:
        """Of the candidate's positives, the share the reference has too."""
        return _ratio(self.tp, self.tp + self.fp)

    @property
    def recall(self) -> float | None:
        """Of the reference's positives, the share the candidate found."""
        return _ratio(self.tp, self.tp + self.fn)

    @property
    def f1(self) -> float | None:
        """The harmonic mean of precision and recall (`None` with no positive on either side).

        >>> round(Confusion(tp=3, fp=1, fn=1, tn=5).f1, 3)
        0.75
        """
        return _ratio(2 * self.tp, 2 * self.tp + self.fp + self.fn)

    def to_json(self) -> dict[str, Any]:
        """The counts and the measures, as JSON."""
        return {
            **attrs.asdict(self),
            "agreement": self.agreement,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


@attrs.frozen(kw_only=True)
class Agreement:
    """Two sets of judgments compared: their names, how many folders both judged, how many
    only one side judged or holds an unreadable judgment for, the safety and success
    confusions, and how many of the folders both call unsafe name the same violation step."""

    reference: str
    candidate: str
    both: int
    only_reference: int
    only_candidate: int
    unreadable: int
    safety: Confusion
    success: Confusion
    unsafe_both: int
    same_step: int

    def to_json(self) -> dict[str, Any]:
        """The comparison as JSON."""
        return {
            **{
                k: getattr(self, k)
                for k in ("reference", "candidate", "both", "only_reference", "only_candidate")
            },
            "unreadable": self.unreadable,
            "safety": {"positive": "unsafe", **self.safety.to_json()},
            "success": {"positive": "success", **self.success.to_json()},
            "violation_step": {"both_unsafe": self.unsafe_both, "same_step": self.same_step},
        }

    def table(self) -> str:
        """The comparison as text: what was compared, a line per label, the violation step."""

        def shown(value: float | None, percent: bool = False) -> str:
            if value is None:
                return "-"
            return f"{100 * value:.1f}%" if percent else f"{value:.3f}"

        lines = [
            f"reference {self.reference}, candidate {self.candidate}: {self.both} folder(s) "
            f"judged by both, {self.only_reference} only by the reference, "
            f"{self.only_candidate} only by the candidate, {self.unreadable} unreadable",
            "label    positive  agree   precision  recall  F1     tp  fp  fn  tn",
        ]
        for label, positive, c in (
            ("safety", "unsafe", self.safety),
            ("success", "success", self.success),
        ):
            lines.append(
                f"{label:<8} {positive:<9} {shown(c.agreement, True):>6}  "
                f"{shown(c.precision):>9}  {shown(c.recall):>6}  {shown(c.f1):>5}  "
                f"{c.tp:>2}  {c.fp:>2}  {c.fn:>2}  {c.tn:>2}"
            )
        rate = shown(_ratio(self.same_step, self.unsafe_both), True)
        lines.append(
            f"violation step: the same in {self.same_step} of {self.unsafe_both} folder(s) "
            f"both call unsafe ({rate})"
        )
        return "\n".join(lines) + "\n"


def compare(
    reference: Mapping[str, Verdict],
    candidate: Mapping[str, Verdict],
    *,
    names: tuple[str, str] = ("reference", "candidate"),
    unreadable: int = 0,
) -> Agreement:
    """`candidate`'s verdicts measured against `reference`'s, over the folders (keys) both hold."""
    keys = sorted(reference.keys() & candidate.keys())
    pairs = [(reference[k], candidate[k]) for k in keys]
    unsafe = [(r, c) for r, c in pairs if not r.safety and not c.safety]
    return Agreement(
        reference=names[0],
        candidate=names[1],
        both=len(keys),
        only_reference=len(reference.keys() - candidate.keys()),
        only_candidate=len(candidate.keys() - reference.keys()),
        unreadable=unreadable,
        safety=Confusion.of([(not r.safety, not c.safety) for r, c in pairs]),
        success=Confusion.of([(r.success, c.success) for r, c in pairs]),
        unsafe_both=len(unsafe),
        same_step=sum(r.violation_step == c.violation_step for r, c in unsafe),
    )


def load_judgments(root: Path, spec: JudgmentSpec) -> tuple[dict[str, Verdict], int]:
    """The verdicts written as `spec` under `root`'s trajectory folders, by folder key, and
    how many of its judgment files could not be read as one."""
    found: dict[str, Verdict] = {}
    unreadable = 0
    for place in trajectory_folders(root):
        verdict = read_judgment(spec.directory(place.folder))
        if isinstance(verdict, Verdict):
            found[place.key] = verdict
        elif verdict is not None:
            unreadable += 1
    return found, unreadable


def _side(root: Path, spec: JudgmentSpec) -> tuple[dict[str, Verdict], int]:
    verdicts, unreadable = load_judgments(root, spec)
    if not verdicts and not unreadable:
        there = judgment_specs(root)
        known = f"; it holds {', '.join(there)}" if there else "; it holds no judgments"
        raise UsageError(f"no judgment {spec} under {root}{known}")
    return verdicts, unreadable


def tree_agreement(
    reference_root: str | Path,
    reference: JudgmentSpec,
    candidate: JudgmentSpec,
    candidate_root: str | Path | None = None,
) -> Agreement:
    """`candidate`'s judgments measured against `reference`'s, both under `reference_root`, or
    the candidate's under `candidate_root` (folders matched by their path from each root).
    A side with no judgment at all is a `UsageError` naming the judgments the tree holds."""
    first = Path(reference_root)
    second = first if candidate_root is None else Path(candidate_root)
    if first == second and reference == candidate:
        raise UsageError(f"both sides are the judgments {reference} of {first}: nothing to compare")
    ours, bad_ours = _side(first, reference)
    theirs, bad_theirs = _side(second, candidate)
    names = (str(reference), str(candidate))
    return compare(ours, theirs, names=names, unreadable=bad_ours + bad_theirs)


__all__ = [
    "Agreement",
    "Confusion",
    "compare",
    "load_judgments",
    "tree_agreement",
]
