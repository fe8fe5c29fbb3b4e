"""One agent step as two pure functions: observation to messages, reply to actions."""

from __future__ import annotations

import base64
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Any, Final, cast

import attrs
from returns.result import Success

from osharm_core.accessibility import LinearizedTable, linearize_table
from osharm_core.config import SCREENSHOT_TYPES, TREE_TYPES, AgentConfig, Platform
from osharm_core.errors import ActionParseError, ConfigError, excerpt
from osharm_core.frames import CoordinateFrame
from osharm_core.marks import tag_screenshot
from osharm_core.messages import ImagePart, Message, TextPart
from osharm_core.observation import Observation, png_size
from osharm_core.parsing import (
    parse_actions_from_string,
    parse_code_from_som_string,
    parse_code_from_string,
    som_prefix,
    with_som_prefix,
)
from osharm_core.prompts import system_message
from osharm_core.reframe import (
    reframe_code,
    reframe_computer_13,
    reframe_linearized,
    table_rows,
)
from osharm_core.scaling import ScalingPreset, effective_scaling, resize_png, resolve_preset
from osharm_core.state import Action, AgentState, Continuation, Mask, ObservationRecord
from osharm_core.tokens import TokenSplit, cl100k_encoding, count_joined, trim_with_split

# The user-message wording is part of the reference's wire format, kept byte for byte.
_NEXT_STEP: Final = "What's the next step that you will do to help with the task?"
_SCREENSHOT_ONLY: Final = f"Given the screenshot as below. {_NEXT_STEP}"
_TAGGED_ONLY: Final = f"Given the tagged screenshot as below. {_NEXT_STEP}"
_WITH_TREE: Final = MappingProxyType(
    {
        "a11y_tree": "Given the info from accessibility tree as below:\n{}\n" + _NEXT_STEP,
        "screenshot_a11y_tree": (
            "Given the screenshot and info from accessibility tree as below:\n{}\n" + _NEXT_STEP
        ),
        "som": "Given the tagged screenshot and info from accessibility tree as below:\n{}\n"
        + _NEXT_STEP,
    }
)
_NO_VALID_ACTION: Final = "No valid action"


@attrs.frozen
class LinearizedTree:
    """An accessibility tree and its whole linearized table, before any scaling or trimming.

    `table` is `linearize_accessibility_tree(source, platform,
    ubuntu_attributes=ubuntu_attributes)`; a step keeps it so that whoever
    else needs the table of the same tree (the OS-Harm result folder) need
    not parse it again. `geometry` says where each row's position and size
    stand in it (`LinearizedTable.geometry`); `None` (a tree built by hand)
    has `in_frame` linearize `source` again to find them.
    """

    source: str = attrs.field(repr=False)
    platform: Platform
    ubuntu_attributes: bool
    table: str = attrs.field(repr=False)
    geometry: tuple[tuple[int, int, int], ...] | None = attrs.field(default=None, repr=False)

    @classmethod
    def of(cls, source: str, platform: Platform, *, ubuntu_attributes: bool) -> LinearizedTree:
        """`source` linearized, with where its rows' positions and sizes are."""
        table = linearize_table(source, platform, ubuntu_attributes=ubuntu_attributes)
        return cls(source, platform, ubuntu_attributes, table.text, table.geometry)

    @classmethod
    def of_table(
        cls, table: str, platform: Platform, *, ubuntu_attributes: bool = False
    ) -> LinearizedTree:
        """A table kept without its tree (a recording's linearized `a11y_tree`), so a step
        rebuilt from it maps and trims the whole table as the step sent did. Its rows are
        `table_rows`'s (every line ending in two pairs); `source` is the table itself.
        """
        return cls(table, platform, ubuntu_attributes, table, table_rows(table))

    def in_frame(self, frame: CoordinateFrame | None) -> str:
        """The table with each kept node's position and size in `frame`'s grid (`reframe_linearized`)."""
        if frame is None or frame.is_identity:
            return self.table
        if self.geometry is None:
            known = linearize_table(
                self.source, self.platform, ubuntu_attributes=self.ubuntu_attributes
            )
        else:
            known = LinearizedTable(self.table, self.geometry)
        return reframe_linearized(known, frame)

    def table_for(
        self, tree: object, platform: str, *, ubuntu_attributes: bool = False
    ) -> str | None:
        """The table when `tree` is this source text linearized the same way, else `None`."""
        if (
            platform != self.platform
            or ubuntu_attributes != self.ubuntu_attributes
            or not isinstance(tree, str)
            or (tree is not self.source and tree != self.source)
        ):
            return None
        return self.table


# A caller's lists are copied to tuples, so a request stays frozen (and hashable).
def _messages(value: Iterable[Message]) -> tuple[Message, ...]:
    try:
        messages = None if isinstance(value, str | bytes | Message) else tuple(value)
    except TypeError:  # not iterable
        messages = None
    if messages is None or not all(isinstance(m, Message) for m in messages):
        raise TypeError(f"StepRequest.messages must be a sequence of Message; got {_quoted(value)}")
    return messages


def _quoted(value: object) -> str:
    return f"{type(value).__name__} {excerpt(value)}"


def _masks(value: Iterable[Mask] | None) -> tuple[Mask, ...] | None:
    return None if value is None else tuple(value)


@attrs.frozen
class StepRequest:
    """What one step sends, and what it will remember.

    `messages` go to the model; `observation` is this turn's processed
    observation, stored in the history by `complete_step`; `masks` are the
    set-of-marks boxes (`som` only) that `tag_N` variables refer to.
    `linearized` is the observation's whole linearized tree (`None` when the
    observation type reads no tree, and for `som`; a recording's kept table
    as `LinearizedTree.of_table`); it is not compared.
    """

    messages: tuple[Message, ...] = attrs.field(converter=_messages)
    observation: ObservationRecord
    masks: tuple[Mask, ...] | None = attrs.field(default=None, converter=_masks)
    linearized: LinearizedTree | None = attrs.field(default=None, eq=False, repr=False)

    @property
    def frame(self) -> CoordinateFrame | None:
        """The frame the reply's coordinates are read in (`None`: screen pixels already)."""
        return self.observation.frame


def user_message(config: AgentConfig, record: ObservationRecord, *, current: bool) -> Message:
    """The user message that shows `record` (the current turn's, or a history turn's)."""
    return _user_message(config, record, current=current)


def _user_message(config: AgentConfig, record: ObservationRecord, *, current: bool) -> Message:
    kind = config.observation_type
    if kind == "screenshot":
        text = _SCREENSHOT_ONLY
    elif kind == "som" and not current:
        text = _TAGGED_ONLY
    else:
        text = _WITH_TREE[kind].format(record.accessibility_tree)
    parts: tuple[TextPart | ImagePart, ...] = (TextPart(text),)
    if kind in SCREENSHOT_TYPES:
        parts += (ImagePart(record.screenshot or ""),)
    return Message("user", parts)


def tree_text(config: AgentConfig, record: ObservationRecord, *, current: bool) -> str | None:
    """The text of `record`'s user message when it shows the tree (what `text_tokens` counts)."""
    kind = config.observation_type
    if kind not in _WITH_TREE or (kind == "som" and not current):
        return None
    return _WITH_TREE[kind].format(record.accessibility_tree)


def _remember_tokens(
    config: AgentConfig, record: ObservationRecord, split: TokenSplit | None
) -> None:
    """With a server profile, keep the tree text's token count on `record` when trimming gave it."""
    kind = config.observation_type
    if config.server_profile is None or split is None or record.accessibility_tree is None:
        return
    head, tail = _WITH_TREE[kind].split("{}")
    count = count_joined(head, record.accessibility_tree, split, tail, encoding=cl100k_encoding())
    if count is not None:
        record.text_tokens[kind] = count


def _history(config: AgentConfig, state: AgentState) -> list[Message]:
    start = max(len(state) - config.max_trajectory_length, 0)
    messages: list[Message] = []
    for record, thought in zip(state.observations[start:], state.thoughts[start:], strict=True):
        reply = thought.strip() if thought else _NO_VALID_ACTION
        messages.append(_user_message(config, record, current=False))
        messages.append(Message("assistant", (TextPart(reply),)))
    return messages


def _encode_png(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _scaled_frame(
    config: AgentConfig, observation: Observation
) -> tuple[ScalingPreset, CoordinateFrame] | None:
    """The preset and frame of a scaled screenshot; None when the model sees the screen as is."""
    scaling = effective_scaling(config.scaling, config.model)
    if scaling == "native" or observation.screenshot is None:
        return None
    preset = resolve_preset(scaling, config.model)
    frame = preset.frame_for(*png_size(observation.screenshot))
    return None if frame.is_identity else (preset, frame)


def _process(
    config: AgentConfig, observation: Observation
) -> tuple[ObservationRecord, tuple[Mask, ...] | None, LinearizedTree | None]:
    kind = config.observation_type
    scaled = _scaled_frame(config, observation) if kind in SCREENSHOT_TYPES else None
    frame = None if scaled is None else scaled[1]
    # from_dict has checked that the observation holds what its type needs.
    shot, source = cast(bytes, observation.screenshot), observation.accessibility_tree
    if kind == "som":
        marks = tag_screenshot(
            shot,
            cast(str, source),
            config.platform,
            test_original=config.som_test_original,
            size=None if frame is None else (frame.image_width, frame.image_height),
        )
        table, split = trim_with_split(marks.element_table, config.a11y_tree_max_tokens)
        record = ObservationRecord(_encode_png(marks.tagged_screenshot), table, frame)
        _remember_tokens(config, record, split)
        return record, marks.masks, None
    tree = split = linearized = None
    if kind in TREE_TYPES:
        linearized = LinearizedTree.of(
            cast(str, source), config.platform, ubuntu_attributes=config.ubuntu_attributes
        )
        tree, split = trim_with_split(linearized.in_frame(frame), config.a11y_tree_max_tokens)
    screenshot = None
    if kind in SCREENSHOT_TYPES:
        png = shot
        if frame is not None:
            png = resize_png(png, (frame.image_width, frame.image_height))
        screenshot = _encode_png(png)
    record = ObservationRecord(screenshot, tree, frame)
    if tree is not None:
        _remember_tokens(config, record, split)
    return record, None, linearized


def prepare_step(
    config: AgentConfig,
    state: AgentState,
    instruction: str,
    observation: Observation | Mapping[str, Any],
) -> StepRequest:
    """The messages for this step: system, the last turns of history, the current observation.

    `observation` may be an `Observation` or an OSWorld observation dict (checked
    with `Observation.from_dict`). Nothing in `state` is recomputed: history
    turns reuse their stored processed observations. An `instruction` that is not a
    string is a `ConfigError` (it would be written into the system prompt as `None`, and
    into a recording no reader takes).
    """
    if not isinstance(instruction, str):
        raise ConfigError(f"the instruction must be a string; got {_quoted(instruction)}")
    if not isinstance(observation, Observation):
        observation = Observation.from_dict(observation, config.observation_type)
    else:
        # Re-check: an Observation built by hand may lack what this type needs, or hold
        # what only from_dict converts (a tree as bytes).
        observation = Observation.from_dict(
            {
                "screenshot": observation.screenshot,
                "accessibility_tree": observation.accessibility_tree,
            },
            config.observation_type,
        )
    record, masks, linearized = _process(config, observation)
    return StepRequest(
        messages=step_messages(config, state, instruction, record),
        observation=record,
        masks=masks,
        linearized=linearized,
    )


def step_messages(
    config: AgentConfig, state: AgentState, instruction: str, record: ObservationRecord
) -> tuple[Message, ...]:
    """The messages of a step whose observation is already processed: system, history, `record`.

    `prepare_step` is this after processing the observation; call it directly
    to rebuild a step from what a recording kept (a linearized tree, a
    screenshot), as `adapters.trajectories.rebuild` does. The system message
    describes `record.frame`, the grid this step's reply is read in.
    """
    return (
        Message("system", (TextPart(system_message(config, instruction, record.frame)),)),
        *_history(config, state),
        _user_message(config, record, current=True),
    )


def parse_reply(
    config: AgentConfig,
    response_text: str,
    masks: tuple[Mask, ...] | None = None,
    frame: CoordinateFrame | None = None,
) -> list[Action] | None:
    """The actions in a reply under `config`'s action space, or None when none can be read.

    With a `frame`, coordinates are mapped from the model's grid to screen
    pixels (see `osharm_core.reframe`); `tag_N` centres are screen pixels
    already and are added after the mapping. A computer_13 `x` or `y` that
    frame cannot map (a string, say) makes the reply unparsable (None).
    """
    if config.action_space == "computer_13":
        result = parse_actions_from_string(response_text)
        if not isinstance(result, Success):
            return None
        actions: list[Action] = result.unwrap()
        if frame is None or frame.is_identity:
            return actions
        try:
            return [reframe_computer_13(a, frame) if isinstance(a, dict) else a for a in actions]
        except ActionParseError:  # a coordinate the frame cannot map: unparsable, like NaN
            return None
    if frame is None or frame.is_identity:
        if config.observation_type == "som":
            return list(parse_code_from_som_string(response_text, masks or ()))
        return list(parse_code_from_string(response_text))
    codes = [reframe_code(code, frame) for code in parse_code_from_string(response_text)]
    if config.observation_type == "som":
        codes = with_som_prefix(codes, som_prefix(masks or ()))
    return list(codes)


def complete_step(
    config: AgentConfig,
    state: AgentState,
    request: StepRequest,
    response_text: str,
    *,
    continuation: Continuation | None = None,
    reply_frame: CoordinateFrame | None = None,
) -> tuple[AgentState, list[Action] | None]:
    """Parse the reply and record the turn; returns the new state and the actions.

    The new state appends the step's observation, the actions (`None` when the
    reply could not be parsed; stored frozen, so the list returned is the
    caller's to change) and the thought (the raw reply, or `""` when it
    could not be parsed), so the three tuples keep the same length. `state` is
    not changed. `continuation` records where a stateful provider left off.
    The reply is read in `request.frame`, or in `reply_frame` when one is given:
    the frame a recorded reply was written in, replayed under other scaling (an
    identity frame reads screen pixels).
    """
    frame = request.frame if reply_frame is None else reply_frame
    actions = parse_reply(config, response_text, request.masks, frame)
    new_state = attrs.evolve(
        state,
        observations=(*state.observations, request.observation),
        actions=(*state.actions, actions),
        thoughts=(*state.thoughts, response_text if actions is not None else ""),
        continuation=continuation,
    )
    return new_state, actions
