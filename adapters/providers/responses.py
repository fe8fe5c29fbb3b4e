"""OpenAI Responses API for `computer-use-preview`: pure request encoding and reply decoding.

The model drives the desktop through the `computer_use_preview` tool. One
conversation is a chain of responses:

1. the first request sends the whole history (`input_text` / `input_image`
   user parts, `output_text` assistant parts, the system text as
   `instructions`), the tool with the display size read from the screenshot,
   and `truncation: "auto"`;
2. the reply's `computer_call`s are converted here, deterministically and
   without a second model call, into the configured action space, and written
   as reply text the core parser reads back (`adapters.providers.computer_use`);
3. the next request sets `previous_response_id` and answers every pending call
   with a `computer_call_output` carrying the *current* screenshot.

Where the chain stands travels in `ProviderReply.continuation`
(`osharm_core.Continuation`), which the agent keeps in its immutable state.

Pending safety checks are never acknowledged on the user's behalf: this module
never sends `acknowledged_safety_checks`, and it does not hand out the flagged
call's actions either, since executing them would be acknowledging in all but
name. A reply with a pending check is surfaced (continuation, `raw`, and a note
per check in the reply text) and ends with FAIL; continuing such a chain raises
`SafetyCheckPending` before any request is sent. To go on, the caller decides:
start a fresh chain (no continuation), or drive the API itself.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import attrs

from adapters._wire import (
    detail_count,
    error_text,
    native_record,
    split_system,
    token_count,
)
from adapters.contract import HttpCall, ModelRequest, ProviderReply, Usage
from adapters.errors import (
    ModelCallError,
    ResponseDecodeError,
    SafetyCheckPending,
)
from adapters.providers._credentials import valid_key
from adapters.providers._read import dig, obj, objects, text
from adapters.providers.computer_use import (
    Gesture,
    ScreenMap,
    early_stop,
    quote_thought,
    read_action,
    reply_text,
)
from adapters.providers.native import (
    ACTION_SPACES,
    DEFAULT_DISPLAY,
    answer_screenshot,
    bounded,
    check_action_space,
    converting,
    latest_screenshot,
    png_size,
    safety_notes,
)
from adapters.providers.openai_chat import API_KEY_ENV, DEFAULT_OPENAI_BASE_URL, chat_error
from osharm_core import Continuation, ImagePart, Message, TextPart
from osharm_core.errors import excerpt, refusing

#: OpenAI's API root; the key comes from the same variable as for chat (`API_KEY_ENV`).
DEFAULT_BASE_URL: Final = DEFAULT_OPENAI_BASE_URL
#: The tool of the preview model and the generally available `computer` tool.
TOOLS: Final = ("computer_use_preview", "computer")
#: The status of a response that ended naturally: a reply without a computer_call then means
#: the model is done. An `incomplete` one (`incomplete_details.reason` `max_output_tokens` or
#: `content_filter`) leaves such a reply without an action (see `computer_use.reply_text`).
NATURAL_STOPS: Final = ("completed",)
#: `reasoning_summary`'s default: the summary the request's model accepts (see `summary_for`).
BY_MODEL: Final = "by-model"
# OpenAI's API reference: "`concise` is supported for `computer-use-preview` models and all
# reasoning models after `gpt-5`"; gpt-5 itself answers 400 "Supported values are: 'detailed'".
_CONCISE: Final = re.compile(r"computer-use-preview|gpt-(?:5\.\d|[6-9]|[1-9]\d)")


def summary_for(model: str) -> str:
    """The reasoning summary asked of `model` by default: `concise` where it is documented
    (computer-use-preview, gpt-5.1 and later: gpt-6 too), else `auto`, which every reasoning model takes.

    >>> summary_for("computer-use-preview-2025-03-11"), summary_for("gpt-5.4"), summary_for("gpt-5")
    ('concise', 'concise', 'auto')
    >>> summary_for("gpt-6"), summary_for("gpt-10-pro"), summary_for("gpt-5-mini"), summary_for("gpt-4o")
    ('concise', 'concise', 'auto', 'auto')
    """
    return "concise" if _CONCISE.match(model.rsplit("/", 1)[-1].lower()) else "auto"


def _input_part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    return {"type": "input_image", "image_url": part.data_url, "detail": part.detail}


def _input_message(message: Message) -> dict[str, Any] | None:
    if message.role == "assistant":
        text = message.text
        if not text:
            return None
        return {"role": "assistant", "content": [{"type": "output_text", "text": text}]}
    parts = [_input_part(p) for p in message.parts if not (isinstance(p, TextPart) and not p.text)]
    return {"role": "user", "content": parts} if parts else None


def render_input(messages: Iterable[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The `instructions` text and the `input` items for a whole conversation.

    >>> from osharm_core import Message, TextPart
    >>> render_input([Message("system", (TextPart("s"),)), Message("assistant", (TextPart("a"),))])
    ('s', [{'role': 'assistant', 'content': [{'type': 'output_text', 'text': 'a'}]}])
    """
    system, others = split_system(messages)
    return system, [item for item in map(_input_message, others) if item is not None]


def _last_user(messages: Sequence[Message]) -> Message | None:
    return next((m for m in reversed(messages) if m.role == "user"), None)


def _texts(parts: object, *fields: str) -> list[str]:
    """The non-empty strings under `fields` of each object of the array `parts`."""
    return [t for part in objects(parts) for f in fields if (t := text(part.get(f)))]


def _call_actions(item: Mapping[str, Any]) -> list[Any]:
    """The actions of one `computer_call` (`action`, or a batched `actions` list)."""
    actions = item.get("actions")
    return actions if isinstance(actions, list) else [item.get("action")]


def _safety_checks(item: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The (id, code, message) of each pending safety check of a `computer_call`.

    Fails closed: whatever is there and not empty is pending, a malformed check too (an
    id that is not a string, or none; not an object; one object in place of the list),
    its id and code quoted from what came.

    >>> _safety_checks({"pending_safety_checks": [{"id": "sc_1", "code": "c", "message": "m"}]})
    [('sc_1', 'c', 'm')]
    >>> _safety_checks({"pending_safety_checks": {"id": 7, "code": "c"}})
    [('7', 'c', '')]
    >>> _safety_checks({"pending_safety_checks": []}), _safety_checks({})
    ([], [])
    """
    checks = item.get("pending_safety_checks")
    if not checks:
        return []
    return [_safety_check(c) for c in (checks if isinstance(checks, list) else [checks])]


def _quoted(value: object) -> str:
    """A string field as it came, any other value quoted (`""` for none)."""
    return value if isinstance(value, str) else "" if value is None else excerpt(value)


def _safety_check(check: object) -> tuple[str, str, str]:
    if not isinstance(check, Mapping):
        return (excerpt(check), "malformed_safety_check", "")
    check_id = check.get("id")
    return (
        check_id if isinstance(check_id, str) else excerpt(check_id),
        _quoted(check.get("code")),
        _quoted(check.get("message")),
    )


@attrs.frozen
class _Output:
    thoughts: tuple[str, ...]
    actions: tuple[Any, ...]
    call_ids: tuple[str, ...]
    safety_checks: tuple[tuple[str, str, str], ...]
    calls: int
    items: tuple[Mapping[str, Any], ...] = ()


def _call_id(item: Mapping[str, Any], number: int, seen: set[str], where: Mapping[str, Any]) -> str:
    """A `computer_call`'s `call_id`, which the next request must answer: a call without
    one (or repeating an earlier one) could be performed but never answered."""
    call_id = item.get("call_id")
    named = f"computer_call {number} (id {excerpt(item.get('id'))})"
    if not isinstance(call_id, str) or not call_id:
        raise ResponseDecodeError(
            f"{named} has no call_id to answer, got {excerpt(call_id)}", **where
        )
    if call_id in seen:
        raise ResponseDecodeError(f"{named} repeats call_id {excerpt(call_id)}", **where)
    seen.add(call_id)
    return call_id


def _read_output(output: list[Any], where: Mapping[str, Any]) -> _Output:
    thoughts: list[str] = []
    actions: list[Any] = []
    call_ids: list[str] = []
    seen: set[str] = set()
    checks: list[tuple[str, str, str]] = []
    items: list[Mapping[str, Any]] = []
    calls = 0
    for item in objects(output):
        kind = item.get("type")
        if kind == "reasoning":
            thoughts.extend(_texts(item.get("summary"), "text"))
        elif kind == "message":
            thoughts.extend(_texts(item.get("content"), "text", "refusal"))
        elif kind == "computer_call":
            calls += 1
            call_ids.append(_call_id(item, calls, seen, where))
            items.append(item)
            actions.extend(_call_actions(item))
            checks.extend(_safety_checks(item))
    return _Output(
        tuple(thoughts), tuple(actions), tuple(call_ids), tuple(checks), calls, tuple(items)
    )


def _finish_reason(body: Mapping[str, Any]) -> str | None:
    """`incomplete_details.reason` (`max_output_tokens`, `content_filter`) or else the status."""
    return text(dig(body, "incomplete_details", "reason")) or text(body.get("status"))


def _refusal(output: list[Any]) -> str | None:
    """The text of the `refusal` parts of the output messages, when there are any."""
    messages = (item for item in objects(output) if item.get("type") == "message")
    return "\n".join(t for item in messages for t in _texts(item.get("content"), "refusal")) or None


@attrs.frozen(kw_only=True)
class ResponsesProvider:
    """`computer-use-preview` over the Responses API. Pure: the engine in `adapters.engine.client` does the I/O.

    `base_url` includes `/v1` (default `https://api.openai.com/v1`);
    `environment` is the tool's environment (`linux` for OSWorld's ubuntu);
    `display` is the screen size used when no PNG screenshot tells it;
    `reasoning_summary` (`concise`, `detailed`, `auto`, or None to leave it
    out) asks for the model's reasoning summary, which becomes the thought;
    the default, `BY_MODEL`, asks for what the request's model accepts
    (see `summary_for`);
    `resend_user_text` adds the latest user text next to the
    `computer_call_output`s of a continued chain; `pixels_per_click` is the
    scroll conversion (see `adapters.providers.computer_use`). `tool` picks
    the protocol: `computer_use_preview` (the preview model) or `computer`,
    the generally available tool (batched `actions`, no display size or
    environment in the tool, the native calls kept in the continuation).
    """

    api_key: str = attrs.field(repr=False, validator=valid_key)
    base_url: str | None = None
    environment: str = "linux"
    display: tuple[int, int] = DEFAULT_DISPLAY
    reasoning_summary: str | None = BY_MODEL
    resend_user_text: bool = False
    pixels_per_click: int = 100
    tool: str = attrs.field(
        default="computer_use_preview",
        validator=refusing(f"one of {TOOLS}", attrs.validators.in_(TOOLS)),
    )
    name = "openai-responses"

    @property
    def url(self) -> str:
        """The Responses endpoint."""
        return (self.base_url or DEFAULT_BASE_URL).rstrip("/") + "/responses"

    def encode(self, request: ModelRequest) -> HttpCall:
        """The Responses call for `request`: the whole history, or the answers to pending calls."""
        check_action_space(request, "computer-use-preview")
        messages = request.messages
        system, items = render_input(messages)
        width, height = self._display(request)
        if self.tool == "computer":
            body: dict[str, Any] = {"model": request.model, "tools": [{"type": "computer"}]}
        else:
            body = {
                "model": request.model,
                "tools": [
                    {
                        "type": "computer_use_preview",
                        "display_width": width,
                        "display_height": height,
                        "environment": self.environment,
                    }
                ],
                "truncation": "auto",
            }
        if system:
            body["instructions"] = system
        summary = self.reasoning_summary
        if summary is not None:
            body["reasoning"] = {
                "summary": summary_for(request.model) if summary == BY_MODEL else summary
            }
        continuation = request.continuation
        if continuation is None:
            body["input"] = items
        else:
            if continuation.safety_checks:
                raise SafetyCheckPending(continuation.safety_checks, provider=self.name)
            body["previous_response_id"] = continuation.response_id
            body["input"] = self._continued_input(continuation, messages)
        headers = {"authorization": f"Bearer {self.api_key}", "content-type": "application/json"}
        return HttpCall(method="POST", url=self.url, headers=headers, json=body)

    def _display(self, request: ModelRequest) -> tuple[int, int]:
        """The size of the latest screenshot (`display` when there is none)."""
        screenshot = latest_screenshot(request.messages)
        return (png_size(screenshot.data) if screenshot else None) or self.display

    def _continued_input(
        self, continuation: Continuation, messages: Sequence[Message]
    ) -> list[dict[str, Any]]:
        latest = _last_user(messages)
        if not continuation.call_ids:
            item = _input_message(latest) if latest is not None else None
            return [item] if item is not None else []
        screenshot = answer_screenshot(latest, "computer-use-preview")
        items: list[dict[str, Any]] = [
            {
                "type": "computer_call_output",
                "call_id": call_id,
                "output": {"type": "computer_screenshot", "image_url": screenshot.data_url},
            }
            for call_id in continuation.call_ids
        ]
        if self.resend_user_text and latest is not None and latest.text:
            items.append({"role": "user", "content": [{"type": "input_text", "text": latest.text}]})
        return items

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The converted actions as reply text, the usage, and where the chain now stands."""
        where: dict[str, Any] = {"provider": self.name, "model": request.model}
        failure = obj(body).get("error")
        if isinstance(failure, Mapping) or obj(body).get("status") == "failed":
            said = error_text(text(obj(failure).get("message")) or "")
            raise ResponseDecodeError(f"response failed: {said or 'no message'}", **where)
        output = obj(body).get("output")
        if not isinstance(output, list):
            raise ResponseDecodeError("reply has no output list", **where)
        read = _read_output(output, where)
        given_id = body.get("id")
        response_id = text(given_id)
        if response_id is None and (read.calls or read.safety_checks):
            # Its calls could run but never be answered, and its pending checks would be lost:
            # the next request starts a new chain that no longer refuses to go on.
            raise ResponseDecodeError(
                f"a reply with computer_calls has no response id to continue, "
                f"got {excerpt(given_id)}",
                **where,
            )
        # Nothing at all (a refusal with no text, a budget spent on hidden reasoning) is an
        # empty reply, not a DONE: the model said nothing.
        reason = _finish_reason(body)
        stopped = early_stop(reason, NATURAL_STOPS)
        reply = self._reply_text(request, read, stopped) if read.calls or read.thoughts else ""
        native = native_record(read.items, provider=self.name, model=request.model)
        continuation = (
            Continuation(
                response_id=response_id,
                call_ids=read.call_ids,
                safety_checks=read.safety_checks,
                native=native if self._keeps_calls(read) else "",
            )
            if response_id is not None
            else None
        )
        return ProviderReply(
            text=reply,
            usage=self.usage(body),
            model=text(body.get("model")) or request.model,
            raw=body,
            continuation=continuation,
            finish_reason=reason,
            refusal=_refusal(output),
        )

    def _keeps_calls(self, read: _Output) -> bool:
        return self.tool == "computer" and bool(read.items)

    def gestures(self, request: ModelRequest, actions: Sequence[Any]) -> list[Gesture]:
        """The reply's actions read into the shared vocabulary, on the latest screenshot's pixels."""
        platform = "mac" if self.environment == "mac" else "linux"
        screen = ScreenMap.pixels(self._display(request))
        read = (
            read_action(a, platform=platform, pixels_per_click=self.pixels_per_click, screen=screen)
            for a in actions
        )
        return [g for g in read if g is not None]

    def _reply_text(self, request: ModelRequest, read: _Output, stopped: str | None) -> str:
        with converting("computer_call", self.name, request.model):
            actions = bounded(read.actions, "actions")
            return reply_text(
                read.thoughts,
                self.gestures(request, actions) if read.calls else None,
                request.action_space,
                notes=safety_notes(read.safety_checks),
                refuse=bool(read.safety_checks),
                stopped=stopped,
            )

    def usage(self, body: Any) -> Usage:
        """The token counts of a reply body's `usage`, decodable or not."""
        usage = obj(body).get("usage")
        return Usage(
            input_tokens=token_count(usage, "input_tokens"),
            output_tokens=token_count(usage, "output_tokens"),
            total_tokens=token_count(usage, "total_tokens"),
            cached_input_tokens=detail_count(usage, "input_tokens_details", "cached_tokens"),
            reasoning_tokens=detail_count(usage, "output_tokens_details", "reasoning_tokens"),
        )

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for a non-2xx reply: OpenAI's error format (see `adapters.providers.openai_chat.chat_error`)."""
        return chat_error(self.name, status, headers, body, text)


__all__ = [
    "ACTION_SPACES",
    "API_KEY_ENV",
    "BY_MODEL",
    "DEFAULT_BASE_URL",
    "DEFAULT_DISPLAY",
    "NATURAL_STOPS",
    "TOOLS",
    "ResponsesProvider",
    "SafetyCheckPending",
    "png_size",
    "quote_thought",
    "render_input",
    "summary_for",
]
