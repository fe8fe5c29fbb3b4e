"""The model-call engine: any `Provider` over httpx, with retries and the context-length fallback.

One call is written once, as data and pure functions:

* `call_flow` is a generator that yields `PendingCall`s (the request and the
  HTTP call for it) and receives each one's `Delivered` reply, or has the
  typed error thrown in; it decides the context-length fallback and returns
  the `ModelResponse`;
* `interpret` turns one HTTP reply into a `ProviderReply` or a typed error;
* `transport_error` turns an httpx exception into a typed error.

`HttpModelClient.complete` and `.acomplete` are thin shells that drive that
flow: each pending call is sent with `stamina.retry_context` applying the
client's `RetryPolicy`, the sync one with `httpx.Client`, the async one with
`httpx.AsyncClient`.

What a server sends is never trusted: redirects are not followed (keys go to
the configured origin only), bodies are read within `max_response_bytes` and
the policy's deadline (see `adapters.engine.body`), and keys, which live only in
`HttpCall.headers` and are never logged, are scrubbed from everything the
server sends back before it is decoded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import threading
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Generator, Iterator, Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Final, Self

import attrs
import httpx
import stamina

from adapters._checks import positive_int
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
from adapters.engine.body import (
    ACCEPT_ENCODING,
    DEFAULT_MAX_RESPONSE_BYTES,
    BodyReader,
    scrub_json,
    scrubbed_headers,
)
from adapters.engine.deadline import (
    bound_reads,
    reading_until,
    shut_connections,
    watch_connections,
    within,
)
from adapters.engine.jsonbody import json_body
from adapters.engine.limits import Limiter, RateLimiter
from adapters.engine.retry import RetryPolicy, retry_after_from_headers, stamina_arguments
from adapters.engine.server_limits import server_limit_error
from adapters.engine.transport import ShardedAsyncTransport
from adapters.errors import (
    ClientClosedError,
    ConfigurationError,
    ContextLengthError,
    DeadlineExceededError,
    ModelCallError,
    RateLimitWaitError,
    RedirectError,
    ResponseDecodeError,
    RetryableError,
)
from osharm_core.errors import excerpt, is_finite_number, number_excerpt

logger = logging.getLogger(__name__)

#: Read (and write, pool) timeout 120 s, connect timeout 10 s.
DEFAULT_TIMEOUT: Final = httpx.Timeout(120.0, connect=10.0)
#: Enough pooled connections for many agents sharing one client.
DEFAULT_LIMITS: Final = httpx.Limits(max_connections=128, max_keepalive_connections=64)
#: The methods `HttpModelClient` calls on a limiter (see `adapters.engine.limits.Limiter`).
_LIMITER_METHODS: Final = ("admit", "release", "reserve", "hold", "unreserve", "observe")


def client_timeout(timeout: object) -> httpx.Timeout | None:
    """`timeout` as the client takes it: an `httpx.Timeout`, or a number of seconds > 0 for
    every phase (as httpx and the openai SDK take it), made one; `None` stays `None`. Anything
    else is a `ConfigurationError`.

    >>> client_timeout(30)
    Timeout(timeout=30.0)
    """
    if timeout is None or isinstance(timeout, httpx.Timeout):
        return timeout
    if is_finite_number(timeout) and timeout > 0:  # type: ignore[operator]
        return httpx.Timeout(float(timeout))  # type: ignore[arg-type]
    raise ConfigurationError(
        "timeout must be an httpx.Timeout or a finite number of seconds > 0; got "
        f"{type(timeout).__name__} {number_excerpt(timeout)}"
    )


def client_retry(retry: object) -> RetryPolicy | None:
    """`retry` when it is a `RetryPolicy` or `None`, else a `ConfigurationError`."""
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigurationError(
            "retry must be a RetryPolicy (e.g. RetryPolicy(attempts=3)) or None; got "
            f"{type(retry).__name__} {excerpt(retry)}"
        )
    return retry


def client_limiter(limiter: object) -> Limiter | None:
    """`limiter` when it is `None` or has a `Limiter`'s methods (a `RateLimiter`), else a
    `ConfigurationError` naming the first it lacks."""
    if limiter is None:
        return None
    for name in _LIMITER_METHODS:
        if not callable(getattr(limiter, name, None)):
            raise ConfigurationError(
                f"limiter must be a RateLimiter (or have its {name}() method) or None; got "
                f"{type(limiter).__name__} {excerpt(limiter)}"
            )
    return limiter  # type: ignore[return-value]


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
class Cut:
    """A reply whose status and headers came but whose body was cut off in transit."""

    status: int
    error: httpx.RequestError


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


_UNREADABLE: Final = (
    KeyError,
    IndexError,
    TypeError,
    ValueError,
    AttributeError,
    ArithmeticError,
    RecursionError,
)


def reported_usage(provider: object, body: Any) -> Usage:
    """The token usage a 2xx JSON `body` reports, read by the provider apart from decoding it
    (`ReadsUsage`); `Usage()` when there is no body, the provider cannot read usage on its
    own, or its reading fails."""
    if body is None or not isinstance(provider, ReadsUsage):
        return Usage()
    try:
        usage = provider.usage(body)
    except _UNREADABLE:
        return Usage()
    return usage if isinstance(usage, Usage) else Usage()


def billed_unread(error: ModelCallError, status: int) -> ModelCallError:
    """`error`, marked as billed with no usage read when it came with a 2xx `status` (a body
    cut off, too large, or past the deadline) and is not marked yet."""
    if 200 <= status < 300 and not error.billed:
        error.billed = (Usage(),)
    return error


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
        body: Any = scrub_json(json.loads(content), secrets) if content else None
        parsed = content != b""
    except (ValueError, RecursionError):
        body, parsed = None, False
    if 300 <= status < 400:
        where = headers.get("location", "")[:200] or "an unnamed address"
        redirect = RedirectError(
            f"the server redirected to {where}; redirects are never followed, so a key only "
            "reaches the configured address: set base_url to the address that answers",
            provider=provider.name,
        )
        raise _completed(redirect, pending, status, headers)
    if 200 <= status < 300:
        failed: ModelCallError
        try:
            if not parsed:
                raise ResponseDecodeError(
                    "reply body is not JSON", provider=provider.name, status=status
                )
            return provider.decode(pending.request, body)
        except ModelCallError as exc:
            failed = exc
        except _UNREADABLE as exc:
            failed = ResponseDecodeError(
                f"unexpected reply shape ({type(exc).__name__}: {exc})", provider=provider.name
            )
        failed.billed = (reported_usage(provider, body),)
        raise _completed(failed, pending, status, headers)
    text = redact(content.decode("utf-8", errors="replace"), secrets)
    error = provider.error(status, headers, body, text)
    error = server_limit_error(status, text, error) or error
    if isinstance(error, RetryableError) and error.retry_after is None:
        error.retry_after = retry_after_from_headers(headers, now or datetime.now(UTC))
    raise _completed(error, pending, status, headers)


def _completed(
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


def _with_wait(headers: Mapping[str, str], error: ModelCallError) -> Mapping[str, str]:
    """A reply's headers for the rate limiter, with the error's own wait as `retry-after-ms`
    when the headers ask for none: Gemini puts its wait in the body (`RetryInfo.retryDelay`),
    which a limiter reading headers alone would miss, pausing the other workers 1 s."""
    wait = getattr(error, "retry_after", None)
    if wait is None or retry_after_from_headers(headers, datetime.now(UTC)) is not None:
        return headers
    # Capped before scaling: a finite wait of 1e306 s would overflow to inf milliseconds,
    # which the limiter reads as no wait at all (a 1 s pause).
    return {**headers, "retry-after-ms": str(min(wait, 1e12) * 1000.0)}


def _within(seconds: float | None, left: float) -> float:
    return left if seconds is None else min(seconds, left)


_RETRYABLE_TRANSPORT: Final = (
    httpx.TimeoutException,
    httpx.NetworkError,
    httpx.RemoteProtocolError,
    httpx.ProxyError,
    httpx.DecodingError,
)


def transport_error(
    provider: str, exc: httpx.RequestError, secrets: tuple[str, ...] = ()
) -> ModelCallError:
    """The typed error for an httpx failure that produced no reply.

    Timeouts, connection and TLS failures, dropped connections and corrupt
    transfers are retryable; a bad URL or a local protocol error is not.
    """
    what = str(exc) or type(exc).__name__
    message = f"{type(exc).__name__}: {what}"
    error: ModelCallError
    if isinstance(exc, _RETRYABLE_TRANSPORT):
        error = RetryableError(message, provider=provider)
    else:
        error = ModelCallError(message, provider=provider)
    return _scrub(error, secrets)


class _Turn:
    """When the rate-limiter turn a try waits for is due (`time.monotonic()`; `None`: none taken)."""

    def __init__(self) -> None:
        self.due: float | None = None

    def taken(self, wait: float) -> None:
        self.due = time.monotonic() + wait


class _Run:
    """One call as the shells drive it: the flow, the pending call, the tries so far.

    Everything but the I/O itself is here, so the sync and async shells differ
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
        self.pending: PendingCall | None = next(self._flow)
        self.response: ModelResponse | None = None
        self.admitted = False  # the next try holds room in the limiter's token budget already

    def admit(self) -> None:
        """The first try was admitted by the token budget: the deadline starts now (the wait
        for room in a shared budget is a place in a queue, not time the call took)."""
        if self.policy.timeout is not None:
            self.deadline = time.monotonic() + self.policy.timeout
        self.admitted = True

    def retrying(self) -> dict[str, Any]:
        """The `stamina.retry_context` arguments for the pending call: the policy, within the deadline."""
        return stamina_arguments(self.policy, deadline=self.deadline)

    def remaining(self) -> float | None:
        """Seconds left before the call's deadline (`None`: no deadline); raises once it has passed."""
        if self.deadline is None:
            return None
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise DeadlineExceededError(
                f"the call's deadline of {self.policy.timeout} s passed before try {self.tries + 1}",
                provider=self.provider.name,
            )
        return left

    def expired(self) -> bool:
        """Whether the call's deadline has passed."""
        return self.deadline is not None and time.monotonic() >= self.deadline

    def sending(self) -> PendingCall:
        """Count one more HTTP try of the pending call and return it."""
        assert self.pending is not None
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

    def receive(self, outcome: Answer | Cut | httpx.RequestError) -> ProviderReply:
        """The decoded reply of one try, or raise its typed error (never chained to httpx's)."""
        assert self.pending is not None
        name = self.provider.name
        if isinstance(outcome, Cut | httpx.RequestError):
            cause = outcome.error if isinstance(outcome, Cut) else outcome
            error = transport_error(name, cause, secret_values(self.pending.call.headers))
            if isinstance(outcome, Cut):
                billed_unread(error, outcome.status)
            logger.debug("%s try %d failed: %s", name, self.tries, error.message)
            raise error
        if logger.isEnabledFor(logging.DEBUG):
            elapsed = time.perf_counter() - self._started
            logger.debug("%s try %d: HTTP %d in %.3f s", name, self.tries, outcome.status, elapsed)
        return interpret(
            self.provider, self.pending, outcome.status, outcome.headers, outcome.content
        )

    def settle(self, outcome: ProviderReply | ModelCallError) -> None:
        """Hand the final reply or error of the pending call back to the flow."""
        try:
            if isinstance(outcome, ModelCallError):
                outcome.tries = self.tries
                outcome.billed = tuple(self.billed)
                self.pending = self._flow.throw(outcome)
                if self.pending.fallback:
                    logger.warning(
                        "%s: prompt too long for the context window (%s); retrying once with "
                        "the system message and the latest user message",
                        self.provider.name,
                        log_quote(outcome.message),
                    )
            else:
                self.pending = self._flow.send(Delivered(outcome, self.tries, tuple(self.billed)))
        except StopIteration as stop:
            self.pending = None
            self.response = stop.value

    def result(self) -> ModelResponse:
        """The response the flow returned."""
        assert self.response is not None
        return self.response


async def _close_at_shutdown(
    client: httpx.AsyncClient, forget: Callable[[], None]
) -> AsyncGenerator[None, None]:
    """Suspended until its event loop shuts down its async generators, then closes `client`."""
    try:
        yield
    finally:
        forget()
        await client.aclose()


class _LoopClient:
    """An async client built for one event loop, closed when that loop shuts down.

    asyncio's `shutdown_asyncgens` (run by `asyncio.run` at its end, while the
    loop still runs) closes every suspended async generator of the loop; the
    watcher is one, and its `finally` closes the client in its own loop. A loop
    closed without it (`run_until_complete`, then `close()`) leaves the watcher
    suspended for good: its owner `abandon`s the client instead.
    """

    def __init__(self, client: httpx.AsyncClient, forget: Callable[[], None]) -> None:
        self.client = client
        self._forget = forget
        self._watcher: AsyncGenerator[None, None] | None = None

    async def watch(self) -> None:
        """Start the watcher (once), inside the loop the client belongs to."""
        if self._watcher is None:
            self._watcher = _close_at_shutdown(self.client, self._forget)
            await self._watcher.asend(None)

    async def close(self) -> None:
        """Close the client now (the watcher then has nothing left to do)."""
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            await watcher.aclose()
        else:
            await self.client.aclose()

    def abandon(self) -> None:
        """Close the sockets of a client whose loop was closed without shutting down its
        async generators: nothing can be awaited on that loop again (the watcher, dropped,
        is finalized by nobody: its loop is closed)."""
        self._watcher = None
        transport = getattr(self.client, "_transport", None)  # the default one, built here
        if isinstance(transport, ShardedAsyncTransport):
            transport.abandon()


def _forget_loop(
    client: weakref.ref[HttpModelClient], loop: weakref.ref[asyncio.AbstractEventLoop]
) -> None:
    """Drop `client`'s async client of a loop that shut down (it refers to its loop, so the
    entry would keep a finished loop alive)."""
    owner, held = loop(), client()
    if owner is not None and held is not None:
        with held._lock:
            held._own_async.pop(owner, None)


#: Where a call's 2xx replies that gave no step ride on an exception that is not a
#: `ModelCallError` (a cancel, an episode's timeout, Ctrl-C): see `billed_of`.
_BILLED: Final = "osharm_billed"


@contextlib.contextmanager
def _billed_on_the_way_out(run: _Run) -> Iterator[None]:
    """Around a call: an exception other than a `ModelCallError` ending it (which carries its
    own `billed`) takes along the 2xx replies its tries got, so they are still charged."""
    try:
        yield
    except ModelCallError:
        raise
    except BaseException as exc:
        if run.billed:
            with contextlib.suppress(AttributeError, TypeError):
                setattr(exc, _BILLED, tuple(run.billed))
        raise


def billed_of(error: BaseException) -> tuple[Usage, ...]:
    """The 2xx replies a failed or interrupted call got that gave no step (each may have been
    billed): a `ModelCallError`'s `billed`, or those riding on a cancel or timeout."""
    if isinstance(error, ModelCallError):
        return error.billed
    billed = getattr(error, _BILLED, ())
    return billed if isinstance(billed, tuple) else ()


class HttpModelClient:
    """A `ModelClient` that drives one `Provider` over httpx, sync or async.

    Pass your own pooled `http_client` / `async_http_client` to share them
    (they are never closed here); otherwise one sync client is built on first
    use, and one async client per event loop (spreading requests over small
    pools: see `adapters.engine.transport`). `close()` closes the sync one,
    `aclose()` both the sync one and the running loop's; an async client left
    open is closed when its event loop shuts down (`asyncio.run` does that at
    its end), so a client used across many `asyncio.run` calls leaves no
    socket open. A loop closed without that (`loop.run_until_complete(...)`,
    then `loop.close()`) leaves its client's sockets open only until this
    object's next call, on any loop or thread, or its `close()` / `aclose()`,
    which close them; a loop neither shut down nor closed keeps its client
    (and its sockets) until it is. Both are context managers. Every request carries
    `timeout` (an `httpx.Timeout`, or seconds for every phase as httpx and the
    openai SDK take them; default: read 120 s, connect 10 s), whatever the given
    client's own default, shortened to what is left of the policy's deadline. `retry`
    defaults to `RetryPolicy()`. A `timeout`, `retry` or `limiter` of the wrong kind is
    a `ConfigurationError` here, not at the first call. `model`, when set, is the model name sent on
    the wire for every request (the registry sets it for prefixed names such
    as `compat/llama3`). A reply body over `max_response_bytes` (as sent or
    decompressed; default 64 MiB) is a `ResponseTooLargeError`. Redirects are
    never followed, whatever the given client's setting. `limiter` (default
    none) is a rate limiter shared with every other client of the same model
    (see `adapters.engine.limits`): each try waits for its turn, and each
    reply's rate-limit headers, 429s and token usage update it.

    A client pickles and copies as its configuration (provider, key included,
    limiter, retry policy, timeouts, wire model, body limit), as a worker
    process given an agent needs it: connections stay behind, and the copy
    builds its own on first use. One given its own httpx clients, or holding a
    `RateLimiter` (which counts one process's calls), raises
    `ConfigurationError` instead: build it in the worker. A `RayLimiter`
    travels (it is a handle to the cluster's limiter).
    """

    def __init__(
        self,
        provider: Provider,
        *,
        http_client: httpx.Client | None = None,
        async_http_client: httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        timeout: httpx.Timeout | float | None = None,
        model: str | None = None,
        max_response_bytes: int | None = None,
        limiter: Limiter | None = None,
    ) -> None:
        self.provider = provider
        self.limiter = client_limiter(limiter)
        retry = client_retry(retry)
        self._retry = retry if retry is not None else RetryPolicy()
        given = client_timeout(timeout)
        self.timeout = given if given is not None else DEFAULT_TIMEOUT
        self.model = model
        limit = DEFAULT_MAX_RESPONSE_BYTES if max_response_bytes is None else max_response_bytes
        self.max_response_bytes = positive_int("max_response_bytes", limit)
        self._given_client = http_client
        self._given_async_client = async_http_client
        self._own_client: httpx.Client | None = None
        # One async client per event loop (pooled connections belong to their loop);
        # None stands for a loop that is not asyncio's (trio).
        self._own_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._own_async_other: httpx.AsyncClient | None = None
        # The sync clients `close()` is closing: the calls its shutdown wakes see them closed.
        self._closing: weakref.WeakSet[httpx.Client | httpx.AsyncClient] = weakref.WeakSet()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """What `pickle` and `copy` take: the configuration, no connection (see the class doc)."""
        given = [
            name
            for name, client in (
                ("http_client", self._given_client),
                ("async_http_client", self._given_async_client),
            )
            if client is not None
        ]
        if given:
            raise ConfigurationError(
                f"an HttpModelClient ({self.provider.name}) given its own {' and '.join(given)} "
                "does not pickle or copy: their connections stay in this process; build the "
                "client in the worker"
            )
        if isinstance(self.limiter, RateLimiter):
            raise ConfigurationError(
                f"an HttpModelClient ({self.provider.name}) sharing a {self.limiter!r} does not "
                "pickle or copy: the limiter counts the calls of this process; build the "
                "limiter and its clients in the worker (with that worker's share of the rate), "
                "or run on Ray, where one actor keeps the limits"
            )
        return {
            "provider": self.provider,
            "limiter": self.limiter,
            "retry": self._retry,
            "timeout": self.timeout,
            "model": self.model,
            "max_response_bytes": self.max_response_bytes,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        options = {name: value for name, value in state.items() if name != "provider"}
        self.__init__(state["provider"], **options)  # type: ignore[misc]

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy every call of this client follows."""
        return self._retry

    def __repr__(self) -> str:
        model = f", model={self.model!r}" if self.model else ""
        return f"HttpModelClient(provider={self.provider.name!r}{model}, retry={self.retry!r})"

    # -- the shells ---------------------------------------------------------

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the model, retrying per the policy; raise a typed `ModelCallError` on failure."""
        run = _Run(self.provider, self._wire(request), self._retry)
        client = self._client()
        if self.limiter is not None:
            for wait in self._admission(None):
                time.sleep(wait)
            run.admit()
        with _billed_on_the_way_out(run):
            while run.pending is not None:
                try:
                    for attempt in stamina.retry_context(**run.retrying()):
                        with attempt, run.trying():
                            self._turn(run, time.sleep)
                            with self._releasing():
                                outcome = self._send(client, run)
                            reply = self._received(run, outcome)
                except ModelCallError as error:
                    run.settle(error)
                else:
                    run.settle(reply)
        return run.result()

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """Call the model without blocking the event loop; same retries and errors as `complete`."""
        run = _Run(self.provider, self._wire(request), self._retry)
        client = await self._async_client()
        if self.limiter is not None:
            for wait in self._admission(None):
                await asyncio.sleep(wait)
            run.admit()
        with _billed_on_the_way_out(run):
            while run.pending is not None:
                try:
                    async for attempt in stamina.retry_context(**run.retrying()):
                        with attempt, run.trying():
                            if self.limiter is not None:
                                await self._aturn(run)
                            with self._releasing():
                                answer = await self._asend(client, run)
                            reply = self._received(run, answer)
                except ModelCallError as error:
                    run.settle(error)
                else:
                    run.settle(reply)
        return run.result()

    # -- helpers ------------------------------------------------------------

    def _admission(self, run: _Run | None) -> Generator[float, None, None]:
        """The sleeps until the token budget has room for a try, asked again after each (so
        none is longer than a slice): before a call's first try (`run` is None) however long
        it takes, the call's deadline starting once admitted; before a retry, within it."""
        assert self.limiter is not None
        while True:
            if run is None:
                timeout = self._retry.timeout
                deadline = None if timeout is None else time.monotonic() + timeout
            else:
                deadline = run.deadline
            wait = self.limiter.admit(deadline=deadline)
            if wait <= 0:
                return
            if run is not None and deadline is not None and time.monotonic() + wait > deadline:
                raise RateLimitWaitError(
                    "the shared token budget had no room for the retry before the call's "
                    "deadline; the try was not sent",
                    provider=self.provider.name,
                )
            yield wait

    def _waits(self, run: _Run, turn: _Turn) -> Generator[float, None, None]:
        """The sleeps before the admitted try may go: its turn, then any pause that began since
        (noting in `turn` when the turn taken last is due)."""
        assert self.limiter is not None
        name = self.provider.name
        wait = self.limiter.reserve(deadline=run.deadline, provider=name)
        turn.taken(wait)
        while wait > 0:
            if run.deadline is not None and time.monotonic() + wait > run.deadline:
                raise RateLimitWaitError(
                    f"the shared rate limit pauses calls for {wait:.1f} s more, past the "
                    "call's deadline; the call was not sent",
                    provider=name,
                )
            yield wait
            wait = self.limiter.hold()
            if wait > 0:  # with a request rate, a new place in line after the pause
                turn.taken(wait)

    def _turn(self, run: _Run, sleep: Callable[[float], None]) -> None:
        if self.limiter is not None:
            if not run.admitted:
                for wait in self._admission(run):
                    sleep(wait)
            run.admitted = False
            with self._releasing(), self._giving_back() as turn:
                for wait in self._waits(run, turn):
                    sleep(wait)

    async def _aturn(self, run: _Run) -> None:
        if not run.admitted:
            for wait in self._admission(run):
                await asyncio.sleep(wait)
        run.admitted = False
        with self._releasing(), self._giving_back() as turn:
            for wait in self._waits(run, turn):
                await asyncio.sleep(wait)

    @contextlib.contextmanager
    def _giving_back(self) -> Iterator[_Turn]:
        """Around the wait for a turn: a turn left before it was due (a cancel, an episode's
        time limit, a `RateLimitWaitError`) is given back, so it does not hold up the callers
        after it."""
        turn = _Turn()
        try:
            yield turn
        except BaseException:
            if self.limiter is not None and turn.due is not None and time.monotonic() < turn.due:
                self.limiter.unreserve(due=turn.due)
            raise

    @contextlib.contextmanager
    def _releasing(self) -> Iterator[None]:
        """Give the limiter back what an admitted try held if it ends here (error, cancellation)."""
        try:
            yield
        except BaseException:
            if self.limiter is not None:
                self.limiter.release()
            raise

    def _received(self, run: _Run, outcome: Answer | Cut | httpx.RequestError) -> ProviderReply:
        """`run.receive(outcome)`, telling the limiter (when there is one) what the reply said."""
        if self.limiter is None or not isinstance(outcome, Answer):
            if self.limiter is not None:  # no reply to settle the try's hold with
                self.limiter.release()
            return run.receive(outcome)
        try:
            reply = run.receive(outcome)
        except ModelCallError as error:
            self.limiter.observe(outcome.status, _with_wait(outcome.headers, error))
            raise
        usage = reply.usage
        tokens = usage.total_tokens
        if tokens is None and (usage.input_tokens is not None or usage.output_tokens is not None):
            tokens = (usage.input_tokens or 0) + (usage.output_tokens or 0)
        self.limiter.observe(outcome.status, outcome.headers, tokens)
        return reply

    def _request(self, client: httpx.Client | httpx.AsyncClient, run: _Run) -> httpx.Request:
        """The httpx request for the pending call, with this client's timeout within the deadline."""
        left = run.remaining()
        pending = run.sending()
        call = pending.call
        timeout = self.timeout
        if left is not None:
            timeout = httpx.Timeout(
                connect=_within(timeout.connect, left),
                read=_within(timeout.read, left),
                write=_within(timeout.write, left),
                pool=_within(timeout.pool, left),
            )
        headers = {"accept-encoding": ACCEPT_ENCODING, **call.headers}
        # The bytes and headers httpx makes for `json=`, encoded faster (see adapters.engine.jsonbody).
        try:
            body = None if call.json is None else json_body(call.json)
        except (ValueError, TypeError, RecursionError) as exc:  # NaN, a non-JSON type, depth
            raise ModelCallError(
                f"the request body cannot be written as JSON ({type(exc).__name__}: "
                f"{excerpt(str(exc))}); nothing was sent",
                provider=self.provider.name,
                model=pending.request.model,
            ) from None
        request = client.build_request(
            call.method, call.url, headers=headers, content=body, timeout=timeout
        )
        if body is not None and "content-type" not in request.headers:
            request.headers["Content-Type"] = "application/json"
        return request

    def _reader(self, run: _Run, response: httpx.Response) -> tuple[BodyReader, bytes | None]:
        """A reader for `response`'s body, and the body itself when a transport already read it."""
        headers = scrubbed_headers(response.headers, ())
        try:
            ready: bytes | None = response.content  # e.g. a mock transport's canned reply
        except httpx.ResponseNotRead:
            ready = None
        else:
            headers.pop("content-encoding", None)
        reader = BodyReader(
            provider=self.provider.name,
            status=response.status_code,
            headers=headers,
            limit=self.max_response_bytes,
            deadline=run.deadline,
        )
        return reader, ready

    def _unread(self, run: _Run, response: httpx.Response, error: ModelCallError) -> ModelCallError:
        """A body-reading failure with the reply's status, request id and model filled in (and,
        for a 2xx reply, marked as billed)."""
        assert run.pending is not None
        billed_unread(error, response.status_code)
        return _completed(error, run.pending, response.status_code, response.headers)

    def _late(self, run: _Run, response: httpx.Response | None) -> ModelCallError:
        """The `DeadlineExceededError` of a try the deadline cut short (before or after the
        reply's headers came: `response` is `None` before)."""
        why = "waiting for the reply" if response is None else "reading the reply body"
        error = DeadlineExceededError(
            f"the call's deadline of {run.policy.timeout} s passed while {why}",
            provider=self.provider.name,
        )
        return error if response is None else self._unread(run, response, error)

    def _send(self, client: httpx.Client, run: _Run) -> Answer | Cut | httpx.RequestError:
        # Every read of the connection ends by the deadline: from its first byte when this
        # request opens it (the trace), else from the reply's headers on (`bound_reads`).
        with reading_until(run.deadline):
            try:
                if self._is_closed(client):
                    raise self._closed(None)
                request = self._request(client, run)
                request.extensions["trace"] = watch_connections
                response = client.send(request, stream=True, follow_redirects=False)
            except (httpx.RequestError, RuntimeError) as exc:
                if self._is_closed(client):  # httpx's RuntimeError says so too
                    raise self._closed(run) from None
                if isinstance(exc, RuntimeError):
                    raise
                if run.expired():
                    raise self._late(run, None) from None
                return exc
            try:
                bound_reads(response)
                reader, ready = self._reader(run, response)
                for chunk in response.iter_raw() if ready is None else (ready,):
                    reader.feed(chunk)
                return Answer(response.status_code, response.headers, reader.finish())
            except httpx.RequestError as exc:
                if self._is_closed(client):
                    raise self._unread(run, response, self._closed(run)) from None
                if run.expired():
                    raise self._late(run, response) from None
                return Cut(response.status_code, exc)
            except ModelCallError as error:
                raise self._unread(run, response, error) from None
            finally:
                response.close()

    async def _asend(
        self, client: httpx.AsyncClient, run: _Run
    ) -> Answer | Cut | httpx.RequestError:
        response: httpx.Response | None = None
        if self._is_closed(client):
            raise self._closed(None)
        # The whole try, headers and body, is cancelled at the deadline.
        scope = within(run.remaining())
        try:
            request = self._request(client, run)
            async with scope:
                response = await client.send(request, stream=True, follow_redirects=False)
                reader, ready = self._reader(run, response)
                if ready is not None:
                    reader.feed(ready)
                else:
                    async for chunk in response.aiter_raw():
                        reader.feed(chunk)
                return Answer(response.status_code, response.headers, reader.finish())
        except (httpx.RequestError, RuntimeError) as exc:
            if self._is_closed(client):  # httpx's RuntimeError says so too
                closed = self._closed(run)
                raise (
                    closed if response is None else self._unread(run, response, closed)
                ) from None
            if isinstance(exc, RuntimeError):
                raise
            if run.expired():
                raise self._late(run, response) from None
            return exc if response is None else Cut(response.status_code, exc)
        except TimeoutError:
            if not scope.fired:
                raise
            raise self._late(run, response) from None
        except ModelCallError as error:
            if response is None:
                raise
            raise self._unread(run, response, error) from None
        except BaseException:
            # Cancelled (an episode's time limit) with a 2xx reply's body under way: the
            # provider may bill it; its usage was not read (see `_billed_on_the_way_out`).
            if response is not None and 200 <= response.status_code < 300:
                run.billed.append(Usage())
            raise
        finally:
            if response is not None:
                await response.aclose()

    def _is_closed(self, client: httpx.Client | httpx.AsyncClient) -> bool:
        return client.is_closed or client in self._closing

    def _closed(self, run: _Run | None) -> ClientClosedError:
        """The error of a try on a closed httpx client: before it was sent (`run` is None), or
        cut off by the close."""
        when = "before the try was sent" if run is None else "with the try under way"
        return ClientClosedError(
            f"the client was closed (close() / aclose(), or the httpx client given to it) "
            f"{when}; not tried again",
            provider=self.provider.name,
        )

    def _wire(self, request: ModelRequest) -> ModelRequest:
        if self.model is None or request.model == self.model:
            return request
        return attrs.evolve(request, model=self.model)

    def _client(self) -> httpx.Client:
        if self._given_client is not None:
            return self._given_client
        with self._lock:
            if self._own_client is None:
                self._own_client = httpx.Client(timeout=self.timeout, limits=DEFAULT_LIMITS)
            return self._own_client

    def _new_async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=self.timeout,
            limits=DEFAULT_LIMITS,
            transport=ShardedAsyncTransport(limits=DEFAULT_LIMITS),
        )

    async def _async_client(self) -> httpx.AsyncClient:
        if self._given_async_client is not None:
            return self._given_async_client
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio (e.g. trio): one client for everything
            with self._lock:
                if self._own_async_other is None:
                    self._own_async_other = self._new_async_client()
                return self._own_async_other
        with self._lock:
            abandoned = self._closed_loops()
            held = self._own_async.get(loop)
            if held is None:
                # Weak both ways: the watcher must keep neither this object nor its loop alive.
                forget = functools.partial(_forget_loop, weakref.ref(self), weakref.ref(loop))
                held = self._own_async[loop] = _LoopClient(self._new_async_client(), forget)
        for gone in abandoned:
            gone.abandon()
        await held.watch()
        return held.client

    def _closed_loops(self) -> list[_LoopClient]:
        """Under the lock: take out the async clients of event loops that were closed without
        shutting down their async generators (their connections refer to their loop, so
        the entry would keep it, and them, for good)."""
        closed = [loop for loop in list(self._own_async.keys()) if loop.is_closed()]
        return [self._own_async.pop(loop) for loop in closed]

    # -- lifecycle ----------------------------------------------------------

    def close(self) -> None:
        """Close the sync httpx client this object built (never one that was passed in), and
        the async clients of event loops closed without shutting down their async generators."""
        with self._lock:
            client, self._own_client = self._own_client, None
            abandoned = self._closed_loops()
            if client is not None:
                self._closing.add(client)
        if client is not None:
            shut_connections(client)  # wakes the reads of the calls under way
            client.close()
        for gone in abandoned:
            gone.abandon()

    async def aclose(self) -> None:
        """Close the sync client and the running event loop's async client this object built.

        Async clients of other event loops close when those loops shut down (or, for a
        loop closed without that, here and at this object's next call). Clients passed in
        are never closed.
        """
        self.close()
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        with self._lock:
            held = self._own_async.pop(loop, None) if loop is not None else None
            other, self._own_async_other = self._own_async_other, None
        if held is not None:
            await held.close()
        if other is not None:
            await other.aclose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
