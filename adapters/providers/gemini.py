"""Google Gemini `generateContent` (REST, v1beta): pure request encoding and reply decoding.

Wire rules this module applies:

- the system text goes in `systemInstruction`; the other messages become
  `contents` with roles `user` / `model` (consecutive messages of one role
  merged, empty text parts dropped);
- images are `inlineData` parts (`mimeType`, base64 `data`);
- `generationConfig` carries `maxOutputTokens` (the reference ignores it; we
  honour it), `temperature` and `topP`;
- the key travels in the `x-goog-api-key` header, never in the URL, so logged
  URLs cannot leak it.

Reply text is the concatenation of the first candidate's text parts (thought
parts left out). A blocked prompt or a candidate without text is a
`ResponseDecodeError` naming the block or finish reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import quote

import attrs

from adapters._wire import (
    ErrorBody,
    delta_seconds,
    error_for_status,
    is_retryable_status,
    merged_turns,
    request_id_from,
    retry_after_seconds,
    split_system,
    token_count,
)
from adapters.contract import (
    HttpCall,
    ModelClient,
    ModelRequest,
    ProviderReply,
    Usage,
    plausible_count,
)
from adapters.errors import (
    AuthenticationError,
    ContextLengthError,
    ModelCallError,
    QuotaExceededError,
    ResponseDecodeError,
    RetryableError,
)
from adapters.providers._credentials import keyed_client, valid_key
from adapters.providers._read import dig, obj, objects, text
from adapters.providers.anthropic import media_type
from osharm_core import ImagePart, Message, TextPart

if TYPE_CHECKING:
    from adapters.registry import ClientOptions, ModelRegistry

DEFAULT_BASE_URL: Final = "https://generativelanguage.googleapis.com"
#: The environment variables `client_for` reads the key from, in order (the second is the reference's name).
API_KEY_ENVS: Final = ("GEMINI_API_KEY", "GENAI_API_KEY")

_RETRYABLE_CODES: Final = frozenset(
    {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"}
)
#: Finish reasons that mean a safety or policy filter stopped the answer (kept as `refusal`).
REFUSAL_REASONS: Final = frozenset(
    {"SAFETY", "RECITATION", "BLOCKLIST", "PROHIBITED_CONTENT", "SPII", "IMAGE_SAFETY"}
)
_AUTH_CODES: Final = frozenset({"UNAUTHENTICATED", "PERMISSION_DENIED"})
_AUTH_REASONS: Final = frozenset({"API_KEY_INVALID", "API_KEY_EXPIRED", "API_KEY_SERVICE_BLOCKED"})
_TOO_LONG: Final = re.compile(
    r"exceeds the maximum number of tokens|input token count|context (window|length)", re.IGNORECASE
)
_SECONDS: Final = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s*$")


def _part(part: TextPart | ImagePart) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    return {"inlineData": {"mimeType": media_type(part), "data": part.data}}


def _role(role: str) -> str:
    return "model" if role == "assistant" else "user"


def render_contents(messages: Iterable[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system text and the `contents` list for `messages`.

    >>> from osharm_core import Message, TextPart
    >>> render_contents([Message("system", (TextPart("s"),)), Message("user", (TextPart("a"),)),
    ...                  Message("assistant", (TextPart("b"),))])
    ('s', [{'role': 'user', 'parts': [{'text': 'a'}]}, {'role': 'model', 'parts': [{'text': 'b'}]}])
    """
    system, others = split_system(messages)
    return system, merged_turns(others, _part, parts_key="parts", role=_role)


def _retry_delay(headers: Mapping[str, str], details: object) -> float | None:
    """Seconds to wait from a `Retry-After` header or a `google.rpc.RetryInfo` detail ("37s")."""
    seconds = retry_after_seconds(headers)
    if seconds is not None:
        return seconds
    for detail in objects(details):
        match = _SECONDS.match(text(detail.get("retryDelay")) or "")
        seconds = delta_seconds(match.group(1)) if match else None
        if seconds is not None:  # a delay too long to be a float is unreadable, as if absent
            return seconds
    return None


def _reasons(details: object) -> set[str]:
    return {reason for d in objects(details) if (reason := text(d.get("reason")))}


def _daily_quota(details: object) -> bool:
    """Whether a `google.rpc.QuotaFailure` detail names a per-day quota (waiting minutes will not help)."""
    return any(
        "PerDay" in (text(violation.get("quotaId")) or "")
        for detail in objects(details)
        for violation in objects(detail.get("violations"))
    )


def _left_out_candidates(usage: Mapping[str, Any], thoughts: int | None) -> int | None:
    """The candidate tokens of a `usageMetadata` that names none: protobuf JSON leaves out
    zero counts, so a thinking model that spent its whole output budget on thoughts reports
    no `candidatesTokenCount`; 0 then, unless the other counts cannot vouch for it (an
    unreadable `thoughtsTokenCount`, or a readable total that the prompt, thoughts and
    tool-use prompt do not add up to), when the output is unknown."""
    if "thoughtsTokenCount" in usage and thoughts is None:
        return None
    total, prompt = token_count(usage, "totalTokenCount"), token_count(usage, "promptTokenCount")
    if total is not None and prompt is not None:
        tools = token_count(usage, "toolUsePromptTokenCount") or 0
        if total != prompt + (thoughts or 0) + tools:
            return None
    return 0


def metadata_usage(body: object) -> Usage:
    """The token counts of a `generateContent` reply's `usageMetadata`.

    `promptTokenCount` already includes `cachedContentTokenCount`; thoughts are output.
    """
    usage = obj(body).get("usageMetadata")
    candidates_tokens = token_count(usage, "candidatesTokenCount")
    thoughts = token_count(usage, "thoughtsTokenCount")
    if isinstance(usage, Mapping) and "candidatesTokenCount" not in usage:
        candidates_tokens = _left_out_candidates(usage, thoughts)
    return Usage(
        input_tokens=token_count(usage, "promptTokenCount"),
        output_tokens=None
        if candidates_tokens is None
        else plausible_count(candidates_tokens + (thoughts or 0)),
        total_tokens=token_count(usage, "totalTokenCount"),
        cached_input_tokens=token_count(usage, "cachedContentTokenCount"),
        reasoning_tokens=thoughts,
    )


@attrs.frozen(kw_only=True)
class GeminiProvider:
    """Gemini over `generateContent`. Pure: the engine in `adapters.engine.client` does the I/O.

    `base_url` is the host root (default
    `https://generativelanguage.googleapis.com`); `thinking_budget`, when set,
    is sent as `generationConfig.thinkingConfig.thinkingBudget` (thinking
    models count thoughts against `maxOutputTokens`).
    """

    api_key: str = attrs.field(repr=False, validator=valid_key)
    base_url: str | None = None
    thinking_budget: int | None = None
    name = "gemini"

    def url(self, model: str) -> str:
        """The `generateContent` endpoint for `model` (a leading `models/` is accepted)."""
        model = model.removeprefix("models/")
        root = (self.base_url or DEFAULT_BASE_URL).rstrip("/")
        return f"{root}/v1beta/models/{quote(model, safe='')}:generateContent"

    def encode(self, request: ModelRequest) -> HttpCall:
        """The `generateContent` call for `request`."""
        system, contents = render_contents(request.messages)
        config: dict[str, Any] = {
            "maxOutputTokens": request.max_tokens,
            "temperature": request.temperature,
            "topP": request.top_p,
        }
        if self.thinking_budget is not None:
            config["thinkingConfig"] = {"thinkingBudget": self.thinking_budget}
        body: dict[str, Any] = {"contents": contents, "generationConfig": config}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        headers = {"x-goog-api-key": self.api_key, "content-type": "application/json"}
        return HttpCall(method="POST", url=self.url(request.model), headers=headers, json=body)

    def decode(self, request: ModelRequest, body: Any) -> ProviderReply:
        """The first candidate's text (possibly empty), usage, model version and finish reason.

        A blocked prompt (`promptFeedback.blockReason`) is an empty reply
        whose finish reason and refusal are the block reason; a candidate
        stopped by a safety filter keeps its `finishReason` as the refusal.
        A reply with neither candidates nor a block reason raises.
        """
        where: dict[str, Any] = {"provider": self.name, "model": request.model}
        blocked = text(dig(body, "promptFeedback", "blockReason"))
        if blocked:
            return self._reply(request, obj(body), "", blocked, refusal=blocked)
        candidate = dig(body, "candidates", 0)
        if not isinstance(candidate, Mapping):
            raise ResponseDecodeError("reply has no candidates", **where)
        parts = objects(dig(candidate, "content", "parts"))
        texts = [t for p in parts if not p.get("thought") and (t := text(p.get("text")))]
        reason = text(candidate.get("finishReason"))
        refusal = reason if reason in REFUSAL_REASONS else None
        return self._reply(request, body, "".join(texts), reason, refusal=refusal)

    def _reply(
        self,
        request: ModelRequest,
        body: Mapping[str, Any],
        reply: str,
        reason: str | None,
        *,
        refusal: str | None,
    ) -> ProviderReply:
        version = body.get("modelVersion")
        return ProviderReply(
            text=reply,
            usage=self.usage(body),
            model=version if isinstance(version, str) else request.model,
            raw=body,
            finish_reason=reason,
            refusal=refusal,
        )

    def usage(self, body: Any) -> Usage:
        """The token counts of a reply body (see `metadata_usage`), decodable or not."""
        return metadata_usage(body)

    def error(
        self, status: int, headers: Mapping[str, str], body: Any, text: str
    ) -> ModelCallError:
        """The typed error for a non-2xx reply (`{"error": {"code", "message", "status"}}`)."""
        headers = {k.lower(): v for k, v in headers.items()}
        if isinstance(body, list) and body:  # some Google front ends wrap the error in a list
            body = body[0]
        parsed = ErrorBody.read(body, status, text, label_field="status")
        code, described = parsed.label, parsed.described
        where: dict[str, Any] = {
            "provider": self.name,
            "request_id": request_id_from(headers),
        }
        details = parsed.detail.get("details")
        if status in (401, 403) or code in _AUTH_CODES or _reasons(details) & _AUTH_REASONS:
            return AuthenticationError(described, status=status, **where)
        if status == 400 and _TOO_LONG.search(parsed.message):
            return ContextLengthError(described, status=status, **where)
        if status == 429 and _daily_quota(details):
            return QuotaExceededError(described, status=status, **where)
        if is_retryable_status(status) or code in _RETRYABLE_CODES:
            return RetryableError(
                described, retry_after=_retry_delay(headers, details), status=status, **where
            )
        return error_for_status(status, described, **where)


# --- registration ------------------------------------------------------------------


def client_factory(provider: Callable[..., Any]) -> Callable[[ClientOptions], ModelClient]:
    """A registry factory building `provider(api_key=, base_url=)` from Gemini's settings."""
    return keyed_client(
        provider, vendor="Gemini", key_envs=API_KEY_ENVS, url_envs=(), default_url=DEFAULT_BASE_URL
    )


_client = client_factory(GeminiProvider)


def register(registry: ModelRegistry) -> None:
    """`gemini/<model>` and bare `gemini-*` names."""
    registry.register_scheme(
        "gemini", _client, description="gemini/<model> (GEMINI_API_KEY or GENAI_API_KEY)"
    )
    registry.register_family(
        r"gemini-",
        "gemini",
        description="gemini-*",
        examples=("gemini-2.5-pro", "gemini-2.5-flash", "gemini-3.5-flash"),
    )


__all__ = [
    "API_KEY_ENVS",
    "DEFAULT_BASE_URL",
    "REFUSAL_REASONS",
    "GeminiProvider",
    "render_contents",
]
