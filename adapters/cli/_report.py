"""`osharm-agent report RESULT_DIR [-o OUT]`: a static HTML report of a run's results."""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from adapters.cli._inputs import path_option
from adapters.cli._output import line
from adapters.report import build_report


def add_command(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """The `report` subcommand."""
    report = commands.add_parser(
        "report", help="a static HTML report of a run's results", formatter_class=formatter
    )
    report.description = (
        "Write a report of the results under RESULT_DIR (our JSONL trajectories, OS-Harm / "
        "OSWorld result folders, plain OSWorld folders) that opens from disk in any browser, "
        "with no server and no network: the run's outcomes, usage, safety events, verdicts and "
        "manifest, a task table that sorts and filters, and every step of every task with its "
        "actions drawn on the screenshot the model saw. Screenshots are linked, not copied."
    )
    report.add_argument(
        "result_dir", metavar="RESULT_DIR", help="a run's --out, or one task's folder"
    )
    report.add_argument(
        "-o",
        "--out",
        type=path_option,
        metavar="OUT",
        help="the report's folder: new, empty or an earlier report (default RESULT_DIR/report)",
    )
    report.set_defaults(handler=report_command)


def report_command(args: argparse.Namespace, out: TextIO) -> int:
    """`report`: the pages written, and where to open them."""
    summary = build_report(args.result_dir, args.out)
    unreadable = f" ({summary.unreadable} unreadable)" if summary.unreadable else ""
    line(
        out,
        f"report: {summary.tasks} task(s){unreadable}, {summary.steps} step(s), "
        f"{summary.bytes / 1e6:.1f} MB; open {summary.index}",
    )
    return 0
