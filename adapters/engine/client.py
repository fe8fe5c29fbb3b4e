"""The model-call engine: any `Provider` over httpx, in layers, sync and async.

One call goes down four layers, each one concern, as httpx's own send path does
(`Client.send` → `_send_handling_auth` → `_send_handling_redirects` →
`_send_single_request`):

1. `_send_handling_context`: the context-length fallback: each request the
   call's flow asks for (`adapters.engine.flow.call_flow`), until it gives
   the response;
2. `_send_handling_retries`: the pending request tried again per the
   client's `RetryPolicy` (`stamina.retry_context`), within the deadline;
3. `_send_handling_turn`: one try inside the rate limiter's turn
   (`adapters.engine.limits.turn`), the reply's status, headers and usage
   told to the limiter;
4. `_send_single_request`: one HTTP exchange, its body read within the size
   limit and the deadline.

`complete` goes down the sync layers with `httpx.Client`, `acomplete` down
their async twins (`_asend_...`) with `httpx.AsyncClient`. What a reply means
and what a failure is are decided in `adapters.engine.flow`, without I/O.

What a server sends is never trusted: redirects are not followed (keys go to
the configured origin only), bodies are read within `max_response_bytes` and
the policy's deadline (see `adapters.engine.body`), and keys, which live only in
`HttpCall.headers` and are never logged, are scrubbed from everything the
server sends back before it is decoded, and from httpx's and httpcore's own
log records while the try runs (`adapters.engine.redaction`).
"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
import weakref
from collections.abc import Iterator
from types import TracebackType
from typing import Any, Final, Self

import attrs
import httpx
import stamina

from adapters._checks import positive_int
from adapters.contract import ModelRequest, ModelResponse, Provider, ProviderReply, Usage
from adapters.engine.body import (
    ACCEPT_ENCODING,
    DEFAULT_MAX_RESPONSE_BYTES,
    BodyReader,
    scrubbed_headers,
)
from adapters.engine.deadline import (
    bound_reads,
    reading_until,
    shut_connections,
    watch_connections,
    within,
)
from adapters.engine.flow import (
    Answer,
    Call,
    Delivered,
    PendingCall,
    Unanswered,
    billed_of,
    billed_on_the_way_out,
    billed_unread,
    call_flow,
    completed,
    interpret,
    reported_usage,
    shortened,
    transport_error,
    with_wait,
)
from adapters.engine.jsonbody import json_body
from adapters.engine.limits import Limiter, RateLimiter, Turn, admission, turn
from adapters.engine.pools import DEFAULT_LIMITS, LoopClient, pool_limits
from adapters.engine.redaction import redacting
from adapters.engine.retry import RetryPolicy
from adapters.engine.transport import DEFAULT_SHARDS, ShardedAsyncTransport
from adapters.errors import (
    ClientClosedError,
    ConfigurationError,
    DeadlineExceededError,
    ModelCallError,
)
from osharm_core.errors import excerpt, is_finite_number, number_excerpt

#: Read (and write, pool) timeout 120 s, connect timeout 10 s.
DEFAULT_TIMEOUT: Final = httpx.Timeout(120.0, connect=10.0)
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
    raise _wrong("timeout", "an httpx.Timeout or a finite number of seconds > 0", timeout)


def client_retry(retry: object) -> RetryPolicy | None:
    """`retry` when it is a `RetryPolicy` or `None`, else a `ConfigurationError`."""
    if retry is None or isinstance(retry, RetryPolicy):
        return retry
    raise _wrong("retry", "a RetryPolicy (e.g. RetryPolicy(attempts=3)) or None", retry)


def client_limiter(limiter: object) -> Limiter | None:
    """`limiter` when it is `None` or has a `Limiter`'s methods (a `RateLimiter`), else a
    `ConfigurationError` naming the first it lacks."""
    lacks = [name for name in _LIMITER_METHODS if not callable(getattr(limiter, name, None))]
    if limiter is None or not lacks:
        return limiter  # type: ignore[return-value]
    raise _wrong("limiter", f"a RateLimiter (or have its {lacks[0]}() method) or None", limiter)


def _wrong(name: str, what: str, value: object) -> ConfigurationError:
    """The error of a client option `name` given `value`, which is not `what` it must be."""
    shown = number_excerpt(value) if is_finite_number(value) else excerpt(value)
    return ConfigurationError(f"{name} must be {what}; got {type(value).__name__} {shown}")


def _within(seconds: float | None, left: float) -> float:
    return left if seconds is None else min(seconds, left)


def _tokens(usage: Usage) -> int | None:
    """The tokens a reply used, for the limiter: its total, else input plus output."""
    if usage.total_tokens is None and (usage.input_tokens, usage.output_tokens) != (None, None):
        return (usage.input_tokens or 0) + (usage.output_tokens or 0)
    return usage.total_tokens


def _observed(call: Call, outcome: Answer | Unanswered, held: Turn) -> ProviderReply:
    """The decoded reply of one try, or its typed error raised; a reply's status, headers (with
    the error's own wait) and usage are told to the limiter through `held`."""
    if isinstance(outcome, Unanswered):  # no reply: the turn gives back the room it held
        raise call.failed(outcome)
    try:
        reply = call.receive(outcome)
    except ModelCallError as error:
        held.observe(outcome.status, with_wait(outcome.headers, error))
        raise
    held.observe(outcome.status, outcome.headers, _tokens(reply.usage))
    return reply


def _forget_loop(
    client: weakref.ref[HttpModelClient], loop: weakref.ref[asyncio.AbstractEventLoop]
) -> None:
    """Drop `client`'s async client of a loop that shut down (it refers to its loop, so the
    entry would keep a finished loop alive)."""
    owner, held = loop(), client()
    if owner is not None and held is not None:
        with held._lock:
            held._own_async.pop(owner, None)


class HttpModelClient:
    """A `ModelClient` that drives one `Provider` over httpx, sync or async.

    Pass your own pooled `http_client` / `async_http_client` to share them
    (they are never closed here); otherwise one sync client is built on first
    use, and one async client per event loop (spreading requests over small
    pools: see `adapters.engine.transport`), each holding `max_connections`
    connections (default 128; one per call in flight, so a client shared by
    more workers needs more: see `adapters.engine.pools.connections_for`).
    `close()` closes the sync one,
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
    limiter, retry policy, timeouts, wire model, body limit, pool size), as a worker
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
        max_connections: int | None = None,
    ) -> None:
        self.provider = provider
        self.limiter = client_limiter(limiter)
        self._retry = client_retry(retry) or RetryPolicy()
        self.timeout = client_timeout(timeout) or DEFAULT_TIMEOUT
        self.model = model
        limit = DEFAULT_MAX_RESPONSE_BYTES if max_response_bytes is None else max_response_bytes
        self.max_response_bytes = positive_int("max_response_bytes", limit)
        if max_connections is not None:
            max_connections = positive_int("max_connections", max_connections)
        self.max_connections = max_connections
        self._limits = pool_limits(max_connections)
        # A pool smaller than the shards would let every shard open a connection of its own.
        self._shards = min(DEFAULT_SHARDS, max_connections or DEFAULT_SHARDS)
        self._given_client = http_client
        self._given_async_client = async_http_client
        self._own_client: httpx.Client | None = None
        # One async client per event loop (pooled connections belong to their loop);
        # None stands for a loop that is not asyncio's (trio).
        self._own_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopClient] = (
            weakref.WeakKeyDictionary()
        )
        self._own_async_other: httpx.AsyncClient | None = None
        # The sync clients `close()` is closing: the calls its shutdown wakes see them closed.
        self._closing: weakref.WeakSet[httpx.Client | httpx.AsyncClient] = weakref.WeakSet()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        """What `pickle` and `copy` take: the configuration, no connection (see the class doc)."""
        unportable = self._unportable()
        if unportable is not None:
            raise ConfigurationError(f"an HttpModelClient ({self.provider.name}) {unportable}")
        return {
            "provider": self.provider,
            "limiter": self.limiter,
            "retry": self._retry,
            "timeout": self.timeout,
            "model": self.model,
            "max_response_bytes": self.max_response_bytes,
            "max_connections": self.max_connections,
        }

    def _unportable(self) -> str | None:
        """Why this client cannot go to another process, or `None` when it can."""
        given = [
            name
            for name, client in (
                ("http_client", self._given_client),
                ("async_http_client", self._given_async_client),
            )
            if client is not None
        ]
        if given:
            return (
                f"given its own {' and '.join(given)} does not pickle or copy: their "
                "connections stay in this process; build the client in the worker"
            )
        if isinstance(self.limiter, RateLimiter):
            return (
                f"sharing a {self.limiter!r} does not pickle or copy: the limiter counts the "
                "calls of this process; build the limiter and its clients in the worker (with "
                "that worker's share of the rate), or run on Ray, where one actor keeps the limits"
            )
        return None

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

    # -- the sync layers ----------------------------------------------------

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Call the model, retrying per the policy; raise a typed `ModelCallError` on failure."""
        call = Call(self.provider, self._wire(request), self._retry)
        client = self._client()
        if self.limiter is not None:
            for wait in self._admission(self.limiter):
                time.sleep(wait)
            call.admit()
        with billed_on_the_way_out(call):
            return self._send_handling_context(client, call)

    def _send_handling_context(self, client: httpx.Client, call: Call) -> ModelResponse:
        """Layer 1, the context-length fallback: each request the call's flow asks for, sent
        with retries, until the flow gives the response (or raises)."""
        while True:
            try:
                outcome: ProviderReply | ModelCallError = self._send_handling_retries(client, call)
            except ModelCallError as error:
                outcome = error
            response = call.advance(outcome)
            if response is not None:
                return response

    def _send_handling_retries(self, client: httpx.Client, call: Call) -> ProviderReply:
        """Layer 2, retries: the pending request tried again per the policy, within the call's
        deadline, noting the replies a failed try may have been billed for."""
        for attempt in stamina.retry_context(**call.retrying()):
            with attempt, call.trying():
                reply = self._send_handling_turn(client, call)
        return reply

    def _send_handling_turn(self, client: httpx.Client, call: Call) -> ProviderReply:
        """Layer 3, the rate limiter: one try inside its turn, the reply told to the limiter."""
        with self._turn(call) as held:
            outcome = self._send_single_request(client, call)
            return _observed(call, outcome, held)

    def _send_single_request(self, client: httpx.Client, call: Call) -> Answer | Unanswered:
        """Layer 4, one HTTP exchange: the reply, its body read within the size limit and the
        deadline, or the failure that left it without one."""
        # Every read of the connection ends by the deadline: from its first byte when this
        # request opens it (the trace), else from the reply's headers on (`bound_reads`).
        with reading_until(call.deadline), redacting(call.secrets()):
            try:
                if self._is_closed(client):
                    raise self._closed(None)
                request = self._request(client, call)
                request.extensions["trace"] = watch_connections
                response = client.send(request, stream=True, follow_redirects=False)
            except (httpx.RequestError, RuntimeError) as exc:
                if self._is_closed(client):  # httpx's RuntimeError says so too
                    raise self._closed(call) from None
                if isinstance(exc, RuntimeError):
                    raise
                if call.expired():
                    raise self._late(call, None) from None
                return Unanswered(exc)
            try:
                bound_reads(response)
                reader, ready = self._reader(call, response)
                for chunk in response.iter_raw() if ready is None else (ready,):
                    reader.feed(chunk)
                return Answer(response.status_code, response.headers, reader.finish())
            except httpx.RequestError as exc:
                if self._is_closed(client):
                    raise self._unread(call, response, self._closed(call)) from None
                if call.expired():
                    raise self._late(call, response) from None
                return Unanswered(exc, response.status_code)
            except ModelCallError as error:
                raise self._unread(call, response, error) from None
            finally:
                response.close()

    # -- the async layers ---------------------------------------------------

    async def acomplete(self, request: ModelRequest) -> ModelResponse:
        """Call the model without blocking the event loop; same retries and errors as `complete`."""
        call = Call(self.provider, self._wire(request), self._retry)
        client = await self._async_client()
        if self.limiter is not None:
            for wait in self._admission(self.limiter):
                await asyncio.sleep(wait)
            call.admit()
        with billed_on_the_way_out(call):
            return await self._asend_handling_context(client, call)

    async def _asend_handling_context(self, client: httpx.AsyncClient, call: Call) -> ModelResponse:
        """Layer 1 (async): the context-length fallback (see `_send_handling_context`)."""
        while True:
            try:
                outcome: ProviderReply | ModelCallError
                outcome = await self._asend_handling_retries(client, call)
            except ModelCallError as error:
                outcome = error
            response = call.advance(outcome)
            if response is not None:
                return response

    async def _asend_handling_retries(self, client: httpx.AsyncClient, call: Call) -> ProviderReply:
        """Layer 2 (async): retries (see `_send_handling_retries`)."""
        async for attempt in stamina.retry_context(**call.retrying()):
            with attempt, call.trying():
                reply = await self._asend_handling_turn(client, call)
        return reply

    async def _asend_handling_turn(self, client: httpx.AsyncClient, call: Call) -> ProviderReply:
        """Layer 3 (async): the rate limiter's turn (see `_send_handling_turn`)."""
        async with self._turn(call) as held:
            outcome = await self._asend_single_request(client, call)
            return _observed(call, outcome, held)

    async def _asend_single_request(
        self, client: httpx.AsyncClient, call: Call
    ) -> Answer | Unanswered:
        """Layer 4 (async): one HTTP exchange, headers and body cancelled at the deadline."""
        response: httpx.Response | None = None
        if self._is_closed(client):
            raise self._closed(None)
        scope = within(call.remaining())
        try:
            request = self._request(client, call)
            with redacting(call.secrets()):
                async with scope:
                    response = await client.send(request, stream=True, follow_redirects=False)
                    reader, ready = self._reader(call, response)
                    if ready is not None:
                        reader.feed(ready)
                    else:
                        async for chunk in response.aiter_raw():
                            reader.feed(chunk)
                    return Answer(response.status_code, response.headers, reader.finish())
        except (httpx.RequestError, RuntimeError) as exc:
            if self._is_closed(client):  # httpx's RuntimeError says so too
                raise self._unread(call, response, self._closed(call)) from None
            if isinstance(exc, RuntimeError):
                raise
            if call.expired():
                raise self._late(call, response) from None
            return Unanswered(exc, None if response is None else response.status_code)
        except TimeoutError:
            if not scope.fired:
                raise
            raise self._late(call, response) from None
        except ModelCallError as error:
            raise self._unread(call, response, error) from None
        except BaseException:
            # Cancelled (an episode's time limit) with a 2xx reply's body under way: the
            # provider may bill it; its usage was not read (see `billed_on_the_way_out`).
            if response is not None and 200 <= response.status_code < 300:
                call.billed.append(Usage())
            raise
        finally:
            if response is not None:
                await response.aclose()

    # -- what the layers share ----------------------------------------------

    def _admission(self, limiter: Limiter) -> Iterator[float]:
        """The sleeps before a call's first try until the token budget has room for it."""
        return admission(limiter, timeout=self._retry.timeout, provider=self.provider.name)

    def _turn(self, call: Call) -> Turn:
        """The limiter's turn for the call's next try (a no-op `Turn` without a limiter)."""
        admitted = call.take_admission()
        name = self.provider.name
        return turn(self.limiter, deadline=call.deadline, provider=name, admitted=admitted)

    def _request(self, client: httpx.Client | httpx.AsyncClient, call: Call) -> httpx.Request:
        """The httpx request for the pending call, with this client's timeout within the deadline."""
        left = call.remaining()
        pending = call.sending()
        http = pending.call
        timeout = self.timeout
        if left is not None:
            timeout = httpx.Timeout(
                connect=_within(timeout.connect, left),
                read=_within(timeout.read, left),
                write=_within(timeout.write, left),
                pool=_within(timeout.pool, left),
            )
        headers = {"accept-encoding": ACCEPT_ENCODING, **http.headers}
        # The bytes and headers httpx makes for `json=`, encoded faster (see adapters.engine.jsonbody).
        try:
            body = None if http.json is None else json_body(http.json)
        except (ValueError, TypeError, RecursionError) as exc:  # NaN, a non-JSON type, depth
            raise self._unwritable(exc, pending.request) from None
        request = client.build_request(
            http.method, http.url, headers=headers, content=body, timeout=timeout
        )
        if body is not None and "content-type" not in request.headers:
            request.headers["Content-Type"] = "application/json"
        return request

    def _unwritable(self, exc: Exception, request: ModelRequest) -> ModelCallError:
        """The error of a request whose body cannot be written as JSON (nothing was sent)."""
        what = f"{type(exc).__name__}: {excerpt(str(exc))}"
        return ModelCallError(
            f"the request body cannot be written as JSON ({what}); nothing was sent",
            provider=self.provider.name,
            model=request.model,
        )

    def _reader(self, call: Call, response: httpx.Response) -> tuple[BodyReader, bytes | None]:
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
            deadline=call.deadline,
        )
        return reader, ready

    def _unread(
        self, call: Call, response: httpx.Response | None, error: ModelCallError
    ) -> ModelCallError:
        """A failure once the reply's headers came (`response`; `None`: before), with the
        reply's status, request id and model filled in (and, for a 2xx reply, marked as billed)."""
        if response is None:
            return error
        billed_unread(error, response.status_code)
        return completed(error, call.pending, response.status_code, response.headers)

    def _late(self, call: Call, response: httpx.Response | None) -> ModelCallError:
        """The `DeadlineExceededError` of a try the deadline cut short (before or after the
        reply's headers came: `response` is `None` before)."""
        why = "waiting for the reply" if response is None else "reading the reply body"
        error = DeadlineExceededError(
            f"the call's deadline of {call.policy.timeout} s passed while {why}",
            provider=self.provider.name,
        )
        return self._unread(call, response, error)

    def _is_closed(self, client: httpx.Client | httpx.AsyncClient) -> bool:
        return client.is_closed or client in self._closing

    def _closed(self, call: Call | None) -> ClientClosedError:
        """The error of a try on a closed httpx client: before it was sent (`call` is None), or
        cut off by the close."""
        when = "before the try was sent" if call is None else "with the try under way"
        return ClientClosedError(
            f"the client was closed (close() / aclose(), or the httpx client given to it) "
            f"{when}; not tried again",
            provider=self.provider.name,
        )

    def _wire(self, request: ModelRequest) -> ModelRequest:
        if self.model is None or request.model == self.model:
            return request
        return attrs.evolve(request, model=self.model)

    # -- the httpx clients ----------------------------------------------------

    def _client(self) -> httpx.Client:
        if self._given_client is not None:
            return self._given_client
        with self._lock:
            if self._own_client is None:
                self._own_client = httpx.Client(timeout=self.timeout, limits=self._limits)
            return self._own_client

    def _new_async_client(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(
            timeout=self.timeout,
            limits=self._limits,
            transport=ShardedAsyncTransport(limits=self._limits, shards=self._shards),
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
                held = self._own_async[loop] = LoopClient(self._new_async_client(), forget)
        for gone in abandoned:
            gone.abandon()
        await held.watch()
        return held.client

    def _closed_loops(self) -> list[LoopClient]:
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


__all__ = [
    "DEFAULT_LIMITS",
    "DEFAULT_TIMEOUT",
    "Answer",
    "Delivered",
    "HttpModelClient",
    "PendingCall",
    "billed_of",
    "call_flow",
    "client_limiter",
    "client_retry",
    "client_timeout",
    "interpret",
    "reported_usage",
    "shortened",
    "transport_error",
]
