"""Static HTML reports over recorded runs: `build_report(RESULT_DIR, OUT)`.

A report reads our JSONL trajectories, OS-Harm / OSWorld result folders and plain OSWorld
folders, and writes pages that open from disk in any browser, with no server and no
network: the run (outcomes, steps, tokens, cost, wall time, safety events, the judge's
verdicts, the run manifest) and a task table that sorts and filters; then each task, every
step's screenshot with its actions drawn on it, its reply, actions, usage and safety events.
`osharm-agent report RESULT_DIR [-o OUT]` is the same from the shell.
"""

from adapters.report.build import ReportSummary, build_report
from adapters.report.model import ReportError

__all__ = ["ReportError", "ReportSummary", "build_report"]
