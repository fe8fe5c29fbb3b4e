"""Every exception the adapters raise, in one tree under the core's `OsharmError`.

```
OsharmError                                   (osharm_core.errors)
├── ConfigError (ValueError)                  bad input: a setting, an argument, a command line, a
│   │                                         client that cannot be built (the old names
│   │                                         ConfigurationError and UsageError are aliases)
│   └── AgentBusyError                        a second step on an agent with one in flight
├── ObservationError (ValueError)             input
│   ├── AccessibilityTreeError
│   └── ScreenshotError
├── StateError (ValueError)                   an AgentState whose turns do not line up
├── ActionParseError (ValueError)             reply parsing (carried in a Failure)
├── UnsupportedComputerAction (ValueError)    a computer-use action with no equivalent
├── RankFileError (ValueError)                the tokenizer's data is not the published file
├── RequestBudgetError (ValueError)           a request cannot be made to fit server_profile
├── ModelCallError                            a model call failed (provider, status, request id, tries)
│   ├── RetryableError                        rate limit, 5xx, overload, timeout, connection, TLS
│   │   └── ServerUnreachableError            nothing listens at the URL, or its host does not resolve
│   ├── BadRequestError                       HTTP 400 (retried only if the policy says so)
│   ├── ContextLengthError                    the prompt is longer than the context window
│   ├── AuthenticationError                   401 / 403
│   ├── QuotaExceededError                    the account's quota is used up
│   ├── RedirectError                         a redirect, never followed
│   ├── ResponseDecodeError                   a reply that cannot be read
│   │   └── ResponseTooLargeError             a body past max_response_bytes
│   ├── DeadlineExceededError                 the call's wall-clock deadline ran out
│   │   └── RateLimitWaitError                a shared rate limit's wait would outlast it
│   ├── ServerLimitError                      HTTP 413 or "at most N images": set server_profile
│   ├── ClientClosedError                     the client was closed with the call under way
│   └── RepliesExhausted (LookupError)        a scripted client has no reply left
│       ├── ReplayExhausted                   ... ReplayClient
│       └── FakeClientExhausted               ... FakeClient
├── SafetyCheckPending                        safety: a stop only the user may lift (never a call failure)
├── BudgetExceeded                            a token or dollar cap ended the episode (never a call failure)
├── EnvironmentFailure                        an environment broke its contract (that episode fails)
│   ├── TaskSetupError                        a task's setup was refused or failed (that task fails, the run goes on)
│   └── RevertFailure                         a VM could not be restored to its snapshot (the run stops)
├── TrajectoryError (ValueError)              trajectory and observation-directory I/O
│   └── UnwritableRecord                      a value given for a record JSON cannot hold (that episode fails)
└── TrajectoryExistsError (FileExistsError)   a recording would overwrite a trajectory
```

`ModelCallError.retryable` says whether waiting and trying again can help. A
loop that reruns on call failures catches `ModelCallError`; a safety stop is
not one, so it is never misfiled as a failure to retry. Errors pickle, so they
cross process boundaries, and never hold an API key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from osharm_core.errors import (
    AccessibilityTreeError,
    ActionParseError,
    ConfigError,
    ObservationError,
    OsharmError,
    RankFileError,
    RequestBudgetError,
    ScreenshotError,
    StateError,
)

if TYPE_CHECKING:
    from adapters.contract import Usage


def _rebuild(cls: type[Exception], message: str, state: dict[str, Any]) -> Exception:
    error = cls.__new__(cls)
    Exception.__init__(error, message)
    error.__dict__.update(state)
    return error


class _Picklable(OsharmError):
    """Errors whose constructor takes keywords: pickled as class, message and fields."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), str(self.args[0]) if self.args else "", dict(self.__dict__)))


class ModelCallError(_Picklable):
    """A model call failed. Carries the provider, HTTP status, provider message and request id.

    Never holds an API key: messages are built from the provider's error body
    only, and the client redacts any secret the server echoes back.

    `billed` holds the replies of the call that came with a 2xx status (so the
    provider may have billed them) and still gave no response: one that could
    not be decoded, a body cut off or too large, an error sent as HTTP 200.
    Each is the `Usage` its JSON body reported, `Usage()` when none could be
    read; a `PromptAgent` charges them to its totals and budget.
    """

    retryable: bool = False
    billed: tuple[Usage, ...] = ()

    def __init__(
        self,
        message: str,
        *,
        provider: str,
        status: int | None = None,
        request_id: str | None = None,
        model: str | None = None,
        tries: int = 1,
    ) -> None:
        self.message = message
        self.provider = provider
        self.status = status
        self.request_id = request_id
        self.model = model
        self.tries = tries
        super().__init__(message)

    def __str__(self) -> str:
        where = f"{self.provider}" + (f" HTTP {self.status}" if self.status is not None else "")
        rid = f" (request id {self.request_id})" if self.request_id else ""
        return f"{where}: {self.message}{rid}"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (type(self), self.message, dict(self.__dict__)))


class RetryableError(ModelCallError):
    """Rate limit, server error, overload, timeout, connection or TLS failure: worth another try."""

    retryable = True

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs: Any) -> None:
        self.retry_after = retry_after
        super().__init__(message, **kwargs)


class ServerUnreachableError(RetryableError):
    """Nothing listens at the model's URL, or its host name does not resolve: tried again only
    twice, quickly; the message says what to check."""


class BadRequestError(ModelCallError):
    """HTTP 400: retried only when the retry policy says so (the reference retries it)."""


class ContextLengthError(ModelCallError):
    """The prompt is longer than the model's context window."""


class AuthenticationError(ModelCallError):
    """The key is missing, wrong, or lacks permission (401 / 403)."""


class QuotaExceededError(ModelCallError):
    """The account's quota or budget is used up (e.g. OpenAI `insufficient_quota`): waiting will not help."""


class ResponseDecodeError(ModelCallError):
    """The provider answered with something we cannot read as a reply."""


class RedirectError(ModelCallError):
    """The server answered with a redirect, which is never followed: keys go only to the configured origin."""


class ResponseTooLargeError(ResponseDecodeError):
    """The reply body (as sent, or once decompressed) is larger than the client accepts."""


class DeadlineExceededError(ModelCallError):
    """The call's wall-clock deadline (tries, waits and body reads together) ran out."""


class ServerLimitError(ModelCallError):
    """The server refused the request as too large (HTTP 413) or as holding too many images.

    Never retried: the same request would be refused again. `limit` is the
    `ServerLimits` field to set (`max_bytes` or `max_images`), `maximum` the
    number the server named, when it named one; the message says which
    `server_profile` avoids it.
    """

    def __init__(
        self, message: str, *, limit: str, maximum: int | None = None, **kwargs: Any
    ) -> None:
        self.limit = limit
        self.maximum = maximum
        super().__init__(message, **kwargs)


class ClientClosedError(ModelCallError):
    """The client's connections were closed (its `close()` / `aclose()`, or the httpx client
    given to it) with the call under way: it ends at once, never tried again."""


class RateLimitWaitError(DeadlineExceededError):
    """A shared rate limiter would hold the call past its deadline, so it is not sent at all."""


class RepliesExhausted(ModelCallError, LookupError):
    """A client that answers from a script (a replay, a fake) has no reply left for this call."""


class ReplayExhausted(RepliesExhausted):
    """The replayed trajectory has no reply left for this call."""


class FakeClientExhausted(RepliesExhausted):
    """The fake client was asked for more replies than it was given."""


#: The old name of `ConfigError` for a client that cannot be built (kept for a release).
ConfigurationError = ConfigError


class SafetyCheckPending(_Picklable):
    """A continued chain still has safety checks pending; only the user can decide about them.

    Raised before any request is sent, so it is not a `ModelCallError`: a loop
    that retries failed calls must not retry this.
    """

    def __init__(self, checks: Sequence[tuple[str, str, str]], *, provider: str) -> None:
        self.checks = tuple(checks)
        self.provider = provider
        codes = ", ".join(code or check_id for check_id, code, _ in self.checks)
        super().__init__(
            f"{provider}: the previous response has pending safety checks ({codes}); "
            "osharm-core never acknowledges them: start a new chain (no continuation) or "
            "decide yourself"
        )


class BudgetExceeded(_Picklable):
    """A per-episode or per-run cap on tokens or dollars is reached: no further request is sent.

    Raised before a request, so it is not a `ModelCallError` and is never
    retried. `scope` is `"episode"` or `"run"`; `reason` says which cap and
    the amount used; `tokens` and `cost_usd` are the scope's totals so far
    (`cost_usd` is `None` when a step's cost is unknown).
    """

    def __init__(
        self, reason: str, *, scope: str, tokens: int = 0, cost_usd: float | None = None
    ) -> None:
        self.reason = reason
        self.scope = scope
        self.tokens = tokens
        self.cost_usd = cost_usd
        super().__init__(f"{scope} budget exceeded: {reason}")


class UnsupportedComputerAction(OsharmError, ValueError):
    """A computer-use action that has no equivalent in the target action space."""


class EnvironmentFailure(OsharmError):
    """An environment (a desktop) returned something outside the `Env` contract.

    The task-list runners count that episode as failed and go on to the next
    task, except for a desktop that is gone: a VM that gives no answer at all
    (`adapters.runs.vm_http.VmUnanswered`) or that could not be restored
    (`RevertFailure`) stops the run.
    """


class TaskSetupError(EnvironmentFailure):
    """A task's setup steps were refused or failed: that task cannot run as written.

    The task-list runners count the task as failed and go on to the next one
    (a VM that stops answering stops the run).
    """


class RevertFailure(EnvironmentFailure):
    """A VM could not be restored to its clean snapshot: the revert command failed, overran
    or could not start, or the VM did not answer again afterwards. The task-list runners
    stop the run: the next task would start on a dirty desktop."""


class TrajectoryError(OsharmError, ValueError):
    """A trajectory file or an observation directory is missing, malformed, or used up."""


class UnwritableRecord(TrajectoryError):
    """A value given for a trajectory or result-folder record cannot be written as JSON (a
    `NaN`, an object JSON has no form for, nesting past the encoder's depth): the fault of
    whoever gave it (an environment's reward or info), not of the disk."""


class TrajectoryExistsError(OsharmError, FileExistsError):
    """The recording directory already holds a trajectory (pass `overwrite=True` to replace it)."""


class ReportError(TrajectoryError):
    """A report cannot be made: no result tree at the path given, an output folder that holds
    other files, more folders than a run has, or a page that cannot be written."""


class MixedRunError(ConfigError):
    """A run would add results to a tree whose manifest records another configuration or other
    prompts, or whose manifest cannot be read (`allow_mixed` / `--allow-mixed` goes on)."""


#: The old name of `ConfigError` for a command line that cannot be run (kept for a release).
UsageError = ConfigError


class AgentBusyError(ConfigError):
    """A step was started, or the agent reset, while a step of the same agent was in flight.

    Raised before any model call: an agent holds one trajectory, so it takes one
    step at a time; run concurrent episodes with one agent each.
    """


def error_text(exc: BaseException) -> str:
    """`str(exc)`, never raising: an exception caught from an environment or other user code
    may have a `__str__` that raises (or returns no string); it is then named by its type.

    >>> class Odd(Exception):
    ...     def __str__(self): raise RuntimeError
    >>> error_text(ValueError("bad")), error_text(Odd())
    ('bad', '<unprintable Odd>')
    """
    text = _text(exc)
    return f"<unprintable {_type_name(exc)}>" if text is None else text


def error_line(exc: BaseException) -> str:
    """`TypeName: message` for an exception caught from user code (see `error_text`).

    >>> class Odd(Exception):
    ...     def __str__(self): raise RuntimeError
    >>> error_line(KeyError("k")), error_line(Odd())
    ("KeyError: 'k'", 'Odd: <unprintable>')
    """
    text = _text(exc)
    return f"{_type_name(exc)}: {'<unprintable>' if text is None else text}"


def _text(exc: BaseException) -> str | None:
    try:
        return str.__str__(str(exc))  # a plain str, even from a str subclass
    except Exception:
        return None


def _type_name(exc: BaseException) -> str:
    try:
        name = type(exc).__name__
    except Exception:
        return "exception"
    return name if type(name) is str else "exception"


__all__ = [
    "AccessibilityTreeError",
    "ActionParseError",
    "AgentBusyError",
    "AuthenticationError",
    "BadRequestError",
    "BudgetExceeded",
    "ClientClosedError",
    "ConfigError",
    "ConfigurationError",
    "ContextLengthError",
    "DeadlineExceededError",
    "EnvironmentFailure",
    "FakeClientExhausted",
    "MixedRunError",
    "ModelCallError",
    "ObservationError",
    "OsharmError",
    "QuotaExceededError",
    "RankFileError",
    "RateLimitWaitError",
    "RedirectError",
    "ReplayExhausted",
    "RepliesExhausted",
    "ReportError",
    "RequestBudgetError",
    "ResponseDecodeError",
    "ResponseTooLargeError",
    "RetryableError",
    "RevertFailure",
    "SafetyCheckPending",
    "ScreenshotError",
    "ServerLimitError",
    "ServerUnreachableError",
    "StateError",
    "TaskSetupError",
    "TrajectoryError",
    "TrajectoryExistsError",
    "UnsupportedComputerAction",
    "UnwritableRecord",
    "UsageError",
    "error_line",
    "error_text",
]
