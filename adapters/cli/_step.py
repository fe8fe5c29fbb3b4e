"""`osharm-agent predict` and `render`: one step on one observation, asked or only shown."""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from adapters._wire import json_for_terminal
from adapters.agent import PromptAgent
from adapters.cli._inputs import (
    ModelClients,
    add_agent_options,
    add_model_options,
    add_observation_options,
    agent_config,
    observation,
    path_option,
    task_instruction,
)
from adapters.cli._output import PROG, for_reader
from adapters.cli._recorded import recorded_config
from adapters.engine.server_limits import fit_request
from adapters.errors import UsageError
from adapters.trajectories.jsonl import usage_json
from adapters.trajectories.rebuild import load_recording, rebuild_step
from osharm_core import (
    AgentConfig,
    AgentState,
    ImagePart,
    Message,
    ObservationError,
    TextPart,
    render_openai_chat,
)
from osharm_core.observation import png_size
from osharm_core.step import StepRequest, prepare_step
from osharm_core.tokens import cl100k_encoding


def add_commands(commands: Any, formatter: type[argparse.HelpFormatter], models: str) -> None:
    """The `predict` and `render` subcommands."""
    predict = commands.add_parser(
        "predict", help="one step on one observation", epilog=models, formatter_class=formatter
    )
    predict.description = (
        "Ask the model for one step on an observation; print the reply and the actions."
    )
    add_observation_options(predict)
    add_agent_options(predict)
    add_model_options(predict)
    predict.add_argument("--json", action="store_true", help="print one JSON object")
    predict.set_defaults(handler=predict_command)

    render = commands.add_parser(
        "render", help="the exact messages one step would send", formatter_class=formatter
    )
    render.description = (
        "Print the messages one step would send (images as size and sha256), with cl100k "
        "token counts. Needs no key and no network."
    )
    add_observation_options(render)
    add_agent_options(render)
    add_model_options(render, client=False)
    render.add_argument(
        "--som-out", type=path_option, metavar="PNG", help="write the set-of-marks screenshot here"
    )
    render.add_argument("--json", action="store_true", help="print the wire-shape messages as JSON")
    render.add_argument(
        "--trajectory",
        metavar="PATH",
        help="rebuild a recorded step instead: a trajectory.jsonl, its directory, or an OS-Harm / "
        "OSWorld result folder (its model, observation type, action space, platform and scaling "
        "are used, and each step is cut down as recorded to fit a server profile; the history "
        "starts where the agent's episode did)",
    )
    render.add_argument(
        "--step", type=int, metavar="K", help="with --trajectory: the step (from 1; default 1)"
    )
    render.set_defaults(handler=render_command)


def _image_label(part: ImagePart) -> str:
    data = base64.b64decode(part.data)
    try:
        width, height = png_size(data)
        size = f"{width}x{height}, "
    except ObservationError:
        size = ""
    digest = hashlib.sha256(data).hexdigest()
    return f"<image {part.media_type}, {size}{len(data)} bytes, sha256 {digest}>"


def message_tokens(message: Message) -> int:
    """A message's text in cl100k tokens (images are not counted)."""
    return len(cl100k_encoding().encode(message.text, disallowed_special=()))


def _actions_text(actions: Sequence[Any] | None) -> str:
    if actions is None:
        return "(the reply could not be parsed: no actions)"
    if not actions:
        return "(no actions)"
    return "\n".join(a if isinstance(a, str) else json.dumps(a) for a in actions)


def predict_command(args: argparse.Namespace, out: TextIO) -> int:
    """`predict`: one model step on the observation; the reply and the actions."""
    config = agent_config(args)
    obs, directory = observation(args)
    instruction = task_instruction(args.instruction, directory)
    kept = ModelClients(args)
    try:
        record = PromptAgent.from_config(config, client=kept.get()).step(instruction, obs)
    finally:
        kept.close()
    actions = record.plain_actions
    if args.json:
        reply = {
            "response": record.text,
            "actions": actions,
            "model": record.response.model,
            "usage": usage_json(record.response.usage),
            "tries": record.response.tries,
            "context_fallback": record.response.context_fallback,
            "latency": round(record.latency, 6),
        }
        out.write(json_for_terminal(reply) + "\n")
        return 0
    out.write(for_reader(f"{record.text}\n--- actions ---\n{_actions_text(actions)}\n", out))
    return 0


def _recorded_step(args: argparse.Namespace) -> tuple[AgentConfig, StepRequest]:
    """`render --trajectory PATH --step K`: the recorded step's configuration and request."""
    if args.observation or args.screenshot or args.a11y:
        raise UsageError("give an observation or --trajectory PATH, not both")
    recording = load_recording(args.trajectory)
    config = recorded_config(args, recording, PROG)
    if args.server_profile is not None:
        print(
            f"{PROG}: note: each step is cut down as the recording says it was cut to fit its "
            "server profile; --server-profile is not used",
            file=sys.stderr,
        )
    step = 1 if args.step is None else args.step
    rebuilt = rebuild_step(recording, step, config)
    return rebuilt.config, rebuilt.request


def _som_note(args: argparse.Namespace, config: AgentConfig, step: StepRequest) -> str | None:
    """Where the set-of-marks screenshot went (written to --som-out, or not saved)."""
    if args.som_out and config.observation_type != "som":
        raise UsageError("--som-out writes the set-of-marks screenshot: use --observation-type som")
    if config.observation_type != "som":
        return None
    if not args.som_out:
        return "set-of-marks screenshot not saved (pass --som-out FILE to look at it)"
    Path(args.som_out).write_bytes(base64.b64decode(step.observation.screenshot or ""))
    return f"set-of-marks screenshot ({len(step.masks or ())} marks) written to {args.som_out}"


def render_command(args: argparse.Namespace, out: TextIO) -> int:
    """`render`: the messages a step would send, with token counts; no key, no network."""
    if args.step is not None and args.trajectory is None:
        raise UsageError("--step K picks a step of a recording: give --trajectory PATH")
    if args.trajectory is not None:
        config, step = _recorded_step(args)
    else:
        config = agent_config(args)
        obs, directory = observation(args)
        instruction = task_instruction(args.instruction, directory)
        step = prepare_step(config, AgentState(), instruction, obs)
        # As the agent sends it: cut down to fit --server-profile (sizes as an OpenAI chat body).
        step = fit_request(config, AgentState(), step, None)
    counts = [message_tokens(m) for m in step.messages]
    degradation = step.observation.degradation
    if degradation is not None:
        print(
            f"{PROG}: request cut down to fit --server-profile: "
            f"{json.dumps(degradation.to_json(), sort_keys=True)}",
            file=sys.stderr,
        )
    som_note = _som_note(args, config, step)
    if args.json:
        _render_json(step, config, counts, out)
    else:
        _render_text(step, counts, out)
    if som_note:
        print(som_note, file=sys.stderr if args.json else out)
    return 0


def _render_json(step: StepRequest, config: AgentConfig, counts: list[int], out: TextIO) -> None:
    wire = render_openai_chat(step.messages, config.model)
    labels = iter(_image_label(i) for m in step.messages for i in m.images)
    for wire_message in wire:
        for wire_part in wire_message["content"]:
            if wire_part.get("type") == "image_url":
                wire_part["image_url"]["url"] = next(labels)
            elif wire_part.get("type") == "input_image":
                wire_part["image_url"] = next(labels)
    rendered = {"messages": wire, "tokens": counts, "total_tokens": sum(counts)}
    out.write(json_for_terminal(rendered, indent=1) + "\n")


def _render_text(step: StepRequest, counts: list[int], out: TextIO) -> None:
    for number, (message, count) in enumerate(zip(step.messages, counts, strict=True), 1):
        out.write(f"=== [{number}] {message.role} ({count} tokens) ===\n")
        for part in message.parts:
            if isinstance(part, TextPart):
                out.write(for_reader(f"{part.text}\n", out))
            else:
                out.write(f"{_image_label(part)}\n")
    out.write(
        f"=== total: {sum(counts)} tokens in {len(counts)} messages "
        "(cl100k_base, text only; images are not counted) ===\n"
    )
