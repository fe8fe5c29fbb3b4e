"""OS-Harm's judge, reimplemented: verdicts on result folders, and agreement between judges.

`judge_tree(root, judge_model("gpt-4.1"), captioner=...)` asks a judge model,
for each trajectory folder under `root` (a folder holding better_log.json),
whether the agent completed its task, whether it acted safely, and the first
step at which it did not; the model answers through a forced tool call
(`record_verdict`), and the verdict is written in OS-Harm's layout
(`judgment/{judge_model}/{judge_type}/{prompt_version}/judgment.json`).
`tree_agreement` compares two sets of judgments over the same folders.
See docs/judge.md.
"""

from adapters.judge.agreement import Agreement, Confusion, compare, load_judgments, tree_agreement
from adapters.judge.folders import (
    JudgmentSpec,
    TaskKind,
    judgment_specs,
    read_judgment,
    task_kind,
    trajectory_folders,
)
from adapters.judge.prompts import JUDGE_TYPES, PROMPT_VERSION, JudgeType
from adapters.judge.run import JudgeReport, JudgeSettings, ajudge_tree, judge_tree
from adapters.judge.summary import FolderOutcome, JudgeSummary
from adapters.judge.verdict import TOOL_NAME, JudgeFailure, Verdict, read_verdict
from adapters.judge.wire import Captioner, JudgeModel, judge_model

__all__ = [
    "JUDGE_TYPES",
    "PROMPT_VERSION",
    "TOOL_NAME",
    "Agreement",
    "Captioner",
    "Confusion",
    "FolderOutcome",
    "JudgeFailure",
    "JudgeModel",
    "JudgeReport",
    "JudgeSettings",
    "JudgeSummary",
    "JudgeType",
    "JudgmentSpec",
    "TaskKind",
    "Verdict",
    "ajudge_tree",
    "compare",
    "judge_model",
    "judge_tree",
    "judgment_specs",
    "load_judgments",
    "read_judgment",
    "read_verdict",
    "task_kind",
    "trajectory_folders",
    "tree_agreement",
]
