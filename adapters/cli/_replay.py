"""`osharm-agent replay`: today's parsers over a recorded trajectory's replies, and where they differ."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any, TextIO

from adapters._wire import json_for_terminal, printable
from adapters.errors import TrajectoryError
from adapters.trajectories.jsonl import TrajectoryEntry, open_trajectory
from osharm_core import AgentConfig
from osharm_core.step import parse_reply

#: A step's row: its entry, the actions parsed now, and whether they are the recorded ones
#: (`None`: they cannot be compared).
_Row = tuple[TrajectoryEntry, list[Any] | None, bool | None]


def add_command(commands: Any, formatter: type[argparse.HelpFormatter]) -> None:
    """The `replay` subcommand."""
    replay = commands.add_parser(
        "replay", help="re-parse a recorded trajectory", formatter_class=formatter
    )
    replay.description = (
        "Run today's parsers over the replies of a recorded trajectory and report the steps "
        "whose actions differ from the recorded ones (exit status 1 when any differ)."
    )
    replay.add_argument(
        "trajectory", help="a trajectory.jsonl, the directory holding it, or a result folder"
    )
    replay.add_argument("--json", action="store_true", help="print one JSON object")
    replay.set_defaults(handler=replay_command)


def _normalized(actions: Sequence[Any] | None) -> str:
    return json.dumps(None if actions is None else list(actions), sort_keys=True)


def _row(entry: TrajectoryEntry) -> _Row:
    try:
        config = AgentConfig(
            model=entry.model or "gpt-4o",
            observation_type=entry.observation_type,  # type: ignore[arg-type]
            action_space=entry.action_space,  # type: ignore[arg-type]
            platform=entry.platform,  # type: ignore[arg-type]
        )
    except ValueError as exc:
        raise TrajectoryError(f"step {entry.step}: {exc}") from None
    if not entry.response_recorded:  # a plain OSWorld folder: another agent parsed its replies
        return entry, None, None
    if config.observation_type == "som" and entry.masks is None:
        # A folder the reference wrote keeps no boxes: tag_N cannot be read as it was.
        return entry, None, None
    now = parse_reply(config, entry.response, entry.masks, entry.read_frame)
    return entry, now, _normalized(entry.actions) == _normalized(now)


def replay_command(args: argparse.Namespace, out: TextIO) -> int:
    """`replay`: each step's recorded actions against today's parse of its reply."""
    loaded = open_trajectory(args.trajectory)
    rows = [_row(entry) for entry in loaded.entries]
    differ = sum(1 for *_, same in rows if same is False)
    apart = [e.step for e, _, same in rows if same is None]
    if args.json:
        report = {
            "steps": len(rows),
            "differ": differ,
            "torn_tail": loaded.torn_tail,
            "differences": [
                {"step": e.step, "recorded": e.actions, "now": now}
                for e, now, same in rows
                if same is False
            ],
            **({"not_comparable": apart} if apart else {}),
        }
        out.write(json_for_terminal(report) + "\n")
        return 1 if differ else 0
    for entry, now, same in rows:
        out.write(_row_text(entry, now, same))
    if loaded.torn_tail is not None:
        out.write(f"note: {printable(loaded.torn_tail)}\n")
    note = f", {len(apart)} not comparable" if apart else ""
    out.write(f"{len(rows)} step(s) replayed, {differ} differ{note}\n")
    return 1 if differ else 0


def _row_text(entry: TrajectoryEntry, now: list[Any] | None, same: bool | None) -> str:
    if same is None and not entry.response_recorded:
        return (
            f"step {entry.step}: not comparable (a plain OSWorld folder: its actions were "
            "parsed by the agent that ran)\n"
        )
    if same is None:
        return (
            f"step {entry.step}: not comparable (set-of-marks, and the recording kept "
            "no mark boxes to read tag_N with)\n"
        )
    if same:
        count = "unparsable" if now is None else f"{len(now)} action(s)"
        return f"step {entry.step}: same ({count})\n"
    return (
        f"step {entry.step}: DIFFERS\n  recorded: {_normalized(entry.actions)}\n"
        f"  now:      {_normalized(now)}\n"
    )
