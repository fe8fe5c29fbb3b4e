"""The safety options `run` and `run-tasks` share: the action screen, the policy on a flag,
and a monitor model; and the `Screening` they describe."""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from adapters.cli._inputs import _base_url, model_client
from adapters.errors import UsageError
from adapters.runs.screening import ON_FLAG, Screening
from adapters.safety.monitor import Monitor
from osharm_core import RuleScreen
from osharm_core.safety import SafetyTally, Screen


def add_safety_options(parser: argparse.ArgumentParser) -> None:
    """--screen, --on-flag, --monitor (and the monitor's own --monitor-base-url and
    --monitor-api-key-env)."""
    group = parser.add_argument_group(
        "safety (docs/safety.md): each step's actions are screened before any runs, and what "
        "was found is recorded with the step"
    )
    group.add_argument(
        "--screen",
        default="none",
        metavar="SCREEN",
        help="rules: the shipped rule screen (destructive shell commands, credential files, "
        "uploads to hosts the task does not name, ...); none; or MODULE:FUNCTION, a screen of "
        "your own (config, state, observation, actions) -> one Verdict per action",
    )
    group.add_argument(
        "--on-flag",
        choices=ON_FLAG,
        default="record",
        help="record: the flagged action runs all the same (benchmark numbers stay comparable); "
        "block: it and the rest of its step do not run, the episode goes on; end: they do not "
        "run and the episode ends",
    )
    group.add_argument(
        "--monitor",
        metavar="MODEL",
        help="also ask this model to judge each step's actions (its cost counts in the run's "
        "usage and caps); its key comes from its provider's usual variable",
    )
    group.add_argument(
        "--monitor-base-url", type=_base_url, metavar="URL", help="the monitor model's API base URL"
    )
    group.add_argument(
        "--monitor-api-key-env",
        metavar="VAR",
        help="the environment variable holding the monitor model's API key",
    )


def _load(spec: str) -> Screen:
    """The screen `MODULE:FUNCTION` names, imported; a `UsageError` says what is wrong."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UsageError(f"--screen takes rules, none or MODULE:FUNCTION; got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--screen {spec}: cannot import {module_name}: {exc}") from None
    screen = vars(module).get(attribute)
    if not callable(screen):
        raise UsageError(f"--screen {spec}: {module_name} has no function {attribute}")
    return screen  # type: ignore[no-any-return]


def screening(args: argparse.Namespace) -> Screening | None:
    """The `Screening` the safety options describe (`None`: no screen, no monitor)."""
    spec: str = args.screen
    screen: Any = None
    if spec == "rules":
        screen = RuleScreen()
    elif spec != "none":
        screen = _load(spec)
    monitor = None if args.monitor is None else Monitor(args.monitor, client=_monitor_client(args))
    if screen is None and monitor is None:
        if args.on_flag != "record":
            raise UsageError(f"--on-flag {args.on_flag} needs --screen or --monitor")
        return None
    return Screening(screen=screen, name=spec, monitor=monitor, on_flag=args.on_flag)


def _monitor_client(args: argparse.Namespace) -> Any:
    """The monitor's client, made now so a missing key is reported before anything runs."""
    own = argparse.Namespace(base_url=args.monitor_base_url, api_key_env=args.monitor_api_key_env)
    return model_client(own, args.monitor)


def safety_line(tally: SafetyTally) -> str:
    """The safety part of a summary line: `; safety events N: ...` when there were any."""
    return f"; safety events {tally.describe()}" if tally.total else ""
