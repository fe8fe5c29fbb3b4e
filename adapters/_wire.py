"""Wire helpers shared by the providers and the engine: request ids, credentials, error bodies, turns."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from adapters.contract import plausible_count
from adapters.errors import (
    AuthenticationError,
    BadRequestError,
    ModelCallError,
    ResponseDecodeError,
    RetryableError,
)
from osharm_core import ImagePart, Message, TextPart

# --- helpers shared by providers -------------------------------------------

#: Headers that carry a request id, in the order they are looked up.
REQUEST_ID_HEADERS: Final = (
    "x-request-id",
    "request-id",
    "x-goog-request-id",
    "apim-request-id",
    "x-ms-request-id",
)

#: Headers whose values are credentials; never logged, redacted from error text.
SECRET_HEADERS: Final = frozenset(
    {"authorization", "api-key", "x-api-key", "x-goog-api-key", "proxy-authorization"}
)


def request_id_from(headers: Mapping[str, str]) -> str | None:
    """The provider's request id from reply `headers`, whatever header name it uses.

    >>> request_id_from({"request-id": "req_1"}), request_id_from({})
    ('req_1', None)
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    for name in REQUEST_ID_HEADERS:
        value = lowered.get(name)
        if value:
            return value
    return None


def is_retryable_status(status: int) -> bool:
    """Whether an HTTP status is worth another try: 408, 429, 5xx (not 501/505), Anthropic's 529.

    >>> [is_retryable_status(s) for s in (400, 429, 500, 501, 503, 529)]
    [False, True, True, False, True, True]
    """
    return status in (408, 429) or (status >= 500 and status not in (501, 505))


def error_for_status(
    status: int,
    message: str,
    *,
    provider: str,
    request_id: str | None = None,
    model: str | None = None,
) -> ModelCallError:
    """The typed error a plain HTTP status implies, for providers with nothing more specific.

    400 is a `BadRequestError`, 401/403 an `AuthenticationError`, retryable
    statuses (see `is_retryable_status`) a `RetryableError`, anything else a
    plain `ModelCallError`.

    >>> type(error_for_status(503, "busy", provider="p")).__name__
    'RetryableError'
    """
    cls: type[ModelCallError]
    if status == 400:
        cls = BadRequestError
    elif status in (401, 403):
        cls = AuthenticationError
    elif is_retryable_status(status):
        cls = RetryableError
    else:
        cls = ModelCallError
    return cls(message, provider=provider, status=status, request_id=request_id, model=model)


def secret_values(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The credential values in request `headers` (a bearer token without its scheme word).

    >>> secret_values({"Authorization": "Bearer sk-1", "content-type": "application/json"})
    ('Bearer sk-1', 'sk-1')
    """
    found: list[str] = []
    for name, value in headers.items():
        if name.lower() in SECRET_HEADERS and value:
            found.append(value)
            scheme, _, token = value.partition(" ")
            if token and scheme.lower() in ("bearer", "basic", "token"):
                found.append(token)
    return tuple(found)


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with every occurrence of each secret (4+ characters) replaced by `[redacted]`.

    >>> redact("bad key sk-12345", ["sk-12345"])
    'bad key [redacted]'
    """
    for secret in sorted(secrets, key=len, reverse=True):
        if len(secret) >= 4:
            text = text.replace(secret, "[redacted]")
            if not (secret.isascii() and secret.isprintable()):
                # How a library's error quotes it: escaped, as in a bytes or str repr.
                for shown in (repr(secret.encode("utf-8", "replace"))[2:-1], repr(secret)[1:-1]):
                    text = text.replace(shown, "[redacted]")
    return text


#: The most characters of a server's own words (an error message, its type) an error quotes.
MAX_ERROR_TEXT: Final = 500


def error_text(text: str) -> str:
    """A server's words as an error quotes them: stripped, cut after `MAX_ERROR_TEXT` characters.

    >>> error_text(" oops "), error_text("A" * 5_000_000)[495:]
    ('oops', 'AAAAA... (5,000,000 characters)')
    """
    text = text.strip()
    if len(text) <= MAX_ERROR_TEXT:
        return text
    return f"{text[:MAX_ERROR_TEXT]}... ({len(text):,} characters)"


#: C0 and C1 control characters (C0 first: JSON escapes those itself), DEL, the Unicode line
#: and paragraph separators, and the bidirectional controls (the marks ALM, LRM and RLM, the
#: embeddings and overrides, the isolates): what a terminal acts on (escape sequences, bells),
#: a reader of the output takes for a new line, or what makes a line read otherwise than it is.
_CONTROL_RANGES: Final = (
    (0x00, 0x1F), (0x7F, 0x9F), (0x061C, 0x061C), (0x200E, 0x200F), (0x2028, 0x2029),
    (0x202A, 0x202E), (0x2066, 0x2069),
)  # fmt: skip


def _codes(ranges: Iterable[tuple[int, int]]) -> list[int]:
    return [code for first, last in ranges for code in range(first, last + 1)]


def _any_of(ranges: Iterable[tuple[int, int]]) -> re.Pattern[str]:
    return re.compile("[" + "".join(f"\\u{a:04x}-\\u{b:04x}" for a, b in ranges) + "]")


CONTROL_CHARACTERS: Final = _any_of(_CONTROL_RANGES)
# Each control as its Python escape (`\x1b`, `\n`, `\u202e`): one C-speed `str.translate`
# pass, however many controls a hostile text holds.
_AS_ESCAPES: Final = {
    code: chr(code).encode("unicode_escape").decode("ascii") for code in _codes(_CONTROL_RANGES)
}


def printable(text: str, *, keep: str = "") -> str:
    r"""`text` with each control character (see `CONTROL_CHARACTERS`) but those in `keep`
    written as its Python escape, so text from a task list, a desktop or a model can neither
    forge an output line nor send a terminal an escape sequence.

    >>> print(printable("os/evil\n[os/x] finished\x1b]0;title\x07\u2028"))
    os/evil\n[os/x] finished\x1b]0;title\x07\u2028
    >>> printable("a\tb\n\x9b2J", keep="\n\t")
    'a\tb\n\\x9b2J'
    """
    if CONTROL_CHARACTERS.search(text) is None:  # the usual case, scanned at C speed
        return text
    if not keep:
        return text.translate(_AS_ESCAPES)
    kept = {ord(char) for char in keep}
    return text.translate({c: e for c, e in _AS_ESCAPES.items() if c not in kept})


# What `json.dumps(..., ensure_ascii=False)` leaves raw that a terminal or a reader acts on:
# the controls but C0 (which `json` always escapes), and lone surrogates (no encoding can
# write them). These only occur inside JSON strings, where a `\uXXXX` escape means the same.
_RAW_IN_JSON_RANGES: Final = (*_CONTROL_RANGES[1:], (0xD800, 0xDFFF))
_RAW_IN_JSON: Final = _any_of(_RAW_IN_JSON_RANGES)
_JSON_ESCAPES: Final = {code: f"\\u{code:04x}" for code in _codes(_RAW_IN_JSON_RANGES)}


def json_for_terminal(value: object, *, indent: int | None = None) -> str:
    r"""`value` as JSON text that keeps other characters readable (not `\uXXXX`) but writes
    each control a terminal acts on as a `\uXXXX` escape: the same JSON, safe to print.

    >>> print(json_for_terminal({"reply": "é\x1b[2J\x9b1A\u202eok"}))
    {"reply": "é\u001b[2J\u009b1A\u202eok"}
    """
    text = json.dumps(value, ensure_ascii=False, indent=indent)
    return text.translate(_JSON_ESCAPES) if _RAW_IN_JSON.search(text) else text


def log_quote(text: str | None) -> str:
    r"""A provider's words (a refusal, a finish or stop reason, an error message) as a log
    record quotes them: cut as `error_text` cuts them, control characters escaped.

    >>> log_quote("no\x1b]52;c;QUJD\x07\nStep 2: DONE"), log_quote(None)
    ('no\\x1b]52;c;QUJD\\x07\\nStep 2: DONE', 'None')
    >>> len(log_quote("x" * 5_000_000)) < 600
    True
    """
    return "None" if text is None else printable(error_text(text))


def fallback_message(status: int, text: str) -> str:
    """What an error reply says when its body names no message: its text, or that it was empty.

    >>> fallback_message(502, " <html>Bad Gateway</html> "), fallback_message(503, "")
    ('<html>Bad Gateway</html>', 'HTTP 503 with an empty body')
    """
    return error_text(text) or f"HTTP {status} with an empty body"


@attrs.frozen
class ErrorBody:
    """The `{"error": {...}}` object of an error reply, read without trusting its shape.

    `detail` is the error object (empty when there is none); `label` its type
    or status word (`""` when absent); `message` its message, else the reply
    text, else a note that the body was empty (see `fallback_message`); label
    and message are cut as `error_text` cuts them.
    """

    detail: Mapping[str, Any]
    label: str
    message: str

    @classmethod
    def read(cls, body: Any, status: int, text: str, *, label_field: str) -> ErrorBody:
        """The error object of the decoded `body`, its label taken from the field `label_field`.

        >>> ErrorBody.read({"error": {"type": "api_error", "message": "oops"}}, 500, "",
        ...                label_field="type").described
        'api_error: oops'
        >>> ErrorBody.read(None, 502, "Bad Gateway", label_field="type").described
        'Bad Gateway'
        """
        detail = body.get("error") if isinstance(body, Mapping) else None
        detail = detail if isinstance(detail, Mapping) else {}
        label = detail.get(label_field)
        message = detail.get("message")
        return cls(
            detail=detail,
            label=error_text(label) if isinstance(label, str) else "",
            message=(error_text(message) if isinstance(message, str) else "")
            or fallback_message(status, text),
        )

    @property
    def described(self) -> str:
        """`label: message`, or the message alone when there is no label."""
        return f"{self.label}: {self.message}" if self.label else self.message


def delta_seconds(text: str | None) -> float | None:
    """A `Retry-After` value given in seconds, or `None`: absent, not a number, or not finite.

    A negative number waits 0. This is the one reading of delta seconds: the engine's
    `parse_retry_after` uses it too, so a provider and the engine agree on `inf`, `1e999`
    and `nan` (unreadable, as if absent).

    >>> delta_seconds("12"), delta_seconds(" -3 "), delta_seconds("1e999"), delta_seconds("nan")
    (12.0, 0.0, None, None)
    """
    if text is None:
        return None
    try:
        seconds = float(text.strip())
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


def retry_after_seconds(headers: Mapping[str, str]) -> float | None:
    """A `Retry-After` header (any name case) given in seconds; `None` when absent or
    unreadable (see `delta_seconds`).

    HTTP dates are left to the client, which reads them when a provider's
    error carries no wait.

    >>> retry_after_seconds({"Retry-After": "12"}), retry_after_seconds({"retry-after": "soon"})
    (12.0, None)
    >>> retry_after_seconds({"retry-after": "inf"}) is None
    True
    """
    return delta_seconds({k.lower(): v for k, v in headers.items()}.get("retry-after"))


def token_count(usage: object, field: str) -> int | None:
    """The integer `usage[field]` of a decoded reply's usage object; `None` when absent, not an
    int, or out of range (negative, or `MAX_TOKEN_COUNT` and past: JSON allows 400 digits).

    >>> token_count({"input_tokens": 7, "cached": True}, "input_tokens")
    7
    >>> token_count({"cached": True}, "cached"), token_count(None, "input_tokens")
    (None, None)
    >>> token_count({"n": -1}, "n"), token_count({"n": 10**400}, "n")
    (None, None)
    """
    value = usage.get(field) if isinstance(usage, Mapping) else None
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    return plausible_count(value)


def detail_count(usage: object, group: str, field: str) -> int | None:
    """The integer `usage[group][field]` (a usage breakdown such as `prompt_tokens_details`), or `None`.

    >>> detail_count({"prompt_tokens_details": {"cached_tokens": 5}}, "prompt_tokens_details", "cached_tokens")
    5
    >>> detail_count({"prompt_tokens_details": None}, "prompt_tokens_details", "cached_tokens")
    """
    details = usage.get(group) if isinstance(usage, Mapping) else None
    return token_count(details, field)


def native_record(turn: Any, *, provider: str, model: str) -> str:
    """A reply's native turn as the JSON kept in `Continuation.native` (and resent next step).

    JSON readers take `NaN` and `Infinity`, but no request may carry them, so a turn holding
    one (or nested past what JSON can write) is a `ResponseDecodeError` now rather than a
    failure of every later request.

    >>> native_record([{"input": {"x": 1}}], provider="p", model="m")
    '[{"input": {"x": 1}}]'
    >>> native_record([{"x": float("nan")}], provider="p", model="m")
    Traceback (most recent call last):
    adapters.errors.ResponseDecodeError: p: the reply holds a number JSON cannot send back (NaN or Infinity)
    """
    try:
        return json.dumps(turn, ensure_ascii=False, allow_nan=False)
    except (ValueError, RecursionError):
        raise ResponseDecodeError(
            "the reply holds a number JSON cannot send back (NaN or Infinity)",
            provider=provider,
            model=model,
        ) from None


def split_system(messages: Iterable[Message]) -> tuple[str, list[Message]]:
    """The system messages' text joined by newlines, and the other messages in order.

    For wire formats that carry the system text in a field of its own.

    >>> system, others = split_system([Message("system", (TextPart("s"),)), Message("user", ())])
    >>> system, [m.role for m in others]
    ('s', ['user'])
    """
    system: list[str] = []
    others: list[Message] = []
    for message in messages:
        if message.role == "system":
            system.append(message.text)
        else:
            others.append(message)
    return "\n".join(system), others


def merged_turns(
    messages: Iterable[Message],
    render: Callable[[TextPart | ImagePart], dict[str, Any] | None],
    *,
    parts_key: str,
    role: Callable[[str], str] = str,
) -> list[dict[str, Any]]:
    """`{"role": role(m.role), parts_key: [rendered parts]}` turns that alternate roles.

    Each part goes through `render` (`None` drops it); a message left with no
    parts is dropped, and consecutive messages of one role are merged into one
    turn. `role` maps a neutral role to the wire's (unchanged by default).

    >>> merged_turns([Message("user", (TextPart("a"),)), Message("user", (TextPart("b"),))],
    ...              lambda p: {"text": p.text}, parts_key="parts")
    [{'role': 'user', 'parts': [{'text': 'a'}, {'text': 'b'}]}]
    """
    turns: list[dict[str, Any]] = []
    for message in messages:
        parts = [p for p in map(render, message.parts) if p is not None]
        if not parts:
            continue
        name = role(message.role)
        if turns and turns[-1]["role"] == name:
            turns[-1][parts_key].extend(parts)
        else:
            turns.append({"role": name, parts_key: parts})
    return turns
