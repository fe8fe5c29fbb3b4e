"""One step and one episode as values, and the one seam every recorder implements.

`PromptAgent.step` returns a `StepRecord`; the episode loop
(`adapters.runs.episode`) hands it to a `Recorder`, then each executed action
as an `ActionRecord`, then how the episode ended as an `EpisodeEnd`. A recorder
reads only what it is handed: our JSONL trajectory (`TrajectoryRecorder`) and
the OS-Harm / OSWorld result folder (`ResultWriter`) are the two that ship.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from datetime import datetime
from typing import Any, Protocol, runtime_checkable

import attrs

from adapters.contract import ModelResponse
from osharm_core import Action, AgentConfig, CoordinateFrame, Mask, StoredAction, thaw
from osharm_core.accessibility import tree_text
from osharm_core.errors import AccessibilityTreeError
from osharm_core.limits import Degradation
from osharm_core.observation import PNG_SIGNATURE, Observation
from osharm_core.safety import SafetyEvent, reply_events
from osharm_core.step import LinearizedTree, StepRequest


@attrs.frozen(kw_only=True)
class StepRecord:
    """One finished step of an agent: what it saw and sent, what came back, what it cost.

    `observation` is what the environment gave (the PNG screenshot as bytes, the
    XML tree as text); `request` what the step sent (its messages, the processed
    observation stored in the history, the set-of-marks boxes, the coordinate
    frame and what was cut to fit a server profile; `None` for an agent of your
    own that gives only a reply, see `StepRecord.of_reply`); `response` the model's
    reply with its usage and tries; `actions` the parsed actions as the state stores
    them (`None`: the reply could not be parsed). `history` is how many turns the
    agent's trajectory held before this step (`None`: not known). `reply_frame` is
    the frame the reply was read in when it was not the request's (a replayed reply
    recorded under other scaling); `dropped_actions` how many code actions past the
    per-reply limit were left out. `cost_usd` is the step's price (`None`: unknown),
    `budget_exceeded` the cap this step reached, if any. `latency` is the model
    call's seconds, `started` when the step began (UTC; `None`: not known).
    `safety_events` are the step's `SafetyEvent`s: what the reply carried by itself (a
    provider's safety check or refusal, a refusal in its words, an empty reply; see
    `reply_events`), then what the episode loop's screens and monitor said of its actions.
    """

    instruction: str
    config: AgentConfig
    observation: Observation = attrs.field(factory=Observation, repr=False)
    request: StepRequest | None = attrs.field(default=None, repr=False)
    response: ModelResponse
    actions: tuple[Action | StoredAction, ...] | None
    history: int | None = None
    latency: float = 0.0
    started: datetime | None = None
    reply_frame: CoordinateFrame | None = None
    dropped_actions: int = 0
    cost_usd: float | None = None
    budget_exceeded: str | None = None
    safety_events: tuple[SafetyEvent, ...] = ()

    @classmethod
    def of_reply(
        cls,
        instruction: str,
        config: AgentConfig,
        observation: Observation,
        text: str,
        actions: list[Action] | tuple[Action, ...] | None,
        *,
        history: int | None = None,
        step: int | None = None,
    ) -> StepRecord:
        """The record of a step by an agent that gives only `(reply, actions)`, as OSWorld's
        agents do: nothing is known of its request, usage or cost; its safety events are
        what the reply's text shows (a refusal in its words, an empty reply), numbered
        `step` (default: the step after `history`)."""
        return cls(
            instruction=instruction,
            config=config,
            observation=observation,
            response=ModelResponse(text=text, model=config.model),
            actions=None if actions is None else tuple(actions),
            history=history,
            safety_events=reply_events(step or (history or 0) + 1, text, by=config.model),
        )

    @property
    def text(self) -> str:
        """The model's reply."""
        return self.response.text

    @property
    def plain_actions(self) -> list[Action] | None:
        """The actions as fresh plain values (dicts and lists), as `predict` returns them."""
        return None if self.actions is None else [thaw(a) for a in self.actions]

    @property
    def prepaid(self) -> bool:
        """Whether the reply was replayed from a recording (a fork's or a continued task's
        prefix), paid for by the run that recorded it."""
        return self.response.prepaid is True

    @property
    def screenshot(self) -> bytes | None:
        """The PNG the environment gave (`None`: none)."""
        return self.observation.screenshot

    @property
    def accessibility_tree(self) -> str | None:
        """The XML tree the environment gave (`None`: none)."""
        tree = self.observation.accessibility_tree
        return tree if isinstance(tree, str) else None

    @property
    def som_screenshot(self) -> bytes | None:
        """The tagged PNG sent for `som` (`None` for the other observation types)."""
        if self.request is None or self.config.observation_type != "som":
            return None
        tagged = self.request.observation.screenshot
        return base64.b64decode(tagged) if tagged else None

    @property
    def masks(self) -> tuple[Mask, ...] | None:
        """The set-of-marks boxes `tag_N` refers to (`None`: none)."""
        return None if self.request is None else self.request.masks

    @property
    def frame(self) -> CoordinateFrame | None:
        """The frame of a scaled screenshot (`None`: screen pixels)."""
        return None if self.request is None else self.request.observation.frame

    @property
    def degradation(self) -> Degradation | None:
        """What was cut from the request to fit its server profile (`None`: nothing)."""
        return None if self.request is None else self.request.observation.degradation

    @property
    def linearized(self) -> LinearizedTree | None:
        """The observation's whole linearized tree, when the step made it."""
        return None if self.request is None else self.request.linearized


@attrs.frozen(kw_only=True)
class ActionRecord:
    """One action the environment executed, and what it gave back.

    `step` is the model step the action belongs to (from 1), `started` when it began
    (local time, taken before it was executed, as the reference stamps actions). `action`
    is `None` when no action ran and the desktop moved on by itself (a paced replay's turn
    that executed nothing): then only `observation` and `started` mean anything.
    """

    step: int
    action: Action | None
    observation: Mapping[str, Any] = attrs.field(repr=False)
    started: datetime = attrs.field(factory=datetime.now)
    reward: float = 0.0
    done: bool = False
    info: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class EpisodeEnd:
    """How an episode ended: its score (`None`: nothing scored it), whether a budget cap ended
    it early (`budget_exceeded`, the reason), or why it failed (`failed`, the error's text)."""

    score: float | None = None
    budget_exceeded: str | None = None
    failed: str | None = None


@runtime_checkable
class StepRecipient(Protocol):
    """Anything that takes finished steps: what `PromptAgent(recorder=...)` accepts."""

    def step(self, record: StepRecord) -> object:
        """Keep one step."""
        ...


class Recorder(StepRecipient, Protocol):
    """Records one episode: `begin` with the first observation, `step` after every model
    call, `action` after every executed action, `finish` once at the end."""

    def begin(self, observation: Mapping[str, Any]) -> None:
        """The episode starts on `observation`."""
        ...

    def action(self, record: ActionRecord) -> None:
        """The environment executed one action (or moved on by itself)."""
        ...

    def finish(self, end: EpisodeEnd) -> None:
        """The episode ended."""
        ...


def part_bytes(value: object) -> bytes | None:
    """A bytes-like observation part (bytes, bytearray, memoryview) as bytes; else `None`."""
    if not isinstance(value, bytes | bytearray | memoryview):
        return None
    try:
        return bytes(value)
    except ValueError:  # a released memoryview: nothing left to read
        return None


def tree_part(value: object) -> str | bytes | None:
    """An observation's tree as the text the agent read: a str as given, bytes-like decoded as
    their BOM or XML declaration says (`tree_text`); bytes no encoding reads stay raw bytes
    (the agent refuses them, the folder keeps what the environment gave)."""
    if isinstance(value, str):
        return value
    data = part_bytes(value)
    if data is None:
        return None
    try:
        return tree_text(data)
    except AccessibilityTreeError:
        return data


def raw_observation(obs: Mapping[str, Any] | Observation) -> Observation:
    """What the environment gave, for a recorder: its PNG screenshot as bytes and its XML tree
    as text, from a dict in any form `Observation.from_dict` takes or from an `Observation`
    built by hand (whose tree may still be bytes, a memoryview or UTF-16). A part a step could
    not have read is left out, so a recorder always gets `bytes | None` and `str | None`."""
    if isinstance(obs, Observation):
        shot: object = obs.screenshot
        tree: object = obs.accessibility_tree
    else:
        shot, tree = obs.get("screenshot"), obs.get("accessibility_tree")
    png, text = part_bytes(shot), tree_part(tree)
    return Observation(
        screenshot=png if png is not None and png.startswith(PNG_SIGNATURE) else None,
        accessibility_tree=text if isinstance(text, str) else None,
    )
