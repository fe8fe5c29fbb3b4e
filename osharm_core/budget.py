"""The pre-flight budget: measure a step's request and make it fit a server's limits.

`measure` gives a request's encoded JSON size, image count and an estimate
of its input tokens (text with cl100k, images with the provider's documented
rule, see `image_tokens`). `fit_step` degrades a request that would break a
limit in a declared order, re-measuring after each change:

1. leave out history screenshots, oldest first (their text stays);
2. downscale the current screenshot (halving steps, kept on the 28 px grid of
   presets whose server resizes again, see `downscale_sizes`; its frame
   follows, and so does what the system prompt says about coordinates);
3. trim the trees further (halving the token limit);

and records what it did in the step's `ObservationRecord.degradation`. When
nothing more can be left out it raises `RequestBudgetError` naming the limit
and by how much the request is over it: a request known to break a limit is
never handed back.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from collections.abc import Callable, Sequence
from typing import Final

import attrs

from osharm_core.config import AgentConfig
from osharm_core.errors import RequestBudgetError, ScreenshotError, StateError
from osharm_core.frames import CoordinateFrame
from osharm_core.limits import Degradation, RequestSize, ServerLimits
from osharm_core.messages import ImagePart, Message, TextPart, render_openai_chat
from osharm_core.observation import png_size
from osharm_core.prompts import reframe_system_message
from osharm_core.reframe import reframe_table
from osharm_core.scaling import (
    PRESETS,
    QWEN_MIN_PIXELS,
    ScalingPreset,
    effective_scaling,
    preset_for_model,
    resize_png,
    resolve_preset,
    smart_resize,
)
from osharm_core.state import AgentState, ObservationRecord
from osharm_core.step import LinearizedTree, StepRequest, tree_text, user_message
from osharm_core.tokens import cl100k_encoding, trim_accessibility_tree, trim_with_split

#: Measures the encoded body of a request with these messages, in bytes.
SizeOf = Callable[[Sequence[Message]], int]

# What the body holds besides the messages (model name, sampling parameters).
_ENVELOPE: Final = 256
# Tokens a chat format adds per message (role and separators), as OpenAI counts them.
_PER_MESSAGE: Final = 4
_DOWNSCALE: Final = (0.5, 0.35, 0.25, 0.18)
_MIN_TREE_TOKENS: Final = 100


def image_tokens(model: str, width: int, height: int) -> int:
    """The input tokens an image costs on `model`'s provider, by its documented rule.

    OpenAI (`detail: high`): 85 + 170 per 512 px tile after fitting in 2048 x
    2048 and a 768 px shortest side. Anthropic: width x height / 750 after its
    downscale (1568 px / 1.15 MP; 2576 px / 3.75 MP on Opus 4.7). Gemini: 258 per 768 x 768 tile (258 in all
    when both sides are at most 384). Qwen-VL / UI-TARS: one token per 28 x 28
    patch after the smart resize. Unknown families are counted as OpenAI's.

    >>> image_tokens("gpt-4o", 1920, 1080), image_tokens("claude-sonnet-4-5", 1920, 1080)
    (1105, 1532)
    >>> image_tokens("gemini-2.5-pro", 1920, 1080)
    1548
    """
    family = preset_for_model(model)
    if family in ("claude", "claude-hires"):
        w, h = PRESETS[family].target_size(width, height)
        return math.ceil(w * h / 750)
    if family == "gemini":
        if width <= 384 and height <= 384:
            return 258
        return math.ceil(width / 768) * math.ceil(height / 768) * 258
    if family in ("qwen2.5-vl", "qwen2-vl", "ui-tars", "ui-tars-1.5"):
        preset = PRESETS[family]
        w, h = smart_resize(
            width,
            height,
            factor=28,
            min_pixels=preset.min_pixels or 3136,
            max_pixels=preset.max_pixels or 12845056,
        )
        return (w // 28) * (h // 28)
    w, h = PRESETS["openai-high"].target_size(width, height)
    return 85 + 170 * math.ceil(w / 512) * math.ceil(h / 512)


def _header_size(data: str) -> tuple[int, int]:
    """A base64 PNG's size from its header (decoding only the first 24 bytes)."""
    return png_size(base64.b64decode(data[:32]))


def image_size(part: ImagePart) -> tuple[int, int] | None:
    """A base64 PNG's size from its header (decoding only the first 24 bytes), or None."""
    try:
        return _header_size(part.data)
    except (ScreenshotError, binascii.Error, ValueError):
        return None


def default_size_of(model: str) -> SizeOf:
    """The body size of an OpenAI-style chat request for `model` (JSON with default separators).

    Each message is rendered once per `SizeOf` (a request re-measured after a
    change re-renders only the messages that changed); the sum is exactly the
    size of the whole list dumped at once.
    """
    seen: dict[int, tuple[Message, int]] = {}
    hollows: dict[Message, int] = {}

    def one(message: Message) -> int:
        known = seen.get(id(message))
        if known is None or known[0] is not message:
            # Base64 needs no JSON escaping: render the images empty and add their length.
            # The draft rebuilds every message: one with the same parts is rendered once.
            hollow = Message(
                message.role,
                tuple(
                    attrs.evolve(p, data="") if isinstance(p, ImagePart) else p
                    for p in message.parts
                ),
            )
            rendered = hollows.get(hollow)
            if rendered is None:
                text = json.dumps(render_openai_chat((hollow,), model)[0])
                rendered = hollows[hollow] = len(text.encode("utf-8"))
            data = sum(len(image.data) for image in message.images)
            known = (message, rendered + data)
            seen[id(message)] = known
        return known[1]

    def size_of(messages: Sequence[Message]) -> int:
        separators = 2 * max(len(messages) - 1, 0)
        return 2 + separators + sum(one(m) for m in messages) + _ENVELOPE

    return size_of


#: A record whose tree text a request shows, and whether as the current turn.
_Shown = tuple[ObservationRecord, bool]


class _Tokens:
    """Counts input tokens, remembering each text's count (a request re-measured shares most).

    `shown` records' cached counts (`ObservationRecord.text_tokens`) are taken
    as known on first use; `keep` caches the counts of their texts back on them.
    """

    def __init__(
        self, model: str, config: AgentConfig | None = None, shown: Sequence[_Shown] = ()
    ) -> None:
        self.model = model
        self.encoding = cl100k_encoding()
        self.texts: dict[str, int] = {}
        self.config = config
        self.shown = shown
        self.used = False

    def text(self, text: str) -> int:
        count = self.texts.get(text)
        if count is None:
            count = self.texts[text] = len(self.encoding.encode_ordinary(text))
        return count

    def _recall(self) -> None:
        self.used = True
        if self.config is None:
            return
        kind = self.config.observation_type
        for record, current in self.shown:
            count = record.text_tokens.get(kind)
            text = None if count is None else tree_text(self.config, record, current=current)
            if text is not None and count is not None:
                self.texts.setdefault(text, count)

    def keep(self, shown: Sequence[_Shown]) -> None:
        """Cache the counts this counter knows on the records whose tree texts they are."""
        if self.config is None or not self.used:
            return
        kind = self.config.observation_type
        for record, current in shown:
            if kind in record.text_tokens:
                continue
            text = tree_text(self.config, record, current=current)
            count = None if text is None else self.texts.get(text)
            if count is not None:
                record.text_tokens[kind] = count

    def __call__(self, messages: Sequence[Message]) -> int:
        if not self.used:
            self._recall()
        total = 0
        for message in messages:
            total += _PER_MESSAGE
            for part in message.parts:
                if isinstance(part, TextPart):
                    total += self.text(part.text)
                else:
                    size = image_size(part)
                    total += image_tokens(self.model, *size) if size is not None else 765
        return total


def count_tokens(messages: Sequence[Message], model: str) -> int:
    """The estimated input tokens of `messages`: cl100k text, plus each image's rule."""
    return _Tokens(model)(messages)


def measure(
    messages: Sequence[Message],
    model: str,
    *,
    size_of: SizeOf | None = None,
    tokens: Callable[[Sequence[Message]], int] | None = None,
) -> RequestSize:
    """A request's encoded size in bytes, its image count and its estimated input tokens."""
    body = (size_of or default_size_of(model))(messages)
    images = sum(len(m.images) for m in messages)
    counted = (tokens or _Tokens(model))(messages)
    return RequestSize(bytes=body, images=images, input_tokens=counted)


@attrs.define
class _Draft:
    """The request being cut down: its parts, rebuilt into messages on demand."""

    system: Message
    history: list[ObservationRecord]
    replies: list[Message]
    current: ObservationRecord
    without_images: set[int] = attrs.Factory(set)

    def messages(self, config: AgentConfig) -> tuple[Message, ...]:
        built: list[Message] = [self.system]
        for index, (record, reply) in enumerate(zip(self.history, self.replies, strict=True)):
            if index in self.without_images:
                record = attrs.evolve(record, screenshot=None)
            message = user_message(config, record, current=False)
            if index in self.without_images:
                message = Message(
                    "user", tuple(p for p in message.parts if isinstance(p, TextPart))
                )
            built.append(message)
            built.append(reply)
        built.append(user_message(config, self.current, current=True))
        return tuple(built)

    def trim_trees(self, trees: Sequence[str | None], current: str | None, tokens: int) -> None:
        """Show `trees` (the history's, in order) and `current` trimmed to `tokens` each."""
        self.history = [
            attrs.evolve(r, accessibility_tree=None if t is None else _trim(t, tokens))
            for r, t in zip(self.history, trees, strict=True)
        ]
        if current is not None:
            self.current = attrs.evolve(self.current, accessibility_tree=_trim(current, tokens))


def _grid_preset(config: AgentConfig) -> ScalingPreset | None:
    """The step's scaling preset when its server resizes images to multiples (Qwen-VL, UI-TARS)."""
    scaling = effective_scaling(config.scaling, config.model)
    if scaling == "native":
        return None
    preset = resolve_preset(scaling, config.model)
    return preset if preset.multiple is not None else None


def _on_grid(preset: ScalingPreset, width: int, height: int, factor: float) -> tuple[int, int]:
    """About `factor` of `width` x `height` in each side, as a size `preset`'s server keeps.

    The smart resize with the pixel budget cut by `factor` squared, then the server's own
    resize of that (which only moves a size that fell under its `min_pixels`).
    """
    assert preset.multiple is not None
    low = preset.min_pixels or QWEN_MIN_PIXELS
    budget = max(low, math.floor(width * height * factor * factor))
    size = smart_resize(width, height, factor=preset.multiple, min_pixels=low, max_pixels=budget)
    return preset.target_size(*size)


def downscale_sizes(config: AgentConfig, width: int, height: int) -> tuple[tuple[int, int], ...]:
    """The sizes `fit_step` tries for a `width` x `height` current screenshot, in order.

    Each is about 0.5, 0.35, 0.25 and 0.18 of the screenshot in each side. Under a
    preset whose server resizes images to multiples of 28 px (Qwen-VL, UI-TARS,
    `max_pixels=N`) each is a size that server keeps as it is (a smart resize to a
    smaller pixel budget), so the model answers in pixels of the image sent; sizes
    that would not be smaller, or that server would resize, are left out.

    >>> downscale_sizes(AgentConfig(), 1920, 1080)
    ((960, 540), (672, 378), (480, 270), (345, 194))
    >>> downscale_sizes(AgentConfig(scaling="ui-tars-1.5"), 1932, 1092)
    ((952, 532), (672, 364), (476, 252), (392, 224))
    """
    preset = _grid_preset(config)
    if preset is None:
        return tuple(
            (max(1, math.floor(width * f)), max(1, math.floor(height * f))) for f in _DOWNSCALE
        )
    sizes: list[tuple[int, int]] = []
    last = (width, height)
    for factor in _DOWNSCALE:
        size = _on_grid(preset, width, height, factor)
        kept = preset.target_size(*size) == size
        if kept and size[0] <= last[0] and size[1] <= last[1] and size != last:
            sizes.append(size)
            last = size
    return tuple(sizes)


def _resized(record: ObservationRecord, size: tuple[int, int]) -> ObservationRecord:
    """`record` with its screenshot resampled to `size` (its frame follows)."""
    assert record.screenshot is not None
    png = base64.b64decode(record.screenshot)
    width, height = png_size(png)
    old = record.frame or CoordinateFrame.identity(width, height)
    frame = attrs.evolve(old, image_width=size[0], image_height=size[1])
    smaller = base64.b64encode(resize_png(png, size)).decode("ascii")
    return attrs.evolve(record, screenshot=smaller, frame=None if frame.is_identity else frame)


def _tree_in_frame(
    config: AgentConfig,
    record: ObservationRecord,
    old: CoordinateFrame | None,
    linearized: LinearizedTree | None,
) -> ObservationRecord:
    """`record` with its tree's positions read again in its frame (after a resize from `old`).

    The tree's rows give positions on the image sent; once the screenshot is
    resampled they must be those of the new image, or a point read off the
    tree lands elsewhere on the screen. `linearized` is the step's whole table.
    Without it (a step rebuilt by `step_messages` from a kept table) the rows of
    the tree shown, in screen pixels, are mapped as `reframe_table` reads them;
    a tree shown in another scaled frame cannot be, exactly, and is a `StateError`.
    A set-of-marks element table holds no positions and is kept.
    """
    tree = record.accessibility_tree
    if tree is None:
        return record
    if linearized is not None:
        table = linearized.in_frame(record.frame)
        trimmed, _ = trim_with_split(table, config.a11y_tree_max_tokens)
        return attrs.evolve(record, accessibility_tree=trimmed)
    if config.observation_type == "som":
        return record
    if old is not None and not old.is_identity:
        raise StateError(
            "the screenshot is downscaled, but its accessibility tree is shown in an earlier "
            "scaled frame and the request keeps no linearized table to show it in the new one "
            "(build it with prepare_step, or from a tree in screen pixels)"
        )
    return attrs.evolve(record, accessibility_tree=reframe_table(tree, record.frame))


def _system_in_frame(
    config: AgentConfig, system: Message, old: CoordinateFrame | None, new: CoordinateFrame | None
) -> Message:
    """The system message, once the current screenshot's frame went from `old` to `new`, telling
    the model the new grid (a message not built by `system_message` is kept as it is)."""
    if system.role != "system" or len(system.parts) != 1:
        return system
    part = system.parts[0]
    if not isinstance(part, TextPart):
        return system
    text = reframe_system_message(config, part.text, old, new)
    return system if text == part.text else Message("system", (TextPart(text),))


def fit_step(
    config: AgentConfig,
    state: AgentState,
    request: StepRequest,
    limits: ServerLimits,
    *,
    size_of: SizeOf | None = None,
) -> StepRequest:
    """`request` cut down to fit `limits` in the declared order, or unchanged when it fits.

    `state` is the state `request` was prepared from. The returned request's
    observation carries the `Degradation` record (and the downscaled
    screenshot and its frame, which history will reuse). Raises
    `RequestBudgetError` when even the smallest request breaks a limit.
    """
    size_of = size_of or default_size_of(config.model)
    model = config.model
    start = max(len(state) - config.max_trajectory_length, 0)
    shown = [(r, False) for r in state.observations[start:]] + [(request.observation, True)]
    counter = _Tokens(model, config, shown)

    def broken(messages: Sequence[Message]) -> tuple[str, int, int] | None:
        return limits.exceeded(
            bytes_=size_of(messages) if limits.max_bytes is not None else 0,
            images=sum(len(m.images) for m in messages),
            input_tokens=counter(messages) if limits.max_input_tokens is not None else 0,
        )

    if broken(request.messages) is None:
        counter.keep(shown)
        return request
    before = measure(request.messages, model, size_of=size_of, tokens=counter)
    draft = _Draft(
        system=request.messages[0],
        history=list(state.observations[start:]),
        replies=[m for m in request.messages[1:-1] if m.role == "assistant"],
        current=request.observation,
    )
    messages = draft.messages(config)
    dropped: list[int] = []
    for index, record in enumerate(draft.history):
        if broken(messages) is None:
            break
        if record.screenshot is not None:
            draft.without_images.add(index)
            dropped.append(start + index + 1)
            messages = draft.messages(config)
    screenshot_size = None
    original = draft.current
    if original.screenshot is not None:
        width, height = _header_size(original.screenshot)
        for size in downscale_sizes(config, width, height):
            if broken(messages) is None:
                break
            smaller = _resized(original, size)
            draft.current = _tree_in_frame(config, smaller, original.frame, request.linearized)
            draft.system = _system_in_frame(
                config, request.messages[0], original.frame, draft.current.frame
            )
            messages = draft.messages(config)
            screenshot_size = size
    tree_tokens = None
    tokens = config.a11y_tree_max_tokens // 2
    trees = [r.accessibility_tree for r in draft.history]
    current_tree = draft.current.accessibility_tree
    while (
        broken(messages) is not None
        and tokens >= _MIN_TREE_TOKENS
        and (current_tree is not None or any(t is not None for t in trees))
    ):
        draft.trim_trees(trees, current_tree, tokens)
        tree_tokens = tokens
        messages = draft.messages(config)
        tokens //= 2
    still = broken(messages)
    if still is not None:
        name, value, maximum = still
        raise RequestBudgetError(
            f"the request cannot be made to fit {name}={maximum}: after leaving out every "
            f"history screenshot, downscaling the current one and trimming the trees it is "
            f"still {value} ({value - maximum} over)",
            limit=name,
            value=value,
            maximum=maximum,
        )
    degradation = Degradation(
        before=before,
        after=measure(messages, model, size_of=size_of, tokens=counter),
        dropped_images=tuple(dropped),
        screenshot_size=screenshot_size,
        tree_tokens=tree_tokens,
    )
    observation = attrs.evolve(draft.current, degradation=degradation)
    counter.keep([*shown, (observation, True)])
    return attrs.evolve(request, messages=messages, observation=observation)


def _trim(tree: str, tokens: int) -> str:
    return trim_accessibility_tree(tree, tokens)


def refit_step(
    config: AgentConfig, state: AgentState, request: StepRequest, degradation: Degradation
) -> StepRequest:
    """`request` cut down as a recorded `Degradation` says `fit_step` cut it, measuring nothing.

    `state` and `request` are those `fit_step` was given (a recorded step being
    rebuilt): the history screenshots of `dropped_images` are left out, the
    current screenshot is resampled to `screenshot_size` and the trees trimmed
    to `tree_tokens`, each as `fit_step` does it, so the messages are the ones
    it returned. The observation carries `degradation`. Raises `StateError`
    when the record does not fit the request (a turn it names is not in the
    history shown, or has no screenshot; a size with no screenshot to resize, or
    larger than it: `fit_step` only ever shrinks).
    """
    start = max(len(state) - config.max_trajectory_length, 0)
    draft = _Draft(
        system=request.messages[0],
        history=list(state.observations[start:]),
        replies=[m for m in request.messages[1:-1] if m.role == "assistant"],
        current=request.observation,
    )
    for turn in degradation.dropped_images:
        index = turn - start - 1
        if not 0 <= index < len(draft.history) or draft.history[index].screenshot is None:
            raise StateError(
                f"the recorded degradation leaves out turn {turn}'s screenshot, but the "
                f"request shows no screenshot of turn {turn}"
            )
        draft.without_images.add(index)
    if degradation.screenshot_size is not None:
        if draft.current.screenshot is None:
            raise StateError(
                "the recorded degradation downscales the screenshot, but the request has none"
            )
        width, height = _header_size(draft.current.screenshot)
        new_width, new_height = degradation.screenshot_size
        if new_width > width or new_height > height:
            raise StateError(
                f"the recorded degradation downscales the screenshot to {new_width} x "
                f"{new_height} pixels, but the screenshot sent is {width} x {height}: a "
                f"degradation only ever makes it smaller"
            )
        old = draft.current.frame
        draft.current = _tree_in_frame(
            config, _resized(draft.current, degradation.screenshot_size), old, request.linearized
        )
        draft.system = _system_in_frame(config, draft.system, old, draft.current.frame)
    tokens = degradation.tree_tokens
    if tokens is not None:
        trees = [r.accessibility_tree for r in draft.history]
        draft.trim_trees(trees, draft.current.accessibility_tree, tokens)
    observation = attrs.evolve(draft.current, degradation=degradation)
    return attrs.evolve(request, messages=draft.messages(config), observation=observation)
