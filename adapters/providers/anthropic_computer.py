"""Anthropic's computer-use tool over the Messages API: pure request encoding and reply decoding.

Sources (wire formats as documented, nothing guessed):

- https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool
  (tool versions, beta headers per model family, the action list, tool_use /
  tool_result loop);
- github.com/anthropics/claude-quickstarts, computer-use-demo/computer_use_demo/tools/
  computer.py and groups.py (each action's parameters: `coordinate`,
  `start_coordinate`, `text`, `scroll_direction`, `scroll_amount`,
  `duration`, `region`; `enable_zoom` on `computer_20251124`).

The request is the plain Messages request (`adapters.providers.anthropic`:
system text, alternating turns, the per-family sampling table) plus the
`computer` tool, whose display size is the latest screenshot's, and the
`anthropic-beta` header its version needs:

| tool version        | beta header               | models                                          |
| computer_20251124   | computer-use-2025-11-24   | Opus 4.5, 4.6, 4.7 (and later Opus), Sonnet 4.6+ |
| computer_20250124   | computer-use-2025-01-24   | Sonnet 4.5, Haiku 4.5, Opus 4.1, Sonnet 4, Opus 4, Sonnet 3.7 |

Each `tool_use` block is converted into the shared vocabulary
(`adapters.providers.computer_use`) and written as reply text. The reply's
content is kept in `Continuation.native`; the next request resends it as
the assistant turn and answers every `tool_use` with a `tool_result`: the
latest screenshot on the last one (a short text on the others), and for a
`zoom` the requested region of it, cropped.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs
from PIL import Image, UnidentifiedImageError

from adapters._wire import native_record
from adapters.contract import HttpCall, ModelRequest, ProviderReply, Usage
from adapters.errors import (
    ConfigurationError,
    ModelCallError,
    ResponseDecodeError,
    UnsupportedComputerAction,
)
from adapters.providers._credentials import valid_key
from adapters.providers.anthropic import (
    DEFAULT_BASE_URL,
    AnthropicProvider,
    Sampling,
    _version,
    body_usage,
    client_factory,
    media_type,
    messages_call,
    render_messages,
)
from adapters.providers.computer_use import (
    MAX_GESTURES,
    MAX_WHEEL_CLICKS,
    Gesture,
    ScreenMap,
    early_stop,
    key_combo,
    native_point,
    number,
    reply_text,
)
from adapters.providers.native import (
    DEFAULT_DISPLAY,
    answer_screenshot,
    answering,
    check_action_space,
    display_size,
    native_turn,
    pixel_screen,
    split_latest,
)
from osharm_core import Continuation, ImagePart
from osharm_core.errors import excerpt

if TYPE_CHECKING:
    from adapters.registry import ModelRegistry

#: Each supported tool version and the beta header it needs.
TOOL_VERSIONS: Final[Mapping[str, str]] = {
    "computer_20251124": "computer-use-2025-11-24",
    "computer_20250124": "computer-use-2025-01-24",
}
#: The name the computer tool is declared (and called) under.
TOOL_NAME: Final = "computer"
#: Stop reasons that end a turn naturally: a reply without tool_use then means the model is
#: done. Any other (`max_tokens`, `model_context_window_exceeded`, `refusal`, `pause_turn`)
#: leaves such a reply without an action (see `computer_use.reply_text`).
NATURAL_STOPS: Final = ("end_turn", "stop_sequence", "tool_use")
_CLICKS: Final[Mapping[str, tuple[str, str]]] = {
    "left_click": ("click", "left"),
    "right_click": ("click", "right"),
    "middle_click": ("click", "middle"),
    "double_click": ("double_click", "left"),
    "triple_click": ("triple_click", "left"),
}
_SCROLLS: Final[Mapping[str, tuple[int, int]]] = {
    "up": (0, 1),
    "down": (0, -1),
    "left": (-1, 0),
    "right": (1, 0),
}
_FAMILY: Final = re.compile(r"(opus|sonnet|haiku)")


def tool_version_for(model: str) -> str:
    """The computer tool version a Claude model accepts (see the module table).

    >>> tool_version_for("claude-opus-4-5-20251101"), tool_version_for("claude-sonnet-4-6")
    ('computer_20251124', 'computer_20251124')
    >>> tool_version_for("claude-sonnet-4-5"), tool_version_for("claude-3-7-sonnet-latest")
    ('computer_20250124', 'computer_20250124')
    """
    version = _version(model)
    family = _FAMILY.search(model.lower())
    if version is None or family is None:
        return "computer_20251124"
    if version < (3, 7):
        raise ConfigurationError(
            f"{model}: Anthropic's current computer tools need Claude Sonnet 3.7 or later"
        )
    newest = (family.group(1) == "opus" and version >= (4, 5)) or (
        family.group(1) == "sonnet" and version >= (4, 6)
    )
    return "computer_20251124" if newest else "computer_20250124"


def _coordinate(value: object, where: str, screen: ScreenMap | None) -> tuple[int, int]:
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
        raise UnsupportedComputerAction(f"{where}: coordinate must be [x, y], got {value!r}")
    return native_point(value[0], value[1], where, screen)


def _optional_point(
    action: Mapping[str, Any], where: str, screen: ScreenMap | None
) -> tuple[tuple[int, int], ...]:
    value = action.get("coordinate")
    return () if value is None else (_coordinate(value, where, screen),)


def _text(action: Mapping[str, Any], where: str) -> str:
    text = action.get("text")
    if not isinstance(text, str):
        raise UnsupportedComputerAction(f"{where}: field 'text' must be a string, got {text!r}")
    return text


def _held(action: Mapping[str, Any], platform: str) -> tuple[str, ...]:
    modifiers = action.get("text", action.get("key"))
    return () if modifiers in (None, "") else key_combo(modifiers, platform=platform)


def read_tool_use(
    action: object, *, platform: str = "linux", screen: ScreenMap | None = None
) -> tuple[Gesture, ...]:
    """The gestures of one computer `tool_use` input (none for `screenshot` / `cursor_position`).

    >>> read_tool_use({"action": "key", "text": "ctrl+s"})
    (Gesture(kind='keys', points=(), button='left', keys=('ctrl', 's'), scroll=(0, 0), text='', held=()),)
    """
    if not isinstance(action, Mapping) or not isinstance(action.get("action"), str):
        raise UnsupportedComputerAction(f"computer tool_use input has no action: {action!r}")
    kind = action["action"]
    if kind in ("screenshot", "cursor_position"):
        return ()
    if kind in _CLICKS:
        gesture, button = _CLICKS[kind]
        points = _optional_point(action, kind, screen)
        return (Gesture(gesture, points, button=button, held=_held(action, platform)),)
    if kind in ("left_mouse_down", "left_mouse_up"):
        gesture = "mouse_down" if kind == "left_mouse_down" else "mouse_up"
        return (Gesture(gesture, _optional_point(action, kind, screen)),)
    if kind == "mouse_move":
        return (Gesture("move", (_coordinate(action.get("coordinate"), kind, screen),)),)
    if kind == "left_click_drag":
        start = _coordinate(action.get("start_coordinate"), kind, screen)
        end = _coordinate(action.get("coordinate"), kind, screen)
        return (Gesture("drag", (start, end)),)
    if kind == "key":
        combos = _text(action, kind).split()
        if not combos or len(combos) > 16:
            raise UnsupportedComputerAction(f"key: cannot press {action.get('text')!r}")
        return tuple(Gesture("keys", keys=key_combo(c, platform=platform)) for c in combos)
    if kind == "type":
        return (Gesture("type", text=_text(action, kind)),)
    if kind == "scroll":
        return (_scroll(action, platform, screen),)
    if kind == "wait":
        return (Gesture("wait"),)
    if kind == "hold_key":
        keys = key_combo(_text(action, kind), platform=platform)
        down = tuple(Gesture("key_down", keys=(k,)) for k in keys)
        up = tuple(Gesture("key_up", keys=(k,)) for k in reversed(keys))
        return (*down, Gesture("wait"), *up)
    if kind == "zoom":
        region = action.get("region")
        if not isinstance(region, Sequence) or isinstance(region, str) or len(region) != 4:
            raise UnsupportedComputerAction(
                f"zoom: region must be [x0, y0, x1, y1], got {region!r}"
            )
        corners = (
            native_point(region[0], region[1], kind, screen),
            native_point(region[2], region[3], kind, screen),
        )
        return (Gesture("zoom", corners),)
    raise UnsupportedComputerAction(f"unknown computer action {kind!r}")


def _scroll(action: Mapping[str, Any], platform: str, screen: ScreenMap | None) -> Gesture:
    direction = action.get("scroll_direction")
    if not isinstance(direction, str) or direction not in _SCROLLS:
        raise UnsupportedComputerAction(f"scroll: unknown scroll_direction {direction!r}")
    amount = number(action.get("scroll_amount", 0), "scroll: scroll_amount")
    if amount < 0 or amount > MAX_WHEEL_CLICKS:
        raise UnsupportedComputerAction(f"scroll: scroll_amount {amount!r} is out of range")
    sx, sy = _SCROLLS[str(direction)]
    clicks = (sx * round(amount), sy * round(amount))
    points = _optional_point(action, "scroll", screen)
    return Gesture("scroll", points, scroll=clicks, held=_held(action, platform))


def _crop(screenshot: ImagePart, region: object) -> str | None:
    """The base64 PNG of `region` ([x0, y0, x1, y1] pixels) of the screenshot, or None."""
    if not isinstance(region, list) or len(region) != 4:
        return None
    try:
        x0, y0, x1, y1 = (int(v) for v in region)
        with Image.open(io.BytesIO(base64.b64decode(screenshot.data))) as image:
            box = (max(x0, 0), max(y0, 0), min(x1, image.width), min(y1, image.height))
            if box[0] >= box[2] or box[1] >= box[3]:
                return None
            buffer = io.BytesIO()
            image.crop(box).save(buffer, format="PNG")
    except (ValueError, TypeError, OSError, binascii.Error, UnidentifiedImageError):
        return None
    return base64.b64encode(buffer.getvalue()).decode()


def _image_block(data: str, kind: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": kind, "data": data}}


def _resendable(block: object) -> bool:
    if not isinstance(block, Mapping):
        return False
    if block.get("type") == "text":
        text = block.get("text")
        return isinstance(text, str) and bool(text.strip())
    return block.get("type") in ("tool_use", "thinking", "redacted_thinking")


@attrs.frozen(kw_only=True)
class AnthropicComputerProvider:
    """Claude with the computer-use tool. Pure: the engine in `adapters.engine.client` does the I/O.

    `tool_version` overrides the per-model choice of `tool_version_for`;
    `zoom` sets `enable_zoom` on `computer_20251124`; `display` is the screen
    size used when no PNG screenshot tells it; `platform` names the key set
    (`linux`, or `mac` for the command key); `sampling` overrides the
    per-family sampling table (`adapters.providers.anthropic.sampling_for`).
    """

    api_key: str = attrs.field(repr=False, validator=valid_key)
    base_url: str | None = None
    sampling: Sampling | None = None
    tool_version: str | None = None
    zoom: bool = True
    display: tuple[int, int] = DEFAULT_DISPLAY
    platform: str = "linux"
    name = "anthropic-computer"

    @property
    def url(self) -> str:
        """The Messages endpoint."""
        return (self.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"

    def version_for(self, model: str) -> str:
        """The tool version sent for `model`."""
        version = self.tool_version or tool_version_for(model)
        if version not in TOOL_VERSIONS:
            raise ConfigurationError(
                f"unknown computer tool version {version!r}; supported: {', '.join(TOOL_VERSIONS)}"
            )
        return version

    def encode(self, request: ModelRequest) -> HttpCall:
        """The Messages call: history, the computer tool, and the answers to pending tool_use blocks."""
        check_action_space(request, "Anthropic's computer tool")
        version = self.version_for(request.model)
        continuation = request.continuation
        if answering(continuation):
            assert continuation is not None
            earlier, latest = split_latest(request.messages)
            system, turns = render_messages(earlier)
            self._answer(turns, continuation, latest)
        else:
            system, turns = render_messages(request.messages)
        width, height = display_size(request.messages, self.display)
        tool: dict[str, Any] = {
            "type": version,
            "name": TOOL_NAME,
            "display_width_px": width,
            "display_height_px": height,
        }
        if version == "computer_20251124" and self.zoom:
            tool["enable_zoom"] = True
        return messages_call(
            request,
            system,
            turns,
            url=self.url,
            api_key=self.api_key,
            sampling=self.sampling,
            tools=[tool],
            beta=TOOL_VERSIONS[version],
        )

    def _answer(self, turns: list[dict[str, Any]], continuation: Continuation, latest: Any) -> None:
        """Append the model's previous turn and the user turn answering its tool_use blocks."""
        screenshot = answer_screenshot(latest, "Anthropic's computer tool")
        record = native_turn(continuation, self.name)
        blocks = [b for b in record if _resendable(b)] if isinstance(record, list) else []
        zooms = {
            b.get("id"): b.get("input", {}).get("region")
            for b in blocks
            if b.get("type") == "tool_use"
            and isinstance(b.get("input"), Mapping)
            and b["input"].get("action") == "zoom"
        }
        kind = media_type(screenshot)
        results: list[dict[str, Any]] = []
        for call_id in continuation.call_ids:
            content: list[dict[str, Any]] = []
            if call_id in zooms:
                cropped = _crop(screenshot, zooms[call_id])
                content = [_image_block(cropped, "image/png")] if cropped else []
            results.append({"type": "tool_result", "tool_use_id": call_id, "content": content})
        plain = [r for r in results if r["tool_use_id"] not in zooms] or results[-1:]
        plain[-1]["content"].append(_image_block(screenshot.data, kind))
        for result in results:
            if not result["content"]:
                result["content"] = [{"type": "text", "text": "Done; the screenshot follows."}]
        if not turns or turns[-1]["role"] != "user":
            turns.append({"role": "user", "content": [{"type": "text", "text": "(continued)"}]})
        turns.append({"role": "assistant", "content": blocks})
        texts = [{"type": "text", "text": latest.text}] if latest.text.strip() else []
        turns.append({"role": "user", "content": [*results, *texts]})

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The converted tool_use blocks as reply text, the usage, and the turn to answer next."""
        where: dict[str, Any] = {"provider": self.name, "model": request.model}
        if not isinstance(body, Mapping) or not isinstance(body.get("content"), list):
            raise ResponseDecodeError("reply has no content list", **where)
        content = body["content"]
        thoughts: list[str] = []
        calls: list[tuple[str, Any]] = []
        for block in content:
            if not isinstance(block, Mapping):
                continue
            if block.get("type") == "text" and isinstance(block.get("text"), str):
                if block["text"].strip():
                    thoughts.append(block["text"])
            elif block.get("type") == "tool_use":
                if block.get("name") != TOOL_NAME:
                    raise ResponseDecodeError(
                        f"tool_use of an undeclared tool: {excerpt(block.get('name'))}", **where
                    )
                if not isinstance(block.get("id"), str) or not block["id"]:
                    # No tool_result could answer it: the next request would be refused.
                    raise ResponseDecodeError(
                        f"tool_use without an id to answer, got {excerpt(block.get('id'))}",
                        **where,
                    )
                if any(block["id"] == seen for seen, _ in calls):
                    # Its gestures could run but only one tool_result answer the id: the next
                    # request would be refused, and every later step with it.
                    raise ResponseDecodeError(
                        f"tool_use repeats the id {excerpt(block['id'])}", **where
                    )
                calls.append((block["id"], block.get("input")))
        reason = body.get("stop_reason")
        reason = reason if isinstance(reason, str) and reason else None
        text = self._reply_text(request, thoughts, calls, reason) if calls or thoughts else ""
        message_id = body.get("id")
        continuation = Continuation(
            response_id=message_id if isinstance(message_id, str) else "",
            call_ids=tuple(call_id for call_id, _ in calls),
            native=native_record(content, provider=self.name, model=request.model),
        )
        model = body.get("model")
        return ProviderReply(
            text=text,
            usage=self.usage(body),
            model=model if isinstance(model, str) else request.model,
            raw=body,
            continuation=continuation,
            finish_reason=reason,
            refusal=reason if reason == "refusal" else None,
        )

    def _reply_text(
        self,
        request: ModelRequest,
        thoughts: list[str],
        calls: list[tuple[str, Any]],
        reason: str | None,
    ) -> str:
        screen = pixel_screen(request.messages, self.display)
        try:
            if len(calls) > MAX_GESTURES:
                raise UnsupportedComputerAction(f"{len(calls)} tool_use blocks in one reply")
            gestures = [
                g
                for _, action in calls
                for g in read_tool_use(action, platform=self.platform, screen=screen)
            ]
            return reply_text(
                thoughts,
                gestures if calls else None,
                request.action_space,
                stopped=early_stop(reason, NATURAL_STOPS),
            )
        except UnsupportedComputerAction as exc:
            raise ResponseDecodeError(
                f"cannot convert computer tool_use: {exc}", provider=self.name, model=request.model
            ) from exc

    def usage(self, body: Any) -> Usage:
        """The token counts of a reply body, as for the plain Messages API."""
        return body_usage(body)

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for a non-2xx reply, as for the plain Messages API."""
        return AnthropicProvider(api_key="").error(status, headers, body, text)


# --- registration ------------------------------------------------------------------


_client = client_factory(AnthropicComputerProvider)


def register(registry: ModelRegistry) -> None:
    """`anthropic-computer/<model>`: Claude driving the desktop through the computer tool."""
    registry.register_scheme(
        "anthropic-computer",
        _client,
        description="anthropic-computer/<claude model> (computer tool; ANTHROPIC_API_KEY)",
        needs="ANTHROPIC_API_KEY",
        computer_use=True,
    )


__all__ = [
    "NATURAL_STOPS",
    "TOOL_NAME",
    "TOOL_VERSIONS",
    "AnthropicComputerProvider",
    "read_tool_use",
    "tool_version_for",
]
