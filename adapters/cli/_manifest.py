"""The run manifest from the shell: `--allow-mixed`, and the manifest `run` and `run-tasks` hand
to the runner (see `adapters.runs.manifest`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from adapters.cli._inputs import ModelClients
from adapters.cli._output import PROG
from adapters.runs.manifest import RunManifest
from osharm_core import AgentConfig, OsharmError


def add_manifest_option(parser: argparse.ArgumentParser) -> None:
    """`--allow-mixed`: add to a tree whose manifest records another configuration."""
    parser.add_argument(
        "--allow-mixed",
        action="store_true",
        help="write into an --out whose manifest.json records a run with another "
        "configuration or other system prompts (refused by default; the manifest records it)",
    )


def command_manifest(
    args: argparse.Namespace, config: AgentConfig, root: str | Path, layout: str
) -> RunManifest:
    """The manifest of the command `args` parsed: its configuration, model, base URL's host and
    command line (its secrets taken out), to be kept at `root`."""
    words = vars(args).get("command_line") or [PROG, *sys.argv[1:]]
    return RunManifest.describe(
        config,
        root=root,
        layout=layout,
        command=words,
        base_url=vars(args).get("base_url") or _default_base_url(args),
        allow_mixed=bool(vars(args).get("allow_mixed")),
    )


def _default_base_url(args: argparse.Namespace) -> str | None:
    """The base URL the model's client uses when --base-url is not given (its provider's
    default, or its environment variable's); `None` when the client has none (a replay) or
    cannot be built yet (the run then says why)."""
    clients = ModelClients(args)
    try:
        client = clients.get()
    except OsharmError:
        return None
    try:
        url = getattr(getattr(client, "provider", None), "base_url", None)
        return url if isinstance(url, str) else None
    finally:
        clients.close()
