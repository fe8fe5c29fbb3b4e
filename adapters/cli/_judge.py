"""`osharm-agent judge` and `osharm-agent agreement`: OS-Harm's verdicts on a result tree, compared.

`judge RESULT_DIR --model MODEL` asks a judge model for each trajectory folder's
verdict (see `adapters.judge`), `--workers` folders at a time, its clients
sharing one rate limiter; folders judged already are skipped unless
`--rejudge`. One line per folder and a summary table go to stdout; the exit
status is 1 when a folder got no verdict. `agreement REFERENCE CANDIDATE --in
DIR` compares two sets of judgments (`MODEL/TYPE/VERSION`) over the same folders.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any, TextIO

import attrs

from adapters._wire import json_for_terminal, printable
from adapters.accounting.prices import load_prices
from adapters.cli._inputs import _base_url, model_client, path_option, positive_count
from adapters.cli._output import line
from adapters.cli._task_list import _rate_limiter
from adapters.contract import ModelClient
from adapters.engine import connections_for
from adapters.engine.client import HttpModelClient
from adapters.engine.limits import RateLimiter
from adapters.errors import UsageError
from adapters.judge.agreement import tree_agreement
from adapters.judge.folders import JudgmentSpec, judgment_specs
from adapters.judge.prompts import CAPTIONED_TYPES, JUDGE_TYPES, OBSERVING_TYPES, PROMPT_VERSION
from adapters.judge.run import JudgeReport, JudgeSettings, ajudge_tree
from adapters.judge.wire import Captioner, JudgeModel, forced
from osharm_core import ConfigError

#: The observation types the step-by-step judge can show.
_SHOWN = ("screenshot", "a11y_tree", "screenshot_a11y_tree")


def add_judge_command(commands: Any, formatter: type[argparse.HelpFormatter], models: str) -> None:
    """The `judge` subcommand."""
    judge = commands.add_parser(
        "judge",
        help="OS-Harm verdicts (success, safety, violation step) on a result tree",
        epilog=models,
        formatter_class=formatter,
    )
    judge.description = (
        "Ask a judge model, for each trajectory folder under RESULT_DIR (a folder holding "
        "better_log.json), whether the agent completed its task, whether it acted safely, and "
        "the first step at which it did not; write the verdict to "
        f"judgment/MODEL/TYPE/{PROMPT_VERSION}/judgment.json in the folder, as OS-Harm's judge "
        "does. Folders judged already are skipped, so a rerun resumes."
    )
    judge.add_argument("result_dir", type=path_option, metavar="RESULT_DIR")
    group = judge.add_argument_group("judge model")
    group.add_argument("--model", default="gpt-4.1", help="the judge model (OS-Harm's default)")
    group.add_argument("--base-url", type=_base_url, help="the judge's API base URL")
    group.add_argument("--api-key-env", metavar="VAR", help="the variable holding its key")
    group.add_argument("--max-tokens", type=positive_count, default=2048, metavar="N")
    group.add_argument(
        "--judge-type",
        choices=JUDGE_TYPES,
        default="aer",
        help="aer: every response as text and a caption of the final screenshot; "
        "all_step_aer: the same with a caption of each step's screenshot; default: step by "
        "step, with each step's screenshot and/or tree; captioned_default: the same with a "
        "caption of each step's screenshot; a11y_tree: step by step, the trees alone",
    )
    group.add_argument(
        "--observation-type",
        choices=_SHOWN,
        help="what the default and captioned_default judges show of each step (default: "
        "what the run's agent saw)",
    )
    group.add_argument(
        "--tree-max-tokens", type=positive_count, default=4000, metavar="N", help="per step"
    )
    group.add_argument(
        "--caption-model",
        metavar="MODEL",
        help="the captioning model of the aer, all_step_aer and captioned_default judges "
        "(default --model)",
    )
    group.add_argument("--caption-base-url", type=_base_url, metavar="URL")
    run = judge.add_argument_group("the run")
    run.add_argument("--workers", type=positive_count, default=4, metavar="N")
    run.add_argument("--requests-per-minute", type=float, metavar="N")
    run.add_argument("--tokens-per-minute", type=float, metavar="N")
    run.add_argument("--rejudge", action="store_true", help="judge folders judged already again")
    run.add_argument("--prices", metavar="JSON", help="a price table for the judge's usage")
    run.add_argument(
        "--compare",
        metavar="MODEL/TYPE/VERSION",
        help="then measure these judgments against that set's (e.g. gpt-4.1/aer/v3)",
    )
    judge.set_defaults(handler=judge_command)


def add_agreement_command(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """The `agreement` subcommand."""
    agreement = commands.add_parser(
        "agreement", help="how far two sets of judgments agree", formatter_class=formatter
    )
    agreement.description = (
        "Compare two sets of judgments over the same trajectory folders, taking REFERENCE as "
        "right: agreement, precision, recall and F1 for safety (unsafe as positive) and "
        "success, and agreement on the violation step. Each set is MODEL/TYPE/VERSION, the "
        "folders under judgment/ (gpt-4.1/aer/v3 is OS-Harm's default judge)."
    )
    agreement.add_argument("reference", metavar="REFERENCE")
    agreement.add_argument("candidate", metavar="CANDIDATE")
    agreement.add_argument(
        "--in", dest="tree", required=True, type=path_option, metavar="DIR", help="the result tree"
    )
    agreement.add_argument(
        "--candidate-in",
        type=path_option,
        metavar="DIR",
        help="read CANDIDATE from this tree instead (its folders matched by path)",
    )
    agreement.add_argument("--json", action="store_true", help="print one JSON object")
    agreement.set_defaults(handler=agreement_command)


def agreement_command(args: argparse.Namespace, out: TextIO) -> int:
    """`agreement`: the comparison table (or JSON)."""
    result = tree_agreement(
        args.tree,
        JudgmentSpec.parse(args.reference),
        JudgmentSpec.parse(args.candidate),
        args.candidate_in,
    )
    out.write(json_for_terminal(result.to_json()) + "\n" if args.json else result.table())
    return 0


def _settings(args: argparse.Namespace) -> JudgeSettings:
    if args.judge_type not in CAPTIONED_TYPES and (args.caption_model or args.caption_base_url):
        captioned = ", ".join(t for t in JUDGE_TYPES if t in CAPTIONED_TYPES)
        raise UsageError(
            f"--caption-model and --caption-base-url belong to --judge-type {captioned}"
        )
    if args.judge_type not in OBSERVING_TYPES and args.observation_type is not None:
        observing = ", ".join(t for t in JUDGE_TYPES if t in OBSERVING_TYPES)
        raise UsageError(f"--observation-type belongs to --judge-type {observing}")
    try:
        prices = load_prices(args.prices)
    except ConfigError as exc:
        raise UsageError(f"--prices: {exc}") from None
    return JudgeSettings(
        judge_type=args.judge_type,
        observation_type=args.observation_type,
        rejudge=args.rejudge,
        workers=args.workers,
        tree_max_tokens=args.tree_max_tokens,
        prices=prices,
    )


@attrs.frozen
class _Clients:
    """The judge (its plain client kept: captions by the same model go through it) and the
    captioner of one `judge` run."""

    plain: ModelClient
    judge: JudgeModel
    captioner: Captioner | None

    @classmethod
    def of(cls, args: argparse.Namespace) -> _Clients:
        limiter = _rate_limiter(args)  # --requests-per-minute, --tokens-per-minute
        pool = connections_for(args.workers)
        plain = model_client(args, args.model, limiter=limiter, max_connections=pool)
        judge = attrs.evolve(forced(plain, args.model), max_tokens=args.max_tokens)
        if args.judge_type not in CAPTIONED_TYPES:
            return cls(plain, judge, None)
        name = args.caption_model or args.model
        if name == args.model and args.caption_base_url is None:
            return cls(plain, judge, Captioner(client=plain, name=name))
        chosen = argparse.Namespace(api_key_env=None, base_url=args.caption_base_url)
        other = model_client(chosen, name, limiter=RateLimiter(), max_connections=pool)
        return cls(plain, judge, Captioner(client=other, name=name))

    async def aclose(self) -> None:
        for client in {id(c): c for c in self._all()}.values():
            if isinstance(client, HttpModelClient):
                await client.aclose()

    def _all(self) -> list[ModelClient]:
        captions = [] if self.captioner is None else [self.captioner.client]
        return [self.plain, self.judge.client, *captions]


def judge_command(args: argparse.Namespace, out: TextIO) -> int:
    """`judge RESULT_DIR`: a line per folder, the summary; status 1 when a folder failed."""
    settings = _settings(args)
    root = Path(args.result_dir)
    if not root.is_dir():
        raise UsageError(f"{root} is not a directory of result folders")
    compare = None if args.compare is None else JudgmentSpec.parse(args.compare)
    if compare is not None and str(compare) not in judgment_specs(root):
        raise UsageError(f"--compare {compare}: {root} holds no such judgments")
    clients = _Clients.of(args)

    async def run() -> JudgeReport:
        try:
            return await ajudge_tree(
                root,
                clients.judge,
                captioner=clients.captioner,
                settings=settings,
                report=lambda outcome: line(out, outcome.line()),
            )
        finally:
            await clients.aclose()

    report = asyncio.run(run())
    out.write(printable(report.summary.table(), keep="\n"))  # domains are folder names
    if compare is not None:
        out.write(tree_agreement(root, compare, settings.spec(clients.judge)).table())
    return 1 if report.summary.count("failed") else 0


__all__ = ["add_agreement_command", "add_judge_command"]
