"""One model call as data: what to ask, what a reply means, what a failure is.

* `call_flow` is a generator that yields `PendingCall`s (the request and the
  HTTP call for it) and receives each one's `Delivered` reply, or has the
  typed error thrown in; it decides the context-length fallback and returns
  the `ModelResponse`;
* `interpret` turns one HTTP reply into a `ProviderReply` or a typed error;
* `transport_error` turns an httpx exception into a typed error;
* `Call` is one call as a client drives it: the flow, the tries so far, the
  deadline, the replies that may have been billed.

Nothing here does I/O: the layers of `adapters.engine.client` do, each
handing its outcome back to these.
"""

from __future__ import annotations

import contextlib
import json
import logging
import socket
import time
from collections.abc import Generator, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final

import attrs
import httpx

from adapters._wire import log_quote, redact, request_id_from, secret_values
from adapters.contract import (
    HttpCall,
    ModelRequest,
    ModelResponse,
    Provider,
    ProviderReply,
    ReadsUsage,
    Usage,
)
from adapters.engine.body import scrub_json, scrubbed_headers
from adapters.engine.retry import RetryPolicy, retry_after_from_headers, stamina_arguments
from adapters.engine.server_limits import server_limit_error
from adapters.errors import (
    ContextLengthError,
    DeadlineExceededError,
    ModelCallError,
    RedirectError,
    ResponseDecodeError,
    RetryableError,
    ServerUnreachableError,
)

logger = logging.getLogger("adapters.engine.client")


@attrs.frozen
class PendingCall:
    """One request the flow wants answered: the request, its HTTP call, whether it is the fallback."""

    request: ModelRequest
    call: HttpCall
    fallback: bool = False


@attrs.frozen
class Answer:
    """One HTTP reply as read from the wire: status, headers and the whole decoded body."""

    status: int
    headers: Mapping[str, str]
    content: bytes


@attrs.frozen
class Unanswered:
    """A try that got no reply (`status` None), or whose reply's body was cut off in transit."""

    error: httpx.RequestError
    status: int | None = None


@attrs.frozen
class Delivered:
    """A decoded reply handed back to the flow, with the number of HTTP tries so far and the
    earlier 2xx replies that gave none (see `ModelCallError.billed`)."""

    reply: ProviderReply
    tries: int
    billed: tuple[Usage, ...] = ()


def shortened(request: ModelRequest) -> ModelRequest | None:
    """The context-length fallback: only the system message and the latest user message.

    `None` when that would send the same messages again (nothing to drop) or
    there is no user message. A stateful continuation is dropped too: the
    shortened request starts a fresh conversation.
    """
    messages = request.messages
    system = messages[:1] if messages and messages[0].role == "system" else ()
    users = [m for m in messages[len(system) :] if m.role == "user"]
    if not users:
        return None
    kept = (*system, users[-1])
    if kept == messages and request.continuation is None:
        return None
    return attrs.evolve(request, messages=kept, continuation=None)


def call_flow(
    provider: Provider, request: ModelRequest
) -> Generator[PendingCall, Delivered, ModelResponse]:
    """The logic of one model call, without I/O: ask, and on a context-length error ask once shorter."""
    first = PendingCall(request, provider.encode(request))
    try:
        done = yield first
    except ContextLengthError:
        shorter = shortened(request)
        if shorter is None:
            raise
        done = yield PendingCall(shorter, provider.encode(shorter), fallback=True)
        return _response(done, fallback=True)
    return _response(done, fallback=False)


def _response(done: Delivered, *, fallback: bool) -> ModelResponse:
    reply = done.reply
    return ModelResponse(
        text=reply.text,
        usage=reply.usage,
        model=reply.model,
        tries=done.tries,
        billed=done.billed,
        raw=reply.raw,
        context_fallback=fallback,
        continuation=reply.continuation,
        finish_reason=reply.finish_reason,
        refusal=reply.refusal,
    )


def _scrub(error: ModelCallError, secrets: tuple[str, ...]) -> ModelCallError:
    if secrets:
        error.message = redact(error.message, secrets)
        error.args = (error.message,)
    return error


#: What a provider's code may raise on a reply shape it did not expect.
_UNREADABLE: Final = (
    KeyError,
    IndexError,
    TypeError,
    ValueError,
    AttributeError,
    ArithmeticError,
    RecursionError,
)


def reported_usage(provider: Provider, body: Any) -> Usage:
    """The token usage a 2xx JSON `body` reports, read by the provider apart from decoding it
    (`ReadsUsage`); `Usage()` when there is no body, the provider cannot read usage on its
    own, or its reading fails."""
    if body is None or not isinstance(provider, ReadsUsage):
        return Usage()
    try:
        return provider.usage(body)
    except _UNREADABLE:
        return Usage()


def billed_unread(error: ModelCallError, status: int) -> ModelCallError:
    """`error`, marked as billed with no usage read when it came with a 2xx `status` (a body
    cut off, too large, or past the deadline) and is not marked yet."""
    if 200 <= status < 300 and not error.billed:
        error.billed = (Usage(),)
    return error


#: The body of a reply that is empty or not JSON (`None` is JSON's `null`).
_NOT_JSON: Final = object()


def _decoded(
    provider: Provider, request: ModelRequest, body: Any
) -> ProviderReply | ModelCallError:
    """The provider's reading of a 2xx reply's JSON `body`, or the error it means, carrying
    in `billed` the usage the body reported (the provider may have billed it)."""
    failed: ModelCallError
    if body is _NOT_JSON:
        failed, body = ResponseDecodeError("reply body is not JSON", provider=provider.name), None
    else:
        try:
            return provider.decode(request, body)
        except ModelCallError as exc:
            failed = exc
        except _UNREADABLE as exc:
            failed = ResponseDecodeError(
                f"unexpected reply shape ({type(exc).__name__}: {exc})", provider=provider.name
            )
    failed.billed = (reported_usage(provider, body),)
    return failed


def interpret(
    provider: Provider,
    pending: PendingCall,
    status: int,
    headers: Mapping[str, str],
    content: bytes,
    *,
    now: datetime | None = None,
) -> ProviderReply:
    """One HTTP reply as a decoded `ProviderReply`, or raise the typed error it means.

    A 2xx reply that is not JSON, or that the provider cannot read, is a
    `ResponseDecodeError`; any error from a 2xx reply carries in `billed` the
    usage its body reported (`reported_usage`), since the provider may have
    billed it. A redirect is a `RedirectError`. Other statuses go
    to the provider's `error()`; the request id, status and `Retry-After` (an
    HTTP date measured from `now`, default the current time) are filled in
    where it left them out. Any key of the request that the server echoes
    (in headers, body or text) is redacted before the provider sees it.
    """
    secrets = secret_values(pending.call.headers)
    headers = scrubbed_headers(headers, secrets)
    try:
        body: Any = scrub_json(json.loads(content), secrets) if content else _NOT_JSON
    except (ValueError, RecursionError):
        body = _NOT_JSON
    error: ModelCallError | ProviderReply
    if 200 <= status < 300:
        error = _decoded(provider, pending.request, body)
        if isinstance(error, ProviderReply):
            return error
    elif 300 <= status < 400:
        where = headers.get("location", "")[:200] or "an unnamed address"
        error = RedirectError(
            f"the server redirected to {where}; redirects are never followed, so a key only "
            "reaches the configured address: set base_url to the address that answers",
            provider=provider.name,
        )
    else:
        text = redact(content.decode("utf-8", errors="replace"), secrets)
        error = provider.error(status, headers, None if body is _NOT_JSON else body, text)
        error = server_limit_error(status, text, error) or error
        if isinstance(error, RetryableError) and error.retry_after is None:
            error.retry_after = retry_after_from_headers(headers, now or datetime.now(UTC))
    raise completed(error, pending, status, headers)


def completed(
    error: ModelCallError, pending: PendingCall, status: int, headers: Mapping[str, str]
) -> ModelCallError:
    """`error` with status, request id and model filled in and any echoed secret scrubbed."""
    if error.status is None:
        error.status = status
    secrets = secret_values(pending.call.headers)
    if error.request_id is None:
        error.request_id = request_id_from(headers)
    if error.request_id is not None:
        error.request_id = redact(error.request_id, secrets)
    if error.model is None:
        error.model = pending.request.model
    return _scrub(error, secrets)


def with_wait(headers: Mapping[str, str], error: ModelCallError) -> Mapping[str, str]:
    """A reply's headers for the rate limiter, with the error's own wait as `retry-after-ms`
    when the headers ask for none: Gemini puts its wait in the body (`RetryInfo.retryDelay`),
    which a limiter reading headers alone would miss, pausing the other workers 1 s."""
    wait = getattr(error, "retry_after", None)
    if wait is None or retry_after_from_headers(headers, datetime.now(UTC)) is not None:
        return headers
    # Capped before scaling: a finite wait of 1e306 s would overflow to inf milliseconds,
    # which the limiter reads as no wait at all (a 1 s pause).
    return {**headers, "retry-after-ms": str(min(wait, 1e12) * 1000.0)}


_RETRYABLE_TRANSPORT: Final = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
    httpx.DecodingError,
)


def _unreachable(exc: httpx.RequestError, url: str | None) -> str | None:
    """What to check when `exc` says nothing listens at `url` (connection refused) or its
    host name does not resolve, found among its causes; `None` for any other failure."""
    cause: BaseException | None = exc
    where = url or "the model's URL"
    while cause is not None:
        if isinstance(cause, ConnectionRefusedError):
            return (
                f"nothing is listening at {where} (connection refused): check that the "
                "model server is running, and that the base URL's host and port are the ones "
                "it listens on"
            )
        if isinstance(cause, socket.gaierror):
            return (
                f"the host name in {where} does not resolve ({cause.strerror or cause}): "
                "check the host name in the base URL"
            )
        cause = cause.__cause__ or cause.__context__
    return None


def transport_error(
    provider: str, exc: httpx.RequestError, secrets: tuple[str, ...] = (), url: str | None = None
) -> ModelCallError:
    """The typed error for an httpx failure that produced no reply.

    Nothing listening at `url` (the request's), or a host name that does not
    resolve, is a `ServerUnreachableError` saying what to check; other
    timeouts, connection and TLS failures, dropped connections and corrupt
    transfers are retryable; a bad URL or a local protocol error is not.
    """
    unreachable = (
        _unreachable(exc, url) if isinstance(exc, httpx.ConnectError | httpx.ProxyError) else None
    )
    message = f"{type(exc).__name__}: {str(exc) or type(exc).__name__}"
    error: ModelCallError
    if unreachable is not None:
        error = ServerUnreachableError(unreachable, provider=provider)
    elif isinstance(exc, _RETRYABLE_TRANSPORT):
        error = RetryableError(message, provider=provider)
    else:
        error = ModelCallError(message, provider=provider)
    return _scrub(error, secrets)


class Call:
    """One call as a client's layers drive it: the flow, the pending call, the tries so far.

    Everything but the I/O itself is here, so the sync and async layers differ
    only in `for` / `async for` and `await`.
    """

    def __init__(self, provider: Provider, request: ModelRequest, policy: RetryPolicy) -> None:
        self.provider = provider
        self.policy = policy
        self.tries = 0
        self.billed: list[Usage] = []
        self._started = 0.0
        self.deadline = None if policy.timeout is None else time.monotonic() + policy.timeout
        self._flow = call_flow(provider, request)
        self.pending: PendingCall = next(self._flow)
        self.admitted = False  # the next try holds room in the limiter's token budget already

    def admit(self) -> None:
        """The first try was admitted by the token budget: the deadline starts now (the wait
        for room in a shared budget is a place in a queue, not time the call took)."""
        if self.policy.timeout is not None:
            self.deadline = time.monotonic() + self.policy.timeout
        self.admitted = True

    def take_admission(self) -> bool:
        """Whether the next try was admitted already (only a call's first try is: later
        ones wait for room in their turn)."""
        admitted, self.admitted = self.admitted, False
        return admitted

    def retrying(self) -> dict[str, Any]:
        """The `stamina.retry_context` arguments for the pending call: the policy, within the deadline."""
        return stamina_arguments(self.policy, deadline=self.deadline)

    def remaining(self) -> float | None:
        """Seconds left before the call's deadline (`None`: no deadline); raises once it has passed."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            late = (
                f"the call's deadline of {self.policy.timeout} s passed before try {self.tries + 1}"
            )
            raise DeadlineExceededError(late, provider=self.provider.name)
        return left

    def expired(self) -> bool:
        """Whether the call's deadline has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def sending(self) -> PendingCall:
        """Count one more HTTP try of the pending call and return it."""
        self.tries += 1
        self._started = time.perf_counter()
        return self.pending

    @contextlib.contextmanager
    def trying(self) -> Iterator[None]:
        """Around one try: note the replies a failed try may have been billed for."""
        try:
            yield
        except ModelCallError as error:
            self.billed.extend(error.billed)
            raise

    def secrets(self) -> tuple[str, ...]:
        """The credentials the pending call carries (see `secret_values`)."""
        return secret_values(self.pending.call.headers)

    def failed(self, outcome: Unanswered) -> ModelCallError:
        """The typed error of a try that got no reply, or whose reply's body was cut off
        (raised outside any `except`, so it is never chained to httpx's)."""
        url = self.pending.call.url
        error = transport_error(self.provider.name, outcome.error, self.secrets(), url)
        if outcome.status is not None:
            billed_unread(error, outcome.status)
        logger.debug("%s try %d failed: %s", self.provider.name, self.tries, error.message)
        return error

    def receive(self, answer: Answer) -> ProviderReply:
        """The decoded reply of one try, or raise its typed error."""
        if logger.isEnabledFor(logging.DEBUG):
            elapsed = time.perf_counter() - self._started
            name, status = self.provider.name, answer.status
            logger.debug("%s try %d: HTTP %d in %.3f s", name, self.tries, status, elapsed)
        return interpret(self.provider, self.pending, answer.status, answer.headers, answer.content)

    def advance(self, outcome: ProviderReply | ModelCallError) -> ModelResponse | None:
        """Hand the pending call's final reply or error to the flow: the response once it is
        done, `None` when it asks for another request (now pending); an error it does not
        recover from is raised."""
        try:
            if isinstance(outcome, ProviderReply):
                self.pending = self._flow.send(Delivered(outcome, self.tries, tuple(self.billed)))
                return None
            outcome.tries = self.tries
            outcome.billed = tuple(self.billed)
            self.pending = self._flow.throw(outcome)
        except StopIteration as stop:
            response: ModelResponse = stop.value
            return response
        logger.warning(
            "%s: prompt too long for the context window (%s); retrying once with "
            "the system message and the latest user message",
            self.provider.name,
            log_quote(outcome.message),
        )
        return None


#: Where a call's 2xx replies that gave no step ride on an exception that is not a
#: `ModelCallError` (a cancel, an episode's timeout, Ctrl-C): see `billed_of`.
_BILLED: Final = "osharm_billed"


@contextlib.contextmanager
def billed_on_the_way_out(call: Call) -> Iterator[None]:
    """Around a call: an exception other than a `ModelCallError` ending it (which carries its
    own `billed`) takes along the 2xx replies its tries got, so they are still charged."""
    try:
        yield
    except BaseException as exc:
        if call.billed and not isinstance(exc, ModelCallError):
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _BILLED, tuple(call.billed))
        raise


def billed_of(error: BaseException) -> tuple[Usage, ...]:
    """The 2xx replies a failed or interrupted call got that gave no step (each may have been
    billed): a `ModelCallError`'s `billed`, or those riding on a cancel or timeout."""
    if isinstance(error, ModelCallError):
        return error.billed
    billed: tuple[Usage, ...] = getattr(error, _BILLED, ())
    return billed


__all__ = [
    "Answer",
    "Call",
    "Delivered",
    "PendingCall",
    "Unanswered",
    "billed_of",
    "billed_unread",
    "call_flow",
    "completed",
    "interpret",
    "reported_usage",
    "shortened",
    "transport_error",
    "with_wait",
]
