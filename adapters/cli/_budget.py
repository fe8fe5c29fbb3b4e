"""The `run` command's usage and cost options: caps per episode and per run, and the price table."""

from __future__ import annotations

import argparse
import json

from adapters.accounting.budget import Budget
from adapters.accounting.cost import UsageTotals
from adapters.accounting.prices import load_prices
from adapters.errors import UsageError
from osharm_core import ConfigError


def add_budget_options(parser: argparse.ArgumentParser) -> None:
    """--max-episode-tokens/-cost, --max-run-tokens/-cost and --prices."""
    group = parser.add_argument_group(
        "usage and cost (caps are checked after each response; the step that reaches one is "
        "completed and recorded, then no further request is sent)"
    )
    group.add_argument("--max-episode-tokens", type=int, metavar="N", help="token cap per episode")
    group.add_argument("--max-episode-cost", type=float, metavar="USD", help="USD cap per episode")
    group.add_argument(
        "--max-run-tokens",
        type=int,
        metavar="N",
        help="token cap for this invocation's run (what earlier runs spent is not counted)",
    )
    group.add_argument(
        "--max-run-cost",
        type=float,
        metavar="USD",
        help="USD cap for this invocation's run (what earlier runs spent is not counted)",
    )
    group.add_argument(
        "--prices",
        metavar="JSON",
        help="a price table in the format of adapters/accounting/prices.json; its entries "
        "replace or add to the shipped ones",
    )


def run_budget(args: argparse.Namespace, model: str) -> Budget:
    """The run's `Budget`; `UsageError` for a bad cap, an unreadable price file, or a dollar cap on an unpriced model."""
    try:
        budget = Budget(
            max_episode_tokens=args.max_episode_tokens,
            max_episode_cost=args.max_episode_cost,
            max_run_tokens=args.max_run_tokens,
            max_run_cost=args.max_run_cost,
            prices=load_prices(args.prices),
        )
    except ConfigError as exc:
        message = str(exc).replace("max_", "--max-").replace("_tokens", "-tokens")
        raise UsageError(message.replace("_cost", "-cost")) from None
    if budget.caps_cost and budget.prices.lookup(model) is None:
        raise UsageError(
            f"a dollar cap needs a price for {model!r}, and the price table "
            f"({budget.prices.version}) has none: give --prices FILE with an entry whose "
            f'"model" is {json.dumps(model.strip())} (see adapters/accounting/prices.json)'
        )
    return budget


def usage_summary(totals: UsageTotals) -> str:
    """The usage part of a summary line: cached and reasoning tokens when any, and the cost when known."""
    parts = []
    if totals.cached_input_tokens:
        parts.append(f"cached {totals.cached_input_tokens}")
    if totals.reasoning_tokens:
        parts.append(f"reasoning {totals.reasoning_tokens}")
    cost = totals.cost_usd
    if cost is not None and totals.steps:
        parts.append(f"cost ${cost:.4f}")
    return "".join(f"; {part}" for part in parts)
