"""Anthropic's computer use over the Messages API: pure request encoding and reply decoding.

Sources (wire formats as documented, nothing guessed):

- https://platform.claude.com/docs/en/agents-and-tools/tool-use/computer-use-tool
  (the GA toolset, the earlier beta tool versions and their beta headers, the
  action list, the tool_use / tool_result loop) and its feature metadata
  (platform.claude.com/docs/es/agents-and-tools/tool-use/computer-use-tool.md:
  the toolset's models and platforms; Claude 5.5 on the Claude API and Google
  Cloud takes computer use only through the toolset);
- the anthropic Python SDK 2.10.0 (`anthropic/types/computer_toolset_20260801_param.py`,
  `tool_use_block.py`, `tool_result_block_param.py`, `computer_*_input.py`): the
  toolset entry carries only `type`, `configs` and `cache_control`; each member
  call is a `tool_use` named after the member with `toolset_name: "computer"`,
  and its `tool_result` echoes `toolset_name`;
- github.com/anthropics/claude-quickstarts, computer-use-demo (each beta
  action's parameters).

The request is the plain Messages request (`adapters.providers.anthropic`:
system text, alternating turns, the per-family sampling table) plus one
computer tool, chosen per model and service by `tools_for`:

| tool                      | declared as                                 | models                            |
| computer_toolset_20260801 | `type` (+ `configs`), no beta header        | Opus 4.8+, Sonnet 5+, Haiku 5.5+, |
|                           |                                             | Fable, Mythos                     |
| computer_20251124         | name, display size; computer-use-2025-11-24 | Opus 4.5+, Sonnet 4.6+, Fable,    |
|                           |                                             | Mythos, Haiku 5.5+                |
| computer_20250124         | name, display size; computer-use-2025-01-24 | Sonnet 3.7 and later              |

The toolset is spoken where it is GA (the Claude API and Google Cloud); on
Amazon Bedrock and Microsoft Foundry the beta tools stay. Claude 5.5 and later
on the Claude API and Google Cloud, and Fable / Mythos 5.2 everywhere but
Bedrock, refuse the beta tools, so forcing one for them is a
`ConfigurationError` before any request.

Each `tool_use` block (several per turn are run in order) is converted into
the shared vocabulary (`adapters.providers.computer_use`) and written as reply
text. The reply's content is kept in `Continuation.native`; the next request
resends it as the assistant turn and answers every `tool_use` with its own
`tool_result` (echoing `toolset_name`): the latest screenshot on the last one
(a short text on the others), and for a `zoom` the requested region of it,
cropped.
"""

from __future__ import annotations

import base64
import binascii
import io
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal

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
from adapters.providers._read import obj, objects, text
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
    string_arg,
)
from adapters.providers.native import (
    DEFAULT_DISPLAY,
    answer_screenshot,
    answering,
    bounded,
    check_action_space,
    converting,
    display_size,
    native_turn,
    pixel_screen,
    split_latest,
)
from osharm_core import Continuation, ImagePart
from osharm_core.errors import excerpt, refusing

if TYPE_CHECKING:
    from adapters.registry import ModelRegistry

#: The GA computer-use client toolset: one `tools` entry, no beta header.
TOOLSET: Final = "computer_toolset_20260801"
#: Each beta tool version and the beta header it needs.
TOOL_VERSIONS: Final[Mapping[str, str]] = {
    "computer_20251124": "computer-use-2025-11-24",
    "computer_20250124": "computer-use-2025-01-24",
}
#: Every computer tool this provider can declare.
TOOLS: Final = (TOOLSET, *TOOL_VERSIONS)
#: The name the beta tool is declared and called under, and the toolset's `toolset_name`.
TOOL_NAME: Final = "computer"
#: The toolset's member tools: the `name` of each of its `tool_use` blocks.
TOOLSET_MEMBERS: Final = frozenset(
    {
        "screenshot",
        "cursor_position",
        "left_click",
        "right_click",
        "middle_click",
        "double_click",
        "triple_click",
        "left_mouse_down",
        "left_mouse_up",
        "left_click_drag",
        "mouse_move",
        "scroll",
        "key",
        "hold_key",
        "type",
        "wait",
        "zoom",
    }
)
#: Where the Messages API is served; which tool a model takes depends on it.
Service = Literal["claude-api", "google-cloud", "bedrock", "foundry"]
SERVICES: Final = ("claude-api", "google-cloud", "bedrock", "foundry")
#: The services where the toolset is generally available (and the only tool of Claude 5.5).
TOOLSET_SERVICES: Final = ("claude-api", "google-cloud")
_SERVICE_NAMES: Final[Mapping[str, str]] = {
    "claude-api": "the Claude API",
    "google-cloud": "Google Cloud",
    "bedrock": "Amazon Bedrock",
    "foundry": "Microsoft Foundry",
}
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
_FAMILY: Final = re.compile(r"(opus|sonnet|haiku|fable|mythos)")


def service_for(base_url: str | None) -> Service:
    """The service a Messages endpoint belongs to, read from its host (the Claude API unless
    it is a Foundry, Bedrock or Google Cloud host).

    >>> service_for("https://my-resource.services.ai.azure.com/anthropic"), service_for(None)
    ('foundry', 'claude-api')
    """
    url = (base_url or "").lower()
    if ".services.ai.azure.com" in url:
        return "foundry"
    if "bedrock" in url and ".amazonaws.com" in url:
        return "bedrock"
    if "aiplatform.googleapis.com" in url:
        return "google-cloud"
    return "claude-api"


def tools_for(model: str, service: Service = "claude-api") -> tuple[str, ...]:
    """The computer tools the documentation allows `model` on `service`, the preferred first
    (see the module table); empty when it allows none. A name without a Claude version
    (a proxy's alias) may take either beta tool.

    >>> tools_for("claude-sonnet-5-5"), tools_for("claude-sonnet-5-5", "bedrock")
    (('computer_toolset_20260801',), ('computer_20251124', 'computer_20250124'))
    >>> tools_for("claude-opus-4-8"), tools_for("claude-haiku-4-5")
    (('computer_toolset_20260801', 'computer_20251124', 'computer_20250124'), ('computer_20250124',))
    """
    version = _version(model)
    found = _FAMILY.search(model.lower())
    if version is None or found is None:
        return tuple(TOOL_VERSIONS)
    family = found.group(1)
    if version < (3, 7):
        return ()
    grand = family in ("fable", "mythos")
    toolset = grand or version >= {"opus": (4, 8), "sonnet": (5, 0)}.get(family, (5, 5))
    newer_beta = grand or version >= {"opus": (4, 5), "sonnet": (4, 6)}.get(family, (5, 5))
    beta_refused = (service in TOOLSET_SERVICES and version >= (5, 5)) or (
        grand and version >= (5, 2) and service != "bedrock"
    )
    chosen = [TOOLSET] if toolset and service in TOOLSET_SERVICES else []
    if not beta_refused:
        chosen += ["computer_20251124"] if newer_beta else []
        chosen.append("computer_20250124")
    return tuple(chosen)


def tool_version_for(model: str, service: Service = "claude-api") -> str:
    """The computer tool sent for `model` on `service` by default, or a `ConfigurationError`.

    >>> tool_version_for("claude-opus-4-5-20251101"), tool_version_for("claude-sonnet-4-6")
    ('computer_20251124', 'computer_20251124')
    >>> tool_version_for("claude-sonnet-4-5"), tool_version_for("claude-3-7-sonnet-latest")
    ('computer_20250124', 'computer_20250124')
    >>> tool_version_for("claude-opus-5-5"), tool_version_for("claude-opus-5-5", "foundry")
    ('computer_toolset_20260801', 'computer_20251124')
    """
    return _chosen(model, service, None)


def _chosen(model: str, service: Service, forced: str | None) -> str:
    allowed = tools_for(model, service)
    where = f"{model} on {_SERVICE_NAMES[service]}"
    if not allowed and (_version(model) or (0, 0)) < (3, 7):
        raise ConfigurationError(
            f"{model}: Anthropic's current computer tools need Claude Sonnet 3.7 or later"
        )
    if not allowed:
        raise ConfigurationError(
            f"{where} takes computer use only through {TOOLSET}, which osharm-core speaks on "
            "the Claude API and Google Cloud only"
        )
    if forced is not None and forced not in allowed:
        raise ConfigurationError(
            f"{where} does not take the computer tool {forced}; it takes {', '.join(allowed)}"
        )
    return forced or allowed[0]


def _numbers(value: object, count: int, where: str) -> Sequence[Any]:
    """`count` JSON values of a point ([x, y]) or region ([x0, y0, x1, y1]), still unread."""
    if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != count:
        shape = "[x, y]" if count == 2 else "[x0, y0, x1, y1]"
        raise UnsupportedComputerAction(f"{where} must be {shape}, got {excerpt(value)}")
    return value


def _point(value: object, where: str, screen: ScreenMap | None) -> tuple[int, int]:
    x, y = _numbers(value, 2, f"{where}: coordinate")
    return native_point(x, y, where, screen)


def _optional_point(
    action: Mapping[str, Any], where: str, screen: ScreenMap | None
) -> tuple[tuple[int, int], ...]:
    value = action.get("coordinate")
    return () if value is None else (_point(value, where, screen),)


def _held(action: Mapping[str, Any], platform: str) -> tuple[str, ...]:
    modifiers = action.get("text", action.get("key"))
    return () if modifiers in (None, "") else key_combo(modifiers, platform=platform)


def _keys(action: Mapping[str, Any], platform: str) -> tuple[Gesture, ...]:
    """`key`: one combination or several separated by spaces, pressed `repeat` times (default 1)."""
    combos = string_arg(action, "text", "key").split()
    given = action.get("repeat")
    repeat = 1 if given is None else number(given, "key: repeat")
    if not combos or len(combos) > 16 or repeat not in range(1, MAX_GESTURES + 1):
        raise UnsupportedComputerAction(
            f"key: cannot press {excerpt(action.get('text'))} (repeat {excerpt(given)})"
        )
    presses = [key_combo(c, platform=platform) for c in combos]
    return tuple(Gesture("keys", keys=keys) for _ in range(int(repeat)) for keys in presses)


def read_tool_use(
    action: object, *, platform: str = "linux", screen: ScreenMap | None = None
) -> tuple[Gesture, ...]:
    """The gestures of one computer action: a beta tool's `tool_use` input, or a toolset
    member's input with the member's name as `action` (none for `screenshot` /
    `cursor_position`).

    >>> read_tool_use({"action": "key", "text": "ctrl+s"})
    (Gesture(kind='keys', points=(), button='left', keys=('ctrl', 's'), scroll=(0, 0), text='', held=()),)
    """
    action = obj(action)
    kind = text(action.get("action"))
    if kind is None:
        raise UnsupportedComputerAction(f"computer tool_use input has no action: {excerpt(action)}")
    if kind in ("screenshot", "cursor_position"):
        return ()
    held = _held(action, platform) if kind in (*_CLICKS, "left_click_drag", "scroll") else ()
    if kind in _CLICKS:
        gesture, button = _CLICKS[kind]
        return (Gesture(gesture, _optional_point(action, kind, screen), button=button, held=held),)
    if kind in ("left_mouse_down", "left_mouse_up"):
        gesture = "mouse_down" if kind == "left_mouse_down" else "mouse_up"
        return (Gesture(gesture, _optional_point(action, kind, screen)),)
    if kind == "mouse_move":
        return (Gesture("move", (_point(action.get("coordinate"), kind, screen),)),)
    if kind == "left_click_drag":
        start = _point(action.get("start_coordinate"), kind, screen)
        end = _point(action.get("coordinate"), kind, screen)
        return (Gesture("drag", (start, end), held=held),)
    if kind == "key":
        return _keys(action, platform)
    if kind == "type":
        return (Gesture("type", text=string_arg(action, "text", kind)),)
    if kind == "scroll":
        return (_scroll(action, held, screen),)
    if kind == "wait":
        return (Gesture("wait"),)
    if kind == "hold_key":
        keys = key_combo(string_arg(action, "text", kind), platform=platform)
        down = tuple(Gesture("key_down", keys=(k,)) for k in keys)
        up = tuple(Gesture("key_up", keys=(k,)) for k in reversed(keys))
        return (*down, Gesture("wait"), *up)
    if kind == "zoom":
        x0, y0, x1, y1 = _numbers(action.get("region"), 4, "zoom: region")
        corners = (native_point(x0, y0, kind, screen), native_point(x1, y1, kind, screen))
        return (Gesture("zoom", corners),)
    raise UnsupportedComputerAction(f"unknown computer action {excerpt(kind)}")


def _scroll(action: Mapping[str, Any], held: tuple[str, ...], screen: ScreenMap | None) -> Gesture:
    step = _SCROLLS.get(text(action.get("scroll_direction")) or "")
    if step is None:
        given = excerpt(action.get("scroll_direction"))
        raise UnsupportedComputerAction(f"scroll: unknown scroll_direction {given}")
    amount = number(action.get("scroll_amount", 0), "scroll: scroll_amount")
    if amount < 0 or amount > MAX_WHEEL_CLICKS:
        raise UnsupportedComputerAction(f"scroll: scroll_amount {amount!r} is out of range")
    sx, sy = step
    clicks = (sx * round(amount), sy * round(amount))
    return Gesture("scroll", _optional_point(action, "scroll", screen), scroll=clicks, held=held)


def _crop(screenshot: ImagePart, region: object) -> str | None:
    """The base64 PNG of `region` ([x0, y0, x1, y1] pixels) of the screenshot, or None."""
    try:
        x0, y0, x1, y1 = (int(v) for v in region)  # type: ignore[attr-defined]
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


def _resendable(block: Mapping[str, Any]) -> bool:
    if block.get("type") == "text":
        return bool((text(block.get("text")) or "").strip())
    return block.get("type") in ("tool_use", "thinking", "redacted_thinking")


def _action(block: Mapping[str, Any]) -> dict[str, Any]:
    """A tool_use block's action: a toolset member's input named by the member, or the beta
    tool's input (which names its `action`)."""
    fields = dict(obj(block.get("input")))
    return {**fields, "action": block.get("name")} if block.get("toolset_name") else fields


@attrs.frozen(kw_only=True)
class AnthropicComputerProvider:
    """Claude with the computer-use tool. Pure: the engine in `adapters.engine.client` does the I/O.

    `tool_version` forces one of `TOOLS` instead of the per-model choice of
    `tools_for` (a pairing the documentation rules out is a `ConfigurationError`
    at `encode`); `service` names where the API is served (`SERVICES`; default:
    read from `base_url` by `service_for`); `zoom` offers the zoom action;
    `display` is the screen size used when no PNG screenshot tells it;
    `platform` names the key set (`linux`, or `mac` for the command key);
    `sampling` overrides the per-family sampling table
    (`adapters.providers.anthropic.sampling_for`).
    """

    api_key: str = attrs.field(repr=False, validator=valid_key)
    base_url: str | None = None
    sampling: Sampling | None = None
    tool_version: str | None = attrs.field(
        default=None,
        validator=refusing(
            f"one of {TOOLS} or None", attrs.validators.optional(attrs.validators.in_(TOOLS))
        ),
    )
    zoom: bool = True
    display: tuple[int, int] = DEFAULT_DISPLAY
    platform: str = "linux"
    service: Service | None = attrs.field(
        default=None,
        validator=refusing(
            f"one of {SERVICES} or None", attrs.validators.optional(attrs.validators.in_(SERVICES))
        ),
    )
    name = "anthropic-computer"

    @property
    def url(self) -> str:
        """The Messages endpoint."""
        return (self.base_url or DEFAULT_BASE_URL).rstrip("/") + "/v1/messages"

    def version_for(self, model: str) -> str:
        """The computer tool sent for `model`, or a `ConfigurationError` before any request."""
        return _chosen(model, self.service or service_for(self.base_url), self.tool_version)

    def encode(self, request: ModelRequest) -> HttpCall:
        """The Messages call: history, the computer tool, and the answers to pending tool_use blocks."""
        check_action_space(request, "Anthropic's computer tool")
        version = self.version_for(request.model)
        continuation = request.continuation
        if answering(continuation):
            earlier, latest = split_latest(request.messages)
            system, turns = render_messages(earlier)
            self._answer(turns, continuation, latest)
        else:
            system, turns = render_messages(request.messages)
        return messages_call(
            request,
            system,
            turns,
            url=self.url,
            api_key=self.api_key,
            sampling=self.sampling,
            tools=[self._tool(version, request)],
            beta=TOOL_VERSIONS.get(version),
        )

    def _tool(self, version: str, request: ModelRequest) -> dict[str, Any]:
        """The `tools` entry: the toolset (the cursor position, which a step cannot report, and
        zoom when it is off, withheld), or the beta tool sized to the latest screenshot."""
        if version == TOOLSET:
            configs = {"cursor_position": {"enabled": False}}
            if not self.zoom:
                configs["zoom"] = {"enabled": False}
            return {"type": TOOLSET, "configs": configs}
        width, height = display_size(request.messages, self.display)
        tool: dict[str, Any] = {
            "type": version,
            "name": TOOL_NAME,
            "display_width_px": width,
            "display_height_px": height,
        }
        if version == "computer_20251124" and self.zoom:
            tool["enable_zoom"] = True
        return tool

    def _answer(self, turns: list[dict[str, Any]], continuation: Continuation, latest: Any) -> None:
        """Append the model's previous turn and the user turn answering each of its tool_use
        blocks with a tool_result of its own, in order."""
        screenshot = answer_screenshot(latest, "Anthropic's computer tool")
        blocks = [b for b in objects(native_turn(continuation, self.name)) if _resendable(b)]
        uses = {b.get("id"): b for b in blocks if b.get("type") == "tool_use"}
        kind = media_type(screenshot)
        results: list[tuple[bool, dict[str, Any]]] = []
        for call_id in continuation.call_ids:
            use = obj(uses.get(call_id))
            action = _action(use)
            content: list[dict[str, Any]] = []
            if action.get("action") == "zoom":
                cropped = _crop(screenshot, action.get("region"))
                content = [_image_block(cropped, "image/png")] if cropped else []
            result = {"type": "tool_result", "tool_use_id": call_id, "content": content}
            if text(use.get("toolset_name")):
                result["toolset_name"] = use["toolset_name"]
            results.append((action.get("action") == "zoom", result))
        plain = [r for zoomed, r in results if not zoomed] or [results[-1][1]]
        plain[-1]["content"].append(_image_block(screenshot.data, kind))
        for _, result in results:
            if not result["content"]:
                result["content"] = [{"type": "text", "text": "Done; the screenshot follows."}]
        if not turns or turns[-1]["role"] != "user":
            turns.append({"role": "user", "content": [{"type": "text", "text": "(continued)"}]})
        turns.append({"role": "assistant", "content": blocks})
        texts = [{"type": "text", "text": latest.text}] if latest.text.strip() else []
        turns.append({"role": "user", "content": [*(r for _, r in results), *texts]})

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The converted tool_use blocks (run in order) as reply text, the usage, and the turn
        to answer next."""
        where: dict[str, Any] = {"provider": self.name, "model": request.model}
        content = obj(body).get("content")
        if not isinstance(content, list):
            raise ResponseDecodeError("reply has no content list", **where)
        toolset = self.version_for(request.model) == TOOLSET
        thoughts: list[str] = []
        calls: dict[str, dict[str, Any]] = {}
        for block in objects(content):
            if block.get("type") == "text" and (text(block.get("text")) or "").strip():
                thoughts.append(block["text"])
            elif block.get("type") == "tool_use":
                call_id = self._call_id(block, toolset, calls, where)
                calls[call_id] = _action(block)
        reason = text(obj(body).get("stop_reason"))
        actions = list(calls.values())
        reply = self._reply_text(request, thoughts, actions, reason) if calls or thoughts else ""
        continuation = Continuation(
            response_id=text(body.get("id")) or "",
            call_ids=tuple(calls),
            native=native_record(content, provider=self.name, model=request.model),
        )
        return ProviderReply(
            text=reply,
            usage=self.usage(body),
            model=text(body.get("model")) or request.model,
            raw=body,
            continuation=continuation,
            finish_reason=reason,
            refusal=reason if reason == "refusal" else None,
        )

    @staticmethod
    def _call_id(
        block: Mapping[str, Any], toolset: bool, calls: Mapping[str, Any], where: dict[str, Any]
    ) -> str:
        """The id of a tool_use block of the declared tool, unique in its turn: no tool_result
        could answer another, and the next request would be refused (and every later one)."""
        declared = (
            block.get("toolset_name") == TOOL_NAME and block.get("name") in TOOLSET_MEMBERS
            if toolset
            else block.get("name") == TOOL_NAME and not block.get("toolset_name")
        )
        if not declared:
            raise ResponseDecodeError(
                f"tool_use of an undeclared tool: {excerpt(block.get('name'))}", **where
            )
        call_id = text(block.get("id"))
        if call_id is None or call_id in calls:
            problem = "repeats the id" if call_id else "without an id to answer, got"
            raise ResponseDecodeError(f"tool_use {problem} {excerpt(block.get('id'))}", **where)
        return call_id

    def _reply_text(
        self,
        request: ModelRequest,
        thoughts: list[str],
        actions: list[dict[str, Any]],
        reason: str | None,
    ) -> str:
        screen = pixel_screen(request.messages, self.display)
        with converting("computer tool_use", self.name, request.model):
            gestures = [
                g
                for action in bounded(actions, "tool_use blocks")
                for g in read_tool_use(action, platform=self.platform, screen=screen)
            ]
            return reply_text(
                thoughts,
                gestures if actions else None,
                request.action_space,
                stopped=early_stop(reason, NATURAL_STOPS),
            )

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
    "SERVICES",
    "TOOLS",
    "TOOLSET",
    "TOOLSET_MEMBERS",
    "TOOLSET_SERVICES",
    "TOOL_NAME",
    "TOOL_VERSIONS",
    "AnthropicComputerProvider",
    "Service",
    "read_tool_use",
    "service_for",
    "tool_version_for",
    "tools_for",
]
