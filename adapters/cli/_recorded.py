"""`render --trajectory`: the configuration a recorded step is rebuilt with, and notes on the flags.

The recording's own settings win over the flags; a flag given with another
value is named on stderr as not used, and so are the settings an older
recording does not state (the flags' values, or the defaults, stand in for
them). The client password is never printed.
"""

from __future__ import annotations

import argparse
import functools
import sys
from typing import Final

import attrs

from adapters.cli._inputs import add_agent_options, add_model_options, agent_config
from adapters.errors import UsageError
from adapters.trajectories.rebuild import Recording
from osharm_core import AgentConfig, ConfigError

#: The `AgentConfig` fields that shape the prompt and have a `render` flag.
FLAGS: Final = {
    "model": "--model",
    "observation_type": "--observation-type",
    "action_space": "--action-space",
    "platform": "--platform",
    "max_trajectory_length": "--max-trajectory-length",
    "a11y_tree_max_tokens": "--a11y-tree-max-tokens",
    "scaling": "--scaling",
    "client_password": "--client-password",
    "ubuntu_attributes": "--ubuntu-attributes",
    "som_test_original": "--som-test-original",
}


@functools.cache
def _flag_defaults() -> dict[str, object]:
    """Each flag's default, read from the option groups themselves."""
    parser = argparse.ArgumentParser(add_help=False)
    add_agent_options(parser)
    add_model_options(parser, client=False)
    return {name: parser.get_default(name) for name in FLAGS}


def recorded_config(args: argparse.Namespace, recording: Recording, prog: str) -> AgentConfig:
    """The flags' `AgentConfig` with the recording's settings over it; notes go to stderr."""
    try:
        config = attrs.evolve(agent_config(args), **recording.settings)
    except ConfigError as exc:
        raise UsageError(f"{args.trajectory}: {exc}") from None
    for note in _notes(args, recording):
        print(f"{prog}: note: {note}", file=sys.stderr)
    return config


def _notes(args: argparse.Namespace, recording: Recording) -> list[str]:
    notes = []
    defaults = _flag_defaults()
    for name, flag in FLAGS.items():
        given = getattr(args, name, defaults[name])
        if given == defaults[name]:
            continue
        if name in recording.withheld:
            notes.append(
                f"the recording does not keep the run's client password (only that it was not "
                f"the default): the prompt shows the one {flag} gives, which cannot be checked"
            )
        elif name not in recording.settings or recording.settings[name] == given:
            continue
        elif name == "client_password":
            notes.append(
                f"the recording says the run used the default client password; {flag} is not used"
            )
        else:
            stated = recording.settings[name]
            notes.append(f"the recording says {name} {stated!r}; {flag} is not used")
    if args.instruction is not None and any(
        entry.instruction != args.instruction for entry in recording.entries
    ):
        notes.append("each step's instruction is the recording's; --instruction is not used")
    if recording.unstated:
        notes.append(
            f"the recording does not state {', '.join(recording.unstated)} (an older recording): "
            "the flags' values or the defaults are used, and a step whose rebuilt size does not "
            "match a recorded cut is refused"
        )
    return notes
