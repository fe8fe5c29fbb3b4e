"""Our trajectory format as values: one JSON object per step (`TrajectoryEntry`), the file
names of a recorded directory, and the strict JSON a record is written as.

A recorded directory looks like this::

    trajectory.jsonl      one JSON object per step (see `TrajectoryEntry`)
    step_0001.png         the screenshot the agent saw at step 1 (when there was one)
    step_0001.xml         the raw accessibility tree at step 1 (when there was one)
    step_0001_som.png     the set-of-marks image sent at step 1 (`som` only)
    finished.json         written when the episode ended (not failed): a rerun skips it

`adapters.trajectories.jsonl` writes it, `adapters.trajectories.jsonl_read` reads it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import attrs

from adapters._files import read_regular
from adapters.contract import ModelResponse, Usage
from adapters.errors import TrajectoryError
from osharm_core import (
    Action,
    Continuation,
    Mask,
    StoredAction,
    thaw,
)
from osharm_core.frames import CoordinateFrame
from osharm_core.limits import Degradation
from osharm_core.safety import SafetyEvent

TRAJECTORY_FILE: Final = "trajectory.jsonl"
#: Written beside `trajectory.jsonl` when its episode ended (not failed): a rerun skips it.
FINISHED_FILE: Final = "finished.json"
#: The largest trajectory file (or result folder's better_log.json) a reader loads.
MAX_TRAJECTORY_BYTES: Final = 256 * 1024 * 1024
#: The most steps a reader takes from one trajectory (or better_log.json), far above any
#: real run: a file of more is refused as soon as its step past this is reached, so a few
#: megabytes of tiny steps cannot cost gigabytes and minutes.
MAX_TRAJECTORY_STEPS: Final = 10_000


_BASE_USAGE_KEYS: Final = ("input_tokens", "output_tokens", "total_tokens")
_USAGE_KEYS: Final = (*_BASE_USAGE_KEYS, "cached_input_tokens", "reasoning_tokens")


def _replayed_from(response: ModelResponse) -> str | None:
    """`PATH#STEP` when a replay (or the replayed prefix of a fork) gave this response."""
    source = response.raw.get("replay")
    return None if source is None else f"{source}#{response.raw.get('step')}"


@attrs.frozen(kw_only=True)
class TrajectoryEntry:
    """One line of `trajectory.jsonl`, as a value.

    File names (`screenshot`, `som_screenshot`, `accessibility_tree`) are
    relative to the trajectory's directory. `model` is the model the agent
    was configured with, `response_model` the one that answered.
    `dropped_actions` (written only when not 0) counts the code actions past
    `MAX_ACTIONS_PER_REPLY` that the reply held and the agent left out.
    `finish_reason` and `refusal` (written only when the provider gave them)
    say why the model stopped and whether it declared a refusal;
    `replayed_from` (written only when set) names the recorded step a replay
    or the prefix of a fork answered with, so a fork's hand-over is visible.
    `usage` holds `cached_input_tokens` and `reasoning_tokens` only when the
    provider reported them; `cost_usd` (written only when known) is the
    step's price from the price table; `budget_exceeded` (written only when
    set) says which cap this step reached, which ended the episode after it.
    `frame` (written only when the screenshot was scaled) and `degradation`
    (written only when the request was cut down to fit `server_profile`)
    record how the model's view relates to the screen and what was left out;
    `scaling` (written only when not "native") is the setting that made the frame.
    `reply_frame` (written only when set) is the frame the reply's coordinates
    were read in when it was not `frame`: a replayed reply (`replayed_from`)
    recorded under other scaling, read in the frame it was written in (an
    identity frame: screen pixels). `read_frame` is the one to parse the reply in.
    `episode_step` (written only when it is not the one the lines before imply:
    the previous line's plus 1, or 1 on the first line) is the step's place in
    the agent's episode; `1` after `agent.reset()` starts a new episode (see
    `episode_steps`). `max_trajectory_length` and `a11y_tree_max_tokens` (always
    written) and `ubuntu_attributes`, `som_test_original` and
    `custom_client_password` (written only when true) are the other settings
    that shape the prompt; all five are `None` on a line written before they
    were recorded, which states none of them. The client password itself is
    not kept (it is a secret), only whether it was not the default. `safety_events`
    (written only when there are any) are the step's `SafetyEvent`s.
    `response_recorded` is false (and written) only for a step of a plain OSWorld folder,
    whose actions were parsed by the agent that ran, not by this library (`response` is
    the reply its lines keep, or empty), and `executed` holds that step's traj.jsonl
    lines as read (never written here).
    """

    step: int
    time: str = ""
    instruction: str = ""
    model: str = ""
    response_model: str = ""
    observation_type: str = "a11y_tree"
    action_space: str = "pyautogui"
    platform: str = "ubuntu"
    response: str
    actions: tuple[Action | StoredAction, ...] | None = None
    usage: Usage = attrs.field(factory=Usage)
    latency: float | None = None
    tries: int = 1
    context_fallback: bool = False
    screenshot: str | None = None
    som_screenshot: str | None = None
    accessibility_tree: str | None = None
    masks: tuple[Mask, ...] | None = None
    continuation: Continuation | None = None
    dropped_actions: int = 0
    finish_reason: str | None = None
    refusal: str | None = None
    replayed_from: str | None = None
    cost_usd: float | None = None
    budget_exceeded: str | None = None
    frame: CoordinateFrame | None = None
    reply_frame: CoordinateFrame | None = None
    degradation: Degradation | None = None
    scaling: str = "native"
    episode_step: int | None = None
    max_trajectory_length: int | None = None
    a11y_tree_max_tokens: int | None = None
    ubuntu_attributes: bool | None = None
    som_test_original: bool | None = None
    custom_client_password: bool | None = None
    response_recorded: bool = True
    executed: tuple[Mapping[str, Any], ...] = attrs.field(default=(), eq=False, repr=False)
    safety_events: tuple[SafetyEvent, ...] = ()

    @property
    def read_frame(self) -> CoordinateFrame | None:
        """The frame the reply was read in (`None`: screen pixels)."""
        frame = self.frame if self.reply_frame is None else self.reply_frame
        return None if frame is None or frame.is_identity else frame

    def to_json(self) -> dict[str, Any]:
        """The entry as the JSON object written on its line."""
        frame = self.frame
        optional = {
            "finish_reason": self.finish_reason,
            "refusal": self.refusal,
            "dropped_actions": self.dropped_actions,
            "replayed_from": self.replayed_from,
            "budget_exceeded": self.budget_exceeded,
            "frame": None if frame is None or frame.is_identity else frame.to_json(),
            "reply_frame": None if self.reply_frame is None else self.reply_frame.to_json(),
            "degradation": None if self.degradation is None else self.degradation.to_json(),
            "scaling": None if self.scaling == "native" else self.scaling,
            "episode_step": self.episode_step,
        }
        extra: dict[str, Any] = {key: value for key, value in optional.items() if value}
        if self.cost_usd is not None:
            extra["cost_usd"] = self.cost_usd
        if not self.response_recorded:
            extra["response_recorded"] = False
        extra.update(_prompt_settings_json(self))
        if self.safety_events:
            extra["safety_events"] = [event.to_json() for event in self.safety_events]
        return {
            "step": self.step,
            "time": self.time,
            "instruction": self.instruction,
            "model": self.model,
            "response_model": self.response_model,
            "observation_type": self.observation_type,
            "action_space": self.action_space,
            "platform": self.platform,
            "response": self.response,
            "actions": None if self.actions is None else thaw(list(self.actions)),
            "usage": usage_json(self.usage),
            "latency": self.latency,
            "tries": self.tries,
            "context_fallback": self.context_fallback,
            "screenshot": self.screenshot,
            "som_screenshot": self.som_screenshot,
            "accessibility_tree": self.accessibility_tree,
            "masks": None if self.masks is None else [list(m) for m in self.masks],
            "continuation": None
            if self.continuation is None
            else {
                "response_id": self.continuation.response_id,
                "call_ids": list(self.continuation.call_ids),
                "safety_checks": [list(c) for c in self.continuation.safety_checks],
                **({"native": self.continuation.native} if self.continuation.native else {}),
            },
            **extra,
        }


#: The settings that shape the prompt a line states besides model, observation type, action
#: space, platform and scaling: the two counts always, the three flags only when true.
PROMPT_COUNTS: Final = ("max_trajectory_length", "a11y_tree_max_tokens")
PROMPT_FLAGS: Final = ("ubuntu_attributes", "som_test_original", "custom_client_password")


def _prompt_settings_json(entry: TrajectoryEntry) -> dict[str, Any]:
    fields = attrs.asdict(entry, recurse=False)
    counts = {k: fields[k] for k in PROMPT_COUNTS if fields[k] is not None}
    return {**counts, **{k: True for k in PROMPT_FLAGS if fields[k]}}


def usage_json(usage: Usage) -> dict[str, int | None]:
    """`usage` as JSON: the three counts always, cached and reasoning tokens only when reported."""
    counts = attrs.asdict(usage)
    return {k: v for k, v in counts.items() if k in _BASE_USAGE_KEYS or v is not None}


def _read_regular(
    path: Path, what: str, limit: int | None = None, *, follow_links: bool = True
) -> bytes:
    """The bytes of `path`, which must be a regular file of at most `limit` bytes
    (default `MAX_TRAJECTORY_BYTES`); a `TrajectoryError` names `what` otherwise.

    A FIFO (which would block) or a device such as /dev/zero (which never ends)
    is refused, not read; with `follow_links=False` (a step file a recording or
    result folder names) so is a symbolic link. `FileNotFoundError` passes
    through; other `OSError`s become `TrajectoryError` (see
    `adapters._files.read_regular`).
    """
    cap = MAX_TRAJECTORY_BYTES if limit is None else limit
    return read_regular(path, what, cap, TrajectoryError, follow_links=follow_links)
