"""Agreement between two sets of judgments: the measures, folders matched across trees, the refusals."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.errors import UsageError
from adapters.judge import Confusion, JudgmentSpec, Verdict, compare, tree_agreement
from tests.judge.simulator import verdict
from tests.judge.trees import osharm_folder, write_verdict

SAFE = Verdict("r", True, True, None)


def _unsafe(step: int, success: bool = False) -> Verdict:
    return Verdict("r", success, False, step)


def test_the_measures_take_unsafe_and_success_as_the_positive_classes() -> None:
    """Safety counts an unsafe trajectory as the positive the judge must find; success a
    completed task; the violation step is compared where both say unsafe."""
    reference = {"a": _unsafe(1), "b": _unsafe(2), "c": SAFE, "d": SAFE, "e": _unsafe(0)}
    candidate = {"a": _unsafe(1), "b": _unsafe(3), "c": _unsafe(0, True), "d": SAFE, "f": SAFE}
    result = compare(reference, candidate)
    assert (result.both, result.only_reference, result.only_candidate) == (4, 1, 1)
    assert result.safety == Confusion(tp=2, fp=1, fn=0, tn=1)
    assert result.safety.agreement == 0.75
    assert result.safety.precision == pytest.approx(2 / 3)
    assert result.safety.recall == 1.0
    assert result.safety.f1 == pytest.approx(0.8)
    assert result.success == Confusion(tp=2, fp=0, fn=0, tn=2)
    assert (result.unsafe_both, result.same_step) == (2, 1)


def test_measures_without_positives_are_unknown_not_zero() -> None:
    """With no unsafe folder on either side, precision, recall and F1 are undefined (`None`)."""
    result = compare({"a": SAFE}, {"a": SAFE})
    assert (result.safety.precision, result.safety.recall, result.safety.f1) == (None, None, None)
    assert result.safety.agreement == 1.0
    assert "violation step: the same in 0 of 0 folder(s) both call unsafe (-)" in result.table()


def test_two_trees_are_matched_folder_by_folder(tmp_path: Path) -> None:
    """OS-Harm's judgments in one tree and ours in a copy are compared by folder path;
    unreadable judgment files are counted, not compared."""
    for name, theirs, ours in (
        ("_a", verdict(), verdict()),
        ("_b", verdict(False, False, 2), verdict(False, False, 1)),
        ("_c", verdict(), {"success": "maybe"}),
    ):
        for root, value, spec in (
            (tmp_path / "theirs", theirs, "gpt-4.1/aer/v3"),
            (tmp_path / "ours", ours, "claude-sonnet-4-5/aer/osharm-core-1"),
        ):
            write_verdict(
                osharm_folder(root / "pyautogui/a11y_tree/o4-mini/os" / name), spec, value
            )
    result = tree_agreement(
        tmp_path / "theirs",
        JudgmentSpec.parse("gpt-4.1/aer/v3"),
        JudgmentSpec.parse("claude-sonnet-4-5/aer/osharm-core-1"),
        tmp_path / "ours",
    )
    assert (result.both, result.only_reference, result.unreadable) == (2, 1, 1)
    assert result.safety == Confusion(tp=1, fp=0, fn=0, tn=1)
    assert (result.unsafe_both, result.same_step) == (1, 0)
    assert result.to_json()["safety"]["f1"] == 1.0


def test_a_set_of_judgments_the_tree_does_not_hold_is_refused_naming_those_it_does(
    tmp_path: Path,
) -> None:
    """A spec with no judgment under the tree is a usage error listing the specs there; the
    same set on both sides, and a spec that is not MODEL/TYPE/VERSION, are refused too."""
    write_verdict(osharm_folder(tmp_path / "os" / "_a"), "gpt-4.1/aer/v3", verdict())
    theirs, ours = JudgmentSpec.parse("gpt-4.1/aer/v3"), JudgmentSpec.parse("me/aer/osharm-core-1")
    with pytest.raises(
        UsageError, match=r"no judgment me/aer/osharm-core-1 .* holds gpt-4.1/aer/v3"
    ):
        tree_agreement(tmp_path, theirs, ours)
    with pytest.raises(UsageError, match="nothing to compare"):
        tree_agreement(tmp_path, theirs, theirs)
    with pytest.raises(UsageError, match="JUDGE_MODEL/JUDGE_TYPE/PROMPT_VERSION"):
        JudgmentSpec.parse("gpt-4.1/aer")
    assert (
        str(JudgmentSpec.parse("compat/judge/aer/osharm-core-1"))
        == "compat_judge/aer/osharm-core-1"
    )
