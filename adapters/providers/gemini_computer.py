"""Gemini computer use over `generateContent` (REST, v1beta): pure request encoding and reply decoding.

Sources (wire formats as documented, nothing guessed):

- https://ai.google.dev/gemini-api/docs/computer-use (the `computer_use` tool and its
  environments `ENVIRONMENT_BROWSER` / `ENVIRONMENT_DESKTOP`, the supported actions of
  Gemini 3.5 Flash and of the older `gemini-2.5-computer-use-preview-10-2025`, the
  0-999 coordinate grid, `safety_decision` / `require_confirmation`, function
  responses carrying the new screenshot);
- github.com/google-gemini/computer-use-preview, agent.py (the generateContent loop:
  `computerUse` tool, which models take the older action set, `FunctionResponse` with
  `parts: [{inlineData}]`, `safety_acknowledgement`, magnitudes on the same grid);
- the Gemini REST reference for `Tool.computerUse`, `FunctionResponse.parts`
  (`FunctionResponsePart.inlineData`: `mimeType`, `data`).

The request is the plain Gemini request (`adapters.providers.gemini`) plus
`tools: [{"computerUse": {"environment": ...}}]`: `ENVIRONMENT_BROWSER` for the
models that only know the browser (`gemini-2.5-computer-use-preview-10-2025`,
`gemini-3-flash-preview`, `gemini-3.1-pro-preview`), `ENVIRONMENT_DESKTOP`
otherwise. Each `functionCall` part becomes gestures of the shared vocabulary
(`adapters.providers.computer_use`), its 0-999 coordinates mapped to screen
pixels by `screen_point`; the browser-only calls become their desktop
equivalents (`navigate`: ctrl+L, the URL, Enter; `go_back` / `go_forward`:
alt+Left / alt+Right; `search`: navigate to https://www.google.com;
`open_web_browser`: nothing, the browser being on screen). The reply's
content is kept in `Continuation.native`; the next request resends it as the
model turn and answers each call with a `functionResponse` (response
`{"status": "done"}`), the latest screenshot riding on the last one.

A `safety_decision` other than a regular one is never acknowledged on the
user's behalf (no `safety_acknowledgement` is ever sent): the reply says so
and ends with FAIL, and continuing that chain raises `SafetyCheckPending`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final

import attrs

from adapters._wire import native_record
from adapters.contract import HttpCall, ModelRequest, ProviderReply, Usage
from adapters.errors import (
    ConfigurationError,
    ModelCallError,
    ResponseDecodeError,
    SafetyCheckPending,
    UnsupportedComputerAction,
)
from adapters.providers._credentials import valid_key
from adapters.providers._read import dig, items, obj, objects, text
from adapters.providers.anthropic import media_type
from adapters.providers.computer_use import (
    Gesture,
    ScreenMap,
    early_stop,
    key_combo,
    key_list,
    native_point,
    number,
    pyautogui_key,
    reply_text,
    string_arg,
    wheel_clicks,
)
from adapters.providers.gemini import GeminiProvider, client_factory, metadata_usage
from adapters.providers.native import (
    DEFAULT_DISPLAY,
    answer_screenshot,
    answering,
    bounded,
    check_action_space,
    converting,
    display_size,
    native_turn,
    safety_notes,
    split_latest,
)
from osharm_core import Continuation
from osharm_core.errors import excerpt, refusing

if TYPE_CHECKING:
    from adapters.registry import ModelRegistry

#: Gemini's coordinate space: x and y from 0 to 999 on a 1000 x 1000 grid.
GRID: Final = (1000, 1000)
#: Models that only offer the browser environment and its older action set.
BROWSER_ONLY_MODELS: Final = (
    "gemini-2.5-computer-use-preview-10-2025",
    "gemini-3-flash-preview",
    "gemini-3.1-pro-preview",
)
ENVIRONMENTS: Final = ("ENVIRONMENT_BROWSER", "ENVIRONMENT_DESKTOP")
#: The finish reason of a natural end of turn: a reply without a function call then means the
#: model is done. Any other (`MAX_TOKENS`, `SAFETY`, `RECITATION`, `MALFORMED_FUNCTION_CALL`,
#: `OTHER`, ...) leaves such a reply without an action (see `computer_use.reply_text`).
NATURAL_STOPS: Final = ("STOP",)
#: Where `search` goes (the reference implementation's default search engine).
SEARCH_URL: Final = "https://www.google.com"
_REGULAR_DECISIONS: Final = frozenset({"", "regular", "allowed", "allow"})
_DIRECTIONS: Final[Mapping[str, tuple[int, int]]] = {
    "up": (0, 1),
    "down": (0, -1),
    "left": (-1, 0),
    "right": (1, 0),
}


def environment_for(model: str) -> str:
    """The computer-use environment a Gemini model is asked to operate.

    >>> environment_for("gemini-2.5-computer-use-preview-10-2025"), environment_for("gemini-3.5-flash")
    ('ENVIRONMENT_BROWSER', 'ENVIRONMENT_DESKTOP')
    """
    name = model.rsplit("/", 1)[-1]
    browser = name.startswith(BROWSER_ONLY_MODELS) or "2.5-computer-use" in name
    return "ENVIRONMENT_BROWSER" if browser else "ENVIRONMENT_DESKTOP"


@attrs.frozen
class _Reader:
    """Reads one function call's arguments into gestures on a given screen."""

    screen: ScreenMap
    platform: str
    pixels_per_click: int

    def point(
        self, args: Mapping[str, Any], name: str, x: str = "x", y: str = "y"
    ) -> tuple[int, int]:
        return native_point(args.get(x), args.get(y), name, self.screen)

    def flag(self, args: Mapping[str, Any], field: str, default: bool, name: str) -> bool:
        """A true/false argument, `default` when absent or null; anything else is refused
        (`"false"` is not false)."""
        value = args.get(field)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise UnsupportedComputerAction(
                f"{name}: '{field}' must be true or false, got {excerpt(value)}"
            )
        return value

    def mod(self) -> str:
        return "command" if self.platform == "mac" else "ctrl"

    def navigate(self, url: str) -> tuple[Gesture, ...]:
        return (
            Gesture("keys", keys=(self.mod(), "l")),
            Gesture("type", text=url.strip()),
            Gesture("keys", keys=("enter",)),
        )

    def typing(self, args: Mapping[str, Any], name: str, *, at: bool) -> tuple[Gesture, ...]:
        gestures: list[Gesture] = []
        if at:
            gestures.append(Gesture("click", (self.point(args, name),)))
            if self.flag(args, "clear_before_typing", True, name):
                gestures += [
                    Gesture("keys", keys=(self.mod(), "a")),
                    Gesture("keys", keys=("backspace",)),
                ]
        gestures.append(Gesture("type", text=string_arg(args, "text", name)))
        if self.flag(args, "press_enter", at, name):
            gestures.append(Gesture("keys", keys=("enter",)))
        return tuple(gestures)

    def scroll(self, args: Mapping[str, Any], name: str, default: float) -> Gesture:
        step = _DIRECTIONS.get(text(args.get("direction")) or "")
        if step is None:
            raise UnsupportedComputerAction(
                f"{name}: unknown direction {excerpt(args.get('direction'))}"
            )
        sx, sy = step
        raw = args.get("magnitude_in_pixels", args.get("magnitude", default))
        magnitude = number(raw, f"{name}: magnitude")
        if not 0 <= magnitude <= GRID[0]:
            raise UnsupportedComputerAction(f"{name}: magnitude {magnitude!r} is off the grid")
        pixels = self.screen.length(magnitude, 0 if sx else 1)
        clicks = wheel_clicks(pixels, self.pixels_per_click)
        return Gesture("scroll", (self.point(args, name),), scroll=(sx * clicks, sy * clicks))

    def scroll_document(self, args: Mapping[str, Any]) -> Gesture:
        direction = args.get("direction")
        if direction in ("up", "down"):
            return Gesture("keys", keys=("pageup" if direction == "up" else "pagedown",))
        if direction in ("left", "right"):
            clicks = wheel_clicks(self.screen.screen_size[0] / 2, self.pixels_per_click)
            return Gesture("scroll", scroll=(clicks if direction == "right" else -clicks, 0))
        raise UnsupportedComputerAction(f"scroll_document: unknown direction {direction!r}")

    def drag(self, args: Mapping[str, Any], name: str) -> Gesture:
        if "start_x" in args:
            start = self.point(args, name, "start_x", "start_y")
            end = self.point(args, name, "end_x", "end_y")
        else:
            start = self.point(args, name)
            end = self.point(args, name, "destination_x", "destination_y")
        return Gesture("drag", (start, end))

    def key(self, args: Mapping[str, Any], kind: str, name: str) -> Gesture:
        key = args.get("key")
        try:
            return Gesture(kind, keys=(pyautogui_key(key, platform=self.platform),))
        except UnsupportedComputerAction as exc:
            raise UnsupportedComputerAction(f"{name}: {exc}") from None


_CLICKS: Final[Mapping[str, tuple[str, str]]] = {
    "click": ("click", "left"),
    "click_at": ("click", "left"),
    "middle_click": ("click", "middle"),
    "right_click": ("click", "right"),
    "double_click": ("double_click", "left"),
    "triple_click": ("triple_click", "left"),
    "mouse_down": ("mouse_down", "left"),
    "mouse_up": ("mouse_up", "left"),
    "move": ("move", "left"),
    "hover_at": ("move", "left"),
}
_NOTHING: Final = frozenset({"open_web_browser", "take_screenshot"})


def _table(r: _Reader) -> Mapping[str, Callable[[Mapping[str, Any], str], tuple[Gesture, ...]]]:
    return {
        "type": lambda a, n: r.typing(a, n, at=False),
        "type_text_at": lambda a, n: r.typing(a, n, at=True),
        "wait": lambda a, n: (Gesture("wait"),),
        "wait_5_seconds": lambda a, n: (Gesture("wait"),),
        "go_back": lambda a, n: (Gesture("keys", keys=("alt", "left")),),
        "go_forward": lambda a, n: (Gesture("keys", keys=("alt", "right")),),
        "navigate": lambda a, n: r.navigate(string_arg(a, "url", n, blank=False)),
        "search": lambda a, n: r.navigate(SEARCH_URL),
        "key_combination": lambda a, n: (
            Gesture("keys", keys=key_combo(a.get("keys"), platform=r.platform)),
        ),
        "hotkey": lambda a, n: (Gesture("keys", keys=key_list(a.get("keys"), n, r.platform)),),
        "press_key": lambda a, n: (r.key(a, "keys", n),),
        "key_down": lambda a, n: (r.key(a, "key_down", n),),
        "key_up": lambda a, n: (r.key(a, "key_up", n),),
        "scroll": lambda a, n: (r.scroll(a, n, 300),),
        "scroll_at": lambda a, n: (r.scroll(a, n, 800),),
        "scroll_document": lambda a, n: (r.scroll_document(a),),
        "drag_and_drop": lambda a, n: (r.drag(a, n),),
    }


def read_function_call(
    name: object,
    args: object,
    *,
    screen: ScreenMap,
    platform: str = "linux",
    pixels_per_click: int = 100,
) -> tuple[Gesture, ...]:
    """The gestures of one computer-use function call (none for a screenshot or opening the browser).

    >>> screen = ScreenMap((1000, 1000), (1920, 1080), (1920, 1080))
    >>> read_function_call("click_at", {"x": 500, "y": 300}, screen=screen)
    (Gesture(kind='click', points=((960, 324),), button='left', keys=(), scroll=(0, 0), text='', held=()),)
    """
    if not isinstance(name, str):
        raise UnsupportedComputerAction(f"function call without a name: {name!r}")
    if args is None:
        args = {}
    if not isinstance(args, Mapping):
        raise UnsupportedComputerAction(f"{name}: args must be an object, got {excerpt(args)}")
    reader = _Reader(screen, platform, pixels_per_click)
    if name in _NOTHING:
        return ()
    if name in _CLICKS:
        kind, button = _CLICKS[name]
        return (Gesture(kind, (reader.point(args, name),), button=button),)
    handler = _table(reader).get(name)
    if handler is None:
        raise UnsupportedComputerAction(f"unknown computer-use function {name!r}")
    return handler(args, name)


@attrs.frozen
class _Call:
    """One functionCall part: `given` says whether `call_id` is the API's own (sent back in
    its answer) or made up here as `{index}:{name}` (the API gave none; the answer has none)."""

    call_id: str
    name: str
    args: object
    given: bool

    @property
    def fields(self) -> Mapping[str, Any]:
        """The args when they are an object (else none: `read_function_call` refuses them)."""
        return obj(self.args)


def _calls(parts: Sequence[Any]) -> list[_Call]:
    """Each functionCall part of a turn. Whether an id was given is read from the part itself,
    never from the id's shape, so a record made before `_Call` existed reads the same."""
    found = []
    for index, part in enumerate(parts):
        call = dig(part, "functionCall")
        if not isinstance(call, Mapping):
            continue
        name = call.get("name")
        label = name if isinstance(name, str) else "?"
        given = text(call.get("id"))
        found.append(_Call(given or f"{index}:{label}", label, call.get("args"), given is not None))
    return found


def _ill_formed_id(parts: Sequence[Any]) -> str | None:
    """What is wrong with the function-call ids of a reply: an id that is not a string, or one
    given to two calls (both would run, the answers could not tell them apart)."""
    seen: set[str] = set()
    for part in parts:
        call_id = dig(part, "functionCall", "id")
        if call_id is None or call_id == "":
            continue
        if not isinstance(call_id, str):
            return f"a function call id must be a string, got {excerpt(call_id)}"
        if call_id in seen:
            return f"two function calls share the id {excerpt(call_id)}"
        seen.add(call_id)
    return None


def _safety_check(call: _Call) -> tuple[str, str, str] | None:
    """The call's pending safety check, failing closed: a `safety_decision` is pending unless
    its `decision` is a string naming a regular one (an ill-typed decision is pending too).
    Args that are not an object hold none here, and the call is refused when converted."""
    call_id = call.call_id
    decision = call.fields.get("safety_decision")
    if decision is None:
        return None
    if not isinstance(decision, Mapping):
        return (call_id, "safety_decision", excerpt(decision))
    verdict = decision.get("decision")
    if not isinstance(verdict, str):
        return (call_id, "safety_decision", excerpt(dict(decision)))
    if verdict.lower() in _REGULAR_DECISIONS:
        return None
    return (call_id, verdict, text(decision.get("explanation")) or "")


def _resendable(part: Mapping[str, Any]) -> bool:
    """Not an empty text part (which the API refuses)."""
    return not (part.get("text") == "" and len(part) == 1)


@attrs.frozen(kw_only=True)
class GeminiComputerProvider:
    """Gemini with the computer-use tool. Pure: the engine in `adapters.engine.client` does the I/O.

    `environment` overrides the per-model choice of `environment_for`;
    `display` is the screen size used when no PNG screenshot tells it;
    `platform` names the key set (`linux`, or `mac`); `pixels_per_click` is
    the scroll conversion; `thinking_budget` as for the plain provider.
    """

    api_key: str = attrs.field(repr=False, validator=valid_key)
    base_url: str | None = None
    environment: str | None = attrs.field(
        default=None,
        validator=refusing(
            f"one of {ENVIRONMENTS} or None",
            attrs.validators.optional(attrs.validators.in_(ENVIRONMENTS)),
        ),
    )
    display: tuple[int, int] = DEFAULT_DISPLAY
    platform: str = "linux"
    pixels_per_click: int = 100
    thinking_budget: int | None = None
    name = "gemini-computer"

    def _plain(self) -> GeminiProvider:
        return GeminiProvider(
            api_key=self.api_key, base_url=self.base_url, thinking_budget=self.thinking_budget
        )

    def encode(self, request: ModelRequest) -> HttpCall:
        """The generateContent call: history, the computer-use tool, the answers to pending calls."""
        check_action_space(request, "Gemini computer use")
        environment = self.environment or environment_for(request.model)
        continuation = request.continuation
        if continuation is not None and continuation.safety_checks:
            raise SafetyCheckPending(continuation.safety_checks, provider=self.name)
        if answering(continuation):
            earlier, latest = split_latest(request.messages)
            call = self._plain().encode(attrs.evolve(request, messages=earlier))
            self._answer(call.json["contents"], continuation, latest)
        else:
            call = self._plain().encode(request)
        call.json["tools"] = [{"computerUse": {"environment": environment}}]
        return call

    def _answer(
        self, contents: list[dict[str, Any]], continuation: Continuation, latest: Any
    ) -> None:
        screenshot = answer_screenshot(latest, "Gemini computer use")
        turn = items(native_turn(continuation, self.name))
        parts = [p for p in objects(turn) if _resendable(p)]
        # The ids come from the whole record, as `decode` made them: the parts left out of
        # the resent turn (an empty text) must not shift the made-up `{index}:{name}` ids.
        calls = _calls(turn)
        self._check_record(continuation, turn, calls)
        responses: list[dict[str, Any]] = []
        for call in calls:
            response: dict[str, Any] = {"name": call.name, "response": {"status": "done"}}
            if call.given:
                response["id"] = call.call_id
            responses.append({"functionResponse": response})
        responses[-1]["functionResponse"]["parts"] = [
            {"inlineData": {"mimeType": media_type(screenshot), "data": screenshot.data}}
        ]
        if not contents or contents[-1]["role"] != "user":
            contents.append({"role": "user", "parts": [{"text": "(continued)"}]})
        contents.append({"role": "model", "parts": parts})
        texts = [{"text": latest.text}] if latest.text else []
        contents.append({"role": "user", "parts": [*responses, *texts]})

    def _check_record(
        self, continuation: Continuation, turn: list[Any], calls: list[_Call]
    ) -> None:
        """Refuse a continuation whose calls are not its record's, in order, ids intact."""
        ids = tuple(call.call_id for call in calls)
        missing = next((c for c in continuation.call_ids if c not in ids), None)
        problem = _ill_formed_id(turn)
        if missing is not None:
            problem = f"has no function call {missing!r}"
        elif problem is None and continuation.call_ids != ids:
            problem = f"holds the calls {list(ids)!r}, not {list(continuation.call_ids)!r}"
        if problem is not None:
            raise ConfigurationError(
                f"{self.name}: the continuation's native record {problem}; "
                "start a new chain (no continuation)"
            )

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The converted function calls as reply text, and the turn to answer next."""
        plain = self._plain().decode(request, body)
        parts = items(dig(body, "candidates", 0, "content", "parts"))
        problem = _ill_formed_id(parts)
        if problem is not None:
            raise ResponseDecodeError(problem, provider=self.name, model=request.model)
        calls = _calls(parts)
        thoughts = [plain.text] if plain.text.strip() else []
        thoughts += [t for call in calls if (t := text(call.fields.get("intent")))]
        checks = tuple(c for call in calls if (c := _safety_check(call)) is not None)
        stopped = early_stop(plain.finish_reason, NATURAL_STOPS)
        reply = (
            self._reply_text(request, thoughts, calls, checks, stopped) if calls or thoughts else ""
        )
        continuation = Continuation(
            response_id=str(obj(body).get("responseId", "")),
            call_ids=tuple(call.call_id for call in calls),
            safety_checks=checks,
            native=native_record(parts, provider=self.name, model=request.model),
        )
        return attrs.evolve(plain, text=reply, continuation=continuation)

    def _reply_text(
        self,
        request: ModelRequest,
        thoughts: list[str],
        calls: list[_Call],
        checks: tuple[tuple[str, str, str], ...],
        stopped: str | None,
    ) -> str:
        sent = display_size(request.messages, self.display)
        screen = ScreenMap(GRID, sent, sent)
        with converting("computer-use function call", self.name, request.model):
            gestures = [
                g
                for call in bounded(calls, "function calls")
                for g in read_function_call(
                    call.name,
                    call.args,
                    screen=screen,
                    platform=self.platform,
                    pixels_per_click=self.pixels_per_click,
                )
            ]
            return reply_text(
                thoughts,
                gestures if calls else None,
                request.action_space,
                notes=safety_notes(checks),
                refuse=bool(checks),
                stopped=stopped,
            )

    def usage(self, body: Any) -> Usage:
        """The token counts of a reply body, as for the plain `generateContent`."""
        return metadata_usage(body)

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for a non-2xx reply, as for the plain Gemini API."""
        return self._plain().error(status, headers, body, text)

    def url(self, model: str) -> str:
        """The generateContent endpoint of `model`."""
        return self._plain().url(model)


# --- registration ------------------------------------------------------------------


_client = client_factory(GeminiComputerProvider)


def register(registry: ModelRegistry) -> None:
    """`gemini-computer/<model>`, and the bare computer-use model names (`gemini-*computer-use*`)."""
    registry.register_scheme(
        "gemini-computer",
        _client,
        description="gemini-computer/<model> (computer use; GEMINI_API_KEY or GENAI_API_KEY)",
        needs="GEMINI_API_KEY or GENAI_API_KEY",
        computer_use=True,
    )
    registry.register_family(
        r"gemini-[\w.-]*computer-use",
        "gemini-computer",
        description="gemini-*computer-use* (computer use)",
        examples=("gemini-2.5-computer-use-preview-10-2025",),
    )


__all__ = [
    "BROWSER_ONLY_MODELS",
    "ENVIRONMENTS",
    "GRID",
    "NATURAL_STOPS",
    "SEARCH_URL",
    "GeminiComputerProvider",
    "environment_for",
    "read_function_call",
]
