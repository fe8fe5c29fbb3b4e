"""The environment contract: what an episode loop asks of a desktop, sync and async.

An environment is anything with OSWorld's `DesktopEnv` methods:
`reset(task_config=...) -> observation`, `step(action, pause) -> (observation,
reward, done, info)`, `evaluate() -> float | None` and `close()`; observations
are OSWorld observation dicts (`screenshot` PNG bytes, `accessibility_tree`
XML text). `ReplayEnv` is one; an OSWorld `DesktopEnv` you already have is one
once wrapped in `DesktopEnvAdapter` (which checks what it returns); `in_thread`
gives any of them the async form, each call in a worker thread, so an asyncio
runner can drive many at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

import httpx

from adapters._checks import path_argument, positive_int
from adapters._files import new_file
from adapters._strict_json import _NotFinite, strict_loads
from adapters.engine.body import ACCEPT_ENCODING
from adapters.engine.deadline import Cutoff, cut_by, stream_until
from adapters.errors import (
    EnvironmentFailure,
    RevertFailure,
    TaskSetupError,
    error_line,
    error_text,
)
from adapters.runs.computer_13 import action_word, computer_13_code
from adapters.runs.vm_http import (
    DEFAULT_MAX_ANSWER_BYTES,
    TRANSFER_SECONDS,
    VmUnanswered,
    answer_seconds,
    closed,
    copy_within,
    failure,
    outlasting_commands,
    seconds_limit,
    stopped,
    vm_answer,
)
from adapters.runs.vm_json import json_body
from adapters.runs.vm_revert import RevertCommand
from adapters.runs.vm_setup import (
    DEFAULT_CLIENT_PASSWORD,
    DEFAULT_MAX_DOWNLOAD_BYTES,
    ServerSetup,
    plan_setup,
)
from adapters.runs.vm_tries import tries
from adapters.trajectories.osharm import finite_number
from osharm_core import Action, ConfigError, OsharmError
from osharm_core.config import check_password
from osharm_core.errors import excerpt
from osharm_core.vocabulary import DEFAULT_SCREEN_SIZE

_logger = logging.getLogger(__name__)

Observation = dict[str, Any]
_T = TypeVar("_T")
StepResult = tuple[Observation, float, bool, dict[str, Any]]


@runtime_checkable
class Env(Protocol):
    """A desktop an episode runs on, driven synchronously."""

    def reset(self, task_config: Mapping[str, Any] | None = None, **kwargs: Any) -> Observation:
        """Set the desktop up for a task and return the first observation."""
        ...

    def step(self, action: Action, pause: float = 0) -> StepResult:
        """Execute one action; the observation after it, the reward, done, and info."""
        ...

    def evaluate(self) -> float | None:
        """The task's score, when the environment can judge it."""
        ...

    def close(self) -> None:
        """Release the desktop."""
        ...


@runtime_checkable
class AsyncEnv(Protocol):
    """The same contract for asyncio callers."""

    async def reset(
        self, task_config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Observation:
        """See `Env.reset`."""
        ...

    async def step(self, action: Action, pause: float = 0) -> StepResult:
        """See `Env.step`."""
        ...

    async def evaluate(self) -> float | None:
        """See `Env.evaluate`."""
        ...

    async def close(self) -> None:
        """See `Env.close`."""
        ...


def _observation(value: object, where: str) -> Observation:
    if not isinstance(value, dict):
        raise EnvironmentFailure(
            f"{where} returned {type(value).__name__}, not an observation dict"
        )
    screenshot, tree = value.get("screenshot"), value.get("accessibility_tree")
    if screenshot is not None and not isinstance(screenshot, bytes | bytearray):
        raise EnvironmentFailure(f"{where}: 'screenshot' is {type(screenshot).__name__}, not bytes")
    if tree is not None and not isinstance(tree, str | bytes):
        raise EnvironmentFailure(
            f"{where}: 'accessibility_tree' is {type(tree).__name__}, not text"
        )
    return value


#: Seconds a desktop is left to settle after a task's setup before the first observation
#: (OS-Harm's runner waits about this long; OSWorld's run.py waits 60).
DEFAULT_SETTLE: Final = 10.0


def _settle(value: object) -> float:
    return seconds_limit("settle", value, high=3600)


def _own_screen_size(env: object) -> tuple[int, int] | None:
    """A wrapped env's screen size when it keeps one in whole pixels (`screen_size`, or
    `screen_width` and `screen_height`), else None. OSWorld's `DesktopEnv` keeps none
    (its `vm_screen_size` asks the VM, and is not used)."""
    try:
        size = getattr(env, "screen_size", None)
        if size is None:
            size = (getattr(env, "screen_width", None), getattr(env, "screen_height", None))
    except Exception:  # a property that fails: no size known
        return None
    if isinstance(size, list | tuple) and len(size) == 2:
        try:
            return _screen(tuple(size), "the wrapped env's screen size")
        except EnvironmentFailure:
            return None
    return None


def _called(what: str, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
    """`method(*args, **kwargs)` of a wrapped `DesktopEnv`; an exception it raises that is not
    an `OsharmError` becomes an `EnvironmentFailure` naming `what` and the exception."""
    try:
        return method(*args, **kwargs)
    except OsharmError:
        raise
    except Exception as exc:
        raise EnvironmentFailure(f"{what}: {error_line(exc)}") from exc


class DesktopEnvAdapter:
    """An OSWorld `DesktopEnv` (or anything shaped like it) under the `Env` contract.

    Calls go straight through; what comes back is checked, so a misbehaving
    environment gives an `EnvironmentFailure` saying which call returned what
    instead of an error deep inside the agent. As OSWorld's and OS-Harm's
    runners do, `reset` lets the desktop settle for `settle` seconds after
    the task's setup and observes it again (`DesktopEnv._get_obs()`), so the
    first observation shows the apps the setup opened (with `settle=0`, or an
    object without `_get_obs`, `reset`'s own observation is used).

    A computer_13 action (any mapping but WAIT / DONE / FAIL) is checked
    against the vocabulary before it is passed on, as `OSWorldServerEnv`
    checks it: OSWorld's controller writes its fields into Python code
    unquoted, so a model's `"button": "left'); __import__('os')..."` would
    run on the VM. One refused runs nothing and the wrapped env is not
    called: the step's info is `{"error": why}`, the observation the last
    one seen, and the episode goes on. Points must lie on `screen_size`:
    as given, else the wrapped env's own (`screen_size`, or `screen_width`
    and `screen_height`, in whole pixels), else the last screenshot's size,
    else 1920x1080.
    """

    def __init__(
        self,
        desktop_env: Any,
        *,
        settle: float = DEFAULT_SETTLE,
        sleep: Callable[[float], None] | None = None,
        screen_size: tuple[int, int] | None = None,
    ) -> None:
        self.env = desktop_env
        self.settle = _settle(settle)
        self._sleep = sleep or time.sleep
        self._screen_size = None if screen_size is None else _screen(screen_size, "screen_size")
        self._last: Observation | None = None

    @property
    def screen_size(self) -> tuple[int, int]:
        """The screen a computer_13 action's point must lie on (see the class doc)."""
        if self._screen_size is not None:
            return self._screen_size
        own = _own_screen_size(self.env)
        if own is not None:
            return own
        screenshot = None if self._last is None else self._last.get("screenshot")
        if isinstance(screenshot, bytes | bytearray):
            try:
                return _png_size(bytes(screenshot[:24]))
            except EnvironmentFailure:  # not a PNG we can read the size of
                pass
        return DEFAULT_SCREEN_SIZE

    def _seen(self, observation: Observation) -> Observation:
        self._last = observation
        return observation

    def reset(self, task_config: Mapping[str, Any] | None = None, **kwargs: Any) -> Observation:
        """`DesktopEnv.reset(task_config=...)`, then the settled desktop's observation, checked
        (what it raises is an `EnvironmentFailure`, as for `step`)."""
        self._last = None
        config = None if task_config is None else dict(task_config)
        first = _observation(
            _called("reset", self.env.reset, task_config=config, **kwargs), "reset"
        )
        observe = getattr(self.env, "_get_obs", None)
        if not self.settle or not callable(observe):
            return self._seen(first)
        self._sleep(self.settle)
        return self._seen(_observation(_called("_get_obs", observe), "_get_obs"))

    def _refused(self, why: EnvironmentFailure) -> StepResult:
        """The step of a refused computer_13 action: nothing ran, the desktop as last seen."""
        observation = self._last
        if observation is None:  # stepped before any reset: look without acting
            observe = getattr(self.env, "_get_obs", None)
            if not callable(observe):
                raise EnvironmentFailure(f"step: {why} (and no observation to return)") from None
            observation = self._seen(_observation(_called("_get_obs", observe), "_get_obs"))
        return observation, 0, False, {"error": str(why)}

    def step(self, action: Action, pause: float = 0) -> StepResult:
        """`DesktopEnv.step(action, pause)`, checked: the reward must be a finite number and
        `info` a mapping JSON can hold (its traj.jsonl line is strict JSON), nested at most
        `MAX_ANSWER_DEPTH` deep, else an `EnvironmentFailure` says what was wrong. An
        exception it raises (OSWorld's controller raises one for a computer_13 action it
        does not know) becomes an `EnvironmentFailure` naming it, so the task-list runners
        fail that episode and go on, as OSWorld's runner fails that example; an
        `OsharmError` passes as it is. A computer_13 action the vocabulary refuses is not
        passed on (see the class doc)."""
        if isinstance(action, Mapping) and action_word(action) is None:
            try:
                computer_13_code(action, screen_size=self.screen_size)
            except EnvironmentFailure as refused:  # the model's action: nothing runs
                return self._refused(refused)
        result = _called("step", self.env.step, action, pause)
        if not isinstance(result, tuple) or len(result) != 4:
            raise EnvironmentFailure("step must return (observation, reward, done, info)")
        obs, reward, done, info = result
        reward = finite_number("step: reward is", reward)  # DesktopEnv's 0 stays 0 in traj.jsonl
        if info is not None and not isinstance(info, Mapping):
            raise EnvironmentFailure(f"step: info is {type(info).__name__}, not a mapping")
        info = dict(info or {})
        if _nested_past(info, MAX_ANSWER_DEPTH):
            raise EnvironmentFailure(
                f"step: info is nested more than {MAX_ANSWER_DEPTH} levels deep"
            )
        try:  # it goes in the step's traj.jsonl line, which is strict JSON
            json.dumps(info, allow_nan=False)
        except (TypeError, ValueError, RecursionError) as exc:
            raise EnvironmentFailure(
                f"step: info cannot be written as JSON: {error_text(exc)}"
            ) from None
        return self._seen(_observation(obs, "step")), reward, bool(done), info

    def evaluate(self) -> float | None:
        """`DesktopEnv.evaluate()`, as a finite float (or None when it gives none)."""
        score = _called("evaluate", self.env.evaluate)
        if score is None:
            return None
        return finite_number("evaluate returned", score)  # an int stays one, as in the reference

    def close(self) -> None:
        """`DesktopEnv.close()`, when it has one."""
        close = getattr(self.env, "close", None)
        if callable(close):
            close()


#: The executor `in_thread` environments run their calls in; `None`: the loop's default.
#: `arun_task_list` sets it for its run (a thread per worker), so episodes waiting on slow
#: desktops neither wait for each other nor for the threads that build prompts.
ENV_EXECUTOR: ContextVar[Executor | None] = ContextVar("osharm_env_executor", default=None)


class _InThread:
    def __init__(self, env: Env) -> None:
        self.env = env

    async def _call(self, method: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        call = functools.partial(contextvars.copy_context().run, method, *args, **kwargs)
        running = asyncio.get_running_loop().run_in_executor(ENV_EXECUTOR.get(), call)
        try:
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            # A thread cannot be interrupted: the call finishes before the episode ends, so
            # its environment is not closed, or handed to another episode, under it. An
            # environment that can cut its call short (`abort`) is asked to.
            abort = getattr(self.env, "abort", None)
            if callable(abort):
                abort()
            while not running.done():
                with contextlib.suppress(asyncio.CancelledError):  # cancelled again
                    await asyncio.wait([running])
            if not running.cancelled():
                running.exception()  # seen: its episode has ended, and says why elsewhere
            raise

    async def reset(
        self, task_config: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> Observation:
        return await self._call(self.env.reset, task_config, **kwargs)

    async def step(self, action: Action, pause: float = 0) -> StepResult:
        return await self._call(self.env.step, action, pause)

    async def evaluate(self) -> float | None:
        return await self._call(self.env.evaluate)

    async def close(self) -> None:
        await self._call(self.env.close)

    @property
    def per_turn(self) -> bool:
        """Whether the environment moves once per model turn (a paced `ReplayEnv`)."""
        return getattr(self.env, "per_turn", False) is True

    @property
    def recording_problem(self) -> str | None:
        """Why the environment's screen recording did not start, if it did not (`OSWorldServerEnv`)."""
        problem = getattr(self.env, "recording_problem", None)
        return problem if isinstance(problem, str) else None

    async def begin_turn(self) -> Any:
        """The environment's `begin_turn()` (see `ReplayEnv`), in a worker thread."""
        return await self._call(self.env.begin_turn)  # type: ignore[attr-defined]


def in_thread(env: Env) -> AsyncEnv:
    """`env` for asyncio callers: each call runs in a worker thread, so the event loop never
    blocks. A cancelled call (an episode's time limit) is let finish first: the thread
    cannot be stopped, and nothing else may use the environment while it runs; an
    environment with an `abort()` method (`OSWorldServerEnv`) is asked to cut it short."""
    return _InThread(env)


# --- a running OSWorld VM or container -------------------------------------------------

#: The largest screen recording `OSWorldServerEnv.end_recording` saves (1 GiB).
DEFAULT_MAX_RECORDING_BYTES: Final = 1 << 30
#: The largest screen side accepted (pixels), given or read from a screenshot.
MAX_SCREEN_SIDE: Final = 16384
#: Tries of a VM call that may be repeated, and the seconds between them (OSWorld's: 3, 5 s).
DEFAULT_VM_RETRIES: Final = 3
DEFAULT_VM_RETRY_WAIT: Final = 5.0
#: How long a reverted VM's server may take to answer again (OSWorld's providers wait 300 s).
DEFAULT_READY_TIMEOUT: Final = 300.0
#: The longest `timeout` and `ready_timeout` accepted (a day).
MAX_TIMEOUT: Final = 86400.0
#: Seconds between two looks at a reverted VM, and the most one look may take.
READY_POLL: Final = 2.0
READY_POLL_TIMEOUT: Final = 10.0
#: The deepest nesting of lists and objects kept from an `/execute` answer (OSWorld's is flat).
MAX_ANSWER_DEPTH: Final = 32
#: The most characters of an `/execute` answer's field a step's info keeps (64 Ki), and the
#: most fields: traj.jsonl stays small whatever a command prints.
MAX_INFO_TEXT: Final = 64 * 1024
MAX_INFO_FIELDS: Final = 8
#: What OSWorld's controller puts before every pyautogui action it runs on the desktop.
PYAUTOGUI_PREFIX: Final = "import pyautogui; import time; pyautogui.FAILSAFE = False; "


class _NotOk(EnvironmentFailure):
    """The VM's server answered with a status other than 200."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[Any, ...]:
        return (_NotOk, (str(self), self.status))


#: Statuses that say a command was not run: the server (or a proxy before it) is busy.
_BUSY: Final = frozenset({429, 503})


def _any_failure(exc: Exception) -> bool:
    """Reading the desktop runs nothing on it: any failure may be tried again (as OSWorld does)."""
    return isinstance(exc, EnvironmentFailure)


def _unrun(exc: Exception) -> bool:
    """A command is sent again only when it cannot have run: the request never reached the
    server, or the server said it is busy (503, 429). OSWorld's server answers 500 also when
    the command ran and failed after, so a 500 is not tried again (OSWorld's controller does)."""
    if isinstance(exc, _NotOk):
        return exc.status in _BUSY
    return isinstance(exc, VmUnanswered) and not exc.sent


def _within(limit: float, left: float) -> float:
    """`limit` seconds, but at least a moment and never past `left`."""
    return max(0.1, min(limit, left))


def _png(body: bytes) -> bytes:
    if not body.startswith(b"\x89PNG\r\n\x1a\n"):
        raise EnvironmentFailure("GET /screenshot did not return a PNG")
    return body


def _screen(size: object, where: str) -> tuple[int, int]:
    """`size` as (width, height) when both are whole pixels in 1..16384, else a typed error."""
    if (
        isinstance(size, tuple)
        and len(size) == 2
        and all(type(n) is int and 1 <= n <= MAX_SCREEN_SIDE for n in size)
    ):
        return size[0], size[1]
    if where == "screen_size":
        raise ConfigError(
            f"screen_size must be (width, height) in 1..{MAX_SCREEN_SIDE}; got {size!r}"
        )
    raise EnvironmentFailure(f"{where}: the screen would be {size!r} pixels")


def _png_size(body: bytes) -> tuple[int, int]:
    """The width and height a PNG's header (its IHDR chunk) declares."""
    png = _png(body)
    if len(png) < 24 or png[12:16] != b"IHDR":
        raise EnvironmentFailure("GET /screenshot: the PNG has no IHDR header")
    size = (int.from_bytes(png[16:20], "big"), int.from_bytes(png[20:24], "big"))
    return _screen(size, "GET /screenshot")


def _tree(body: bytes) -> str | None:
    try:
        tree = json.loads(body)["AT"]
    except (ValueError, KeyError, TypeError, RecursionError):
        raise EnvironmentFailure('GET /accessibility did not return {"AT": ...}') from None
    if tree is not None and not isinstance(tree, str):
        raise EnvironmentFailure("GET /accessibility: 'AT' is not text")
    return tree


def _nested_past(value: object, limit: int) -> bool:
    """Whether `value` nests lists (tuples) or dicts more than `limit` deep (or is cyclic)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return False


def _execute_answer(body: bytes) -> dict[str, Any]:
    """`/execute`'s answer as the step's info will hold it (traj.jsonl is strict JSON):
    numbers JSON cannot carry, and nesting past `MAX_ANSWER_DEPTH` (which writing it, from
    deeper in the stack, might not take), are refused like text that is not JSON."""
    try:
        answer = strict_loads(body)
    except _NotFinite as exc:
        raise EnvironmentFailure(f"POST /execute did not return JSON: {exc.reason}") from None
    except (ValueError, RecursionError):
        raise EnvironmentFailure("POST /execute did not return JSON") from None
    if _nested_past(answer, MAX_ANSWER_DEPTH):
        raise EnvironmentFailure(
            f"POST /execute: its answer is nested more than {MAX_ANSWER_DEPTH} levels deep"
        )
    return answer if isinstance(answer, dict) else {"output": answer}


def _kept_text(value: str) -> tuple[str, int | None]:
    """`value`, or its first `MAX_INFO_TEXT` characters and its full length when longer."""
    if len(value) <= MAX_INFO_TEXT:
        return value, None
    return value[:MAX_INFO_TEXT], len(value)


def _kept_answer(answer: Mapping[str, Any]) -> dict[str, Any]:
    """An `/execute` answer as a step's info keeps it, small whatever the command printed.

    Each field (text, or another value's JSON) past `MAX_INFO_TEXT` characters keeps its
    head as text, its full length in `NAME_chars`; at most `MAX_INFO_FIELDS` fields are
    kept, names of at most 128 characters, and `fields_left_out` counts the rest.

    >>> _kept_answer({"output": "x" * 70000, "returncode": 0})["output_chars"]
    70000
    """
    kept: dict[str, Any] = {}
    fields = left_out = 0
    for name, value in answer.items():
        if fields >= MAX_INFO_FIELDS or len(name) > 128:
            left_out += 1
            continue
        fields += 1
        if isinstance(value, dict | list):
            text = json.dumps(value, allow_nan=False)
            if len(text) > MAX_INFO_TEXT:
                value = text
        if isinstance(value, str):
            value, length = _kept_text(value)
            if length is not None:
                kept[f"{name}_chars"] = length
        kept[name] = value
    if left_out:
        kept["fields_left_out"] = left_out
    return kept


class OSWorldServerEnv:
    """The HTTP server inside every OSWorld VM and container, as an `Env` (an edge object).

    Observations come from `GET /screenshot` (PNG bytes) and
    `GET /accessibility` (`{"AT": xml}`); a pyautogui action runs through
    `POST /execute` (`{"command": ["python", "-c", code], "shell": false}`)
    after OSWorld's prefix, and so does a computer_13 action, turned into the
    pyautogui calls OSWorld's controller makes for it (`computer_13_code`;
    an action outside the vocabulary, or off the screen, runs nothing and
    its step's info says why; `screen_size` is read from the VM's screenshot
    once unless given, and also fills the setup's `{SCREEN_...}`
    placeholders). WAIT sleeps `pause` seconds, DONE and FAIL end the
    episode without running anything (as words or as computer_13 dicts).
    A command `/execute` fails, or answers unreadably, is reported the same
    way (`{"error": ...}` in the step's info) and the episode goes on, as
    OSWorld's controller only logs it (see `step`); an answer is kept in the
    step's info (`{"execute": ...}`) cut to `MAX_INFO_FIELDS` fields of
    `MAX_INFO_TEXT` characters (`NAME_chars` notes a field's full length).
    `evaluate()` is `None`: OSWorld's evaluators run host-side in `DesktopEnv`.

    `reset(task_config)` performs the task's setup steps (its `config`)
    through the server's `/setup/...` endpoints, then observes: launch,
    execute / command, execute_with_verification, sleep, open,
    activate_window, close_window, change_wallpaper, and download (this host
    fetches each URL, at most `max_download_bytes`, and uploads it to the VM).
    A task with steps that need OSWorld's host-side machinery (Chrome DevTools
    tabs, logins, Google Drive, proxies, ...) is refused before anything runs:
    use `DesktopEnv` through `DesktopEnvAdapter` for it. See
    `adapters.runs.vm_setup`. A setup step sent but left unanswered fails the
    task (a `TaskSetupError`) when the VM still shows a screenshot after it,
    and is a `VmUnanswered` (the VM is gone) when it does not.
    Any failed or malformed answer is an
    `EnvironmentFailure` (naming the setup step and endpoint, in setup), and
    so is an answer past `max_answer_bytes` (64 MiB; as sent or decompressed)
    or not whole within 180 s (`timeout` + 60 s when longer) of the request's
    start, however slowly it drips in, headers included; a download or the
    recording gets 600 s. `timeout` is a number of seconds above 0 (at most
    a day) that bounds connecting and each read; an `httpx.Timeout` is
    refused (a `ConfigError`, as for any other bad value): pass an
    `http_client` built with one for finer control (the answer's whole-call
    limit still follows `timeout`). `abort()` ends a call under way at once.
    As OSWorld's controller does, a call is tried `retries` times (3),
    `retry_wait` seconds apart (5): reading the screenshot or the tree after
    any failure, a command only when it cannot have run (a connection that
    never opened, or a busy server: 503 or 429), never after a timeout, a
    broken answer or another status (OSWorld's server answers 500 also when
    the command ran and failed after).
    After a setup that ran any step, the desktop is left `settle` seconds
    (default 10, as OS-Harm's runner waits) before the first observation, so
    it shows what the setup opened. The server cannot restore a VM snapshot;
    `revert` (a callable, such as a `RevertCommand` running `vmrun
    revertToSnapshot ...`) does, before each task's setup: then the client
    waits up to `ready_timeout` seconds (300) for the server to show a
    screenshot again. Without it each task starts from the desktop the
    previous one left.

    Screen recording, as OSWorld's runner keeps it: `start_recording()`
    (`POST /start_recording`) and `end_recording(dest)` (`POST /end_recording`,
    whose body is the video, streamed to `dest`, at most
    `max_recording_bytes`). With `recording=PATH` the client does both by
    itself: it starts recording at `reset` (after the setup steps) and saves
    the video at `close` (OS-Harm / OSWorld folders name it `recording.mp4`).
    A recording left running on the VM is ended first (see `start_recording`);
    a start that fails at `reset` is logged as a warning, kept in
    `recording_problem`, and the episode runs unrecorded, as OSWorld's
    controller only logs it.
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 120.0,
        http_client: httpx.Client | None = None,
        sleep: Callable[[float], None] | None = None,
        recording: str | os.PathLike[str] | None = None,
        max_recording_bytes: int = DEFAULT_MAX_RECORDING_BYTES,
        screen_size: tuple[int, int] | None = None,
        client_password: str = DEFAULT_CLIENT_PASSWORD,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
        download_client: httpx.Client | None = None,
        settle: float = DEFAULT_SETTLE,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        retries: int = DEFAULT_VM_RETRIES,
        retry_wait: float = DEFAULT_VM_RETRY_WAIT,
        revert: Callable[[], None] | None = None,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        check_password("client_password", client_password)
        timeout = seconds_limit("timeout", timeout, high=MAX_TIMEOUT, above_zero=True)
        if revert is not None and not callable(revert):
            raise ConfigError(
                f"revert must be callable (e.g. a RevertCommand); got {excerpt(revert)}"
            )
        self.revert = revert
        self.ready_timeout = seconds_limit(
            "ready_timeout", ready_timeout, high=MAX_TIMEOUT, above_zero=True
        )
        self.settle = _settle(settle)
        self.max_answer_bytes = positive_int("max_answer_bytes", max_answer_bytes)
        self.retries = positive_int("retries", retries)
        self.retry_wait = seconds_limit("retry_wait", retry_wait, high=600)
        positive_int("max_download_bytes", max_download_bytes)
        self._screen_size = None if screen_size is None else _screen(screen_size, "screen_size")
        self.recording = None if recording is None else path_argument("recording", recording)
        self.max_recording_bytes = positive_int("max_recording_bytes", max_recording_bytes)
        self._recording_started = False
        #: Why the last `reset` could not start the recording (the episode ran unrecorded).
        self.recording_problem: str | None = None
        self._own = http_client is None
        self._closed = False  # by `close()`, with the HTTP client it closed
        self._http = http_client or httpx.Client(
            timeout=timeout, headers={"accept-encoding": ACCEPT_ENCODING}
        )
        # However an answer trickles in, it is whole within this long (or the call fails).
        self._answer_seconds = answer_seconds(timeout)
        self._stopped = threading.Event()
        # Cut by `abort`: the HTTP exchange under way ends at once, and no other starts.
        self._cutoff = Cutoff()
        self._sleep = sleep or self._wait
        self.setup = ServerSetup(
            self.base_url,
            self._http,
            sleep=self._sleep,
            download_client=download_client,
            max_download_bytes=max_download_bytes,
            client_password=client_password,
            screen_size=lambda: self.screen_size,
            max_answer_bytes=max_answer_bytes,
        )

    @property
    def screen_size(self) -> tuple[int, int]:
        """The VM's screen size: as given, else read from its screenshot once (then kept)."""
        if self._screen_size is None:
            self._screen_size = self._call(
                "GET", "/screenshot", read=_png_size, retry_if=_any_failure
            )
        return self._screen_size

    def _call(
        self,
        method: str,
        path: str,
        *,
        read: Callable[[bytes], _T],
        retry_if: Callable[[Exception], bool] | None = None,
        **kwargs: Any,
    ) -> _T:
        """`read` of the body of the server's 200 answer to `method path` (within
        `max_answer_bytes`), tried up to `retries` times while `retry_if` says a failure
        may pass, `retry_wait` seconds apart; else an `EnvironmentFailure` naming the call."""
        where = f"{method} {path}"

        def once() -> _T:
            status, body = vm_answer(
                self._http,
                method,
                self.base_url + path,
                where=where,
                limit=self.max_answer_bytes,
                **{"seconds": self._answer_seconds, **kwargs},
            )
            if status != 200:
                raise _NotOk(f"{where}: HTTP {status}", status)
            return read(body)

        def halted() -> EnvironmentFailure | None:
            if self._is_closed():
                return closed(where)
            return stopped(where) if self._cutoff.is_cut else None

        with cut_by(self._cutoff):
            try:
                if retry_if is None:
                    if (halt := halted()) is not None:
                        raise halt
                    return once()
                return tries(
                    once,
                    where=where,
                    attempts=self.retries,
                    wait=self.retry_wait,
                    retry_if=retry_if,
                    sleep=self._wait,
                    stopped=halted,
                )
            except EnvironmentFailure:
                if self._is_closed():  # cut off, or woken from its wait, by `close()`
                    raise closed(where) from None
                raise

    def _is_closed(self) -> bool:
        return self._closed or self._http.is_closed

    def observe(self) -> Observation:
        """The desktop now: screenshot and accessibility tree (each tried `retries` times)."""
        screenshot = self._call("GET", "/screenshot", read=_png, retry_if=_any_failure)
        if self._screen_size is None:
            self._screen_size = _png_size(screenshot)
        tree = self._call("GET", "/accessibility", read=_tree, retry_if=_any_failure)
        return {"screenshot": screenshot, "accessibility_tree": tree, "terminal": None}

    def abort(self) -> None:
        """Stop the call under way, from another thread (`in_thread` does, when its episode's
        time limit passes or the run is interrupted): a revert command is killed, waits
        (between tries too) end and an HTTP exchange under way is cut off at once (one still
        connecting ends at its connect timeout), each with an `EnvironmentFailure`; no VM call
        is tried again. Later calls fail at once, but `close()` still saves the recording."""
        self._stopped.set()
        self._cutoff.cut()

    def _wait(self, seconds: float) -> None:
        """Sleep `seconds`, unless `abort` is called meanwhile."""
        if self._stopped.wait(seconds):
            raise EnvironmentFailure(f"{self.base_url}: stopped while waiting on the VM")

    def wait_until_ready(self) -> None:
        """Look at `GET /screenshot` every `READY_POLL` seconds until it shows a PNG; an
        `EnvironmentFailure` with the last failure once `ready_timeout` seconds have passed."""
        deadline = time.monotonic() + self.ready_timeout
        while True:
            left = deadline - time.monotonic()
            try:
                look = _within(READY_POLL_TIMEOUT, left)
                self._call("GET", "/screenshot", read=_png, timeout=look, seconds=look)
                return
            except EnvironmentFailure as exc:
                last = str(exc)
            left = deadline - time.monotonic()
            if self._stopped.is_set():
                raise EnvironmentFailure(f"{self.base_url}: stopped while waiting on the VM")
            if left <= 0:
                raise EnvironmentFailure(
                    f"the VM at {self.base_url} did not show a screenshot within "
                    f"{self.ready_timeout:g} s of its revert; last: {last}"
                )
            self._sleep(min(READY_POLL, left))

    def _revert(self) -> None:
        """Run `revert`, then wait for the VM to answer; any failure is a `RevertFailure`."""
        assert self.revert is not None
        try:
            if isinstance(self.revert, RevertCommand):
                self.revert(cancel=self._stopped)
            else:
                self.revert()
        except RevertFailure:
            raise
        except EnvironmentFailure as exc:
            raise RevertFailure(error_text(exc)) from None
        except Exception as exc:
            raise RevertFailure(f"revert {excerpt(self.revert)}: {error_line(exc)}") from exc
        self._recording_started = False  # a recording under way did not survive the snapshot
        try:
            self.wait_until_ready()
        except RevertFailure:
            raise
        except EnvironmentFailure as exc:
            raise RevertFailure(error_text(exc)) from None

    def reset(self, task_config: Mapping[str, Any] | None = None, **kwargs: Any) -> Observation:
        """Revert the VM (with `revert` set), perform the task's setup steps (see the class
        doc), then the first observation.

        A setup failure names the task (its `id`) as well as the step. After
        setup steps the desktop settles for `settle` seconds. With `recording`
        set, the screen recording starts here, after the setup.
        """
        if task_config is not None and not isinstance(task_config, Mapping):
            raise EnvironmentFailure(
                f"reset: task_config is {type(task_config).__name__}, not a task object"
            )
        task = task_config or {}
        if self._is_closed():
            raise closed("reset")
        try:
            if self.revert is not None:
                plan_setup(task.get("config"))  # a task that cannot run is refused before it
                self._revert()
            ran = self._set_up(task.get("config"))
        except EnvironmentFailure as exc:
            task_id = task.get("id")
            if not isinstance(task_id, str):
                raise
            raise type(exc)(f"task {task_id[:80]!r}: {error_text(exc)}") from None
        if ran and self.settle:
            self._sleep(self.settle)
        observation = self.observe()
        self.recording_problem = None
        if self.recording is not None and not self._recording_started:
            self._start_recording_or_note()
        return observation

    def _set_up(self, config: object) -> int:
        """The task's setup steps (how many ran). A step sent but never answered (a command
        still running past its time, a connection broken under it) fails the task, a
        `TaskSetupError` naming the step, when the VM still shows a screenshot after it
        (each look tried `retries` times, `READY_POLL_TIMEOUT` s each); when it does not,
        the VM is gone and the `VmUnanswered` stands."""
        try:
            with cut_by(self._cutoff):
                return self.setup.run(config)
        except VmUnanswered as exc:
            if not exc.sent or self._stopped.is_set():
                raise
            try:
                look = READY_POLL_TIMEOUT
                self._call(
                    "GET",
                    "/screenshot",
                    read=_png,
                    retry_if=_any_failure,
                    timeout=look,
                    seconds=look,
                )
            except EnvironmentFailure:
                raise exc from None
            raise TaskSetupError(
                f"{error_text(exc)} (the VM still answers: the step failed, not the VM)"
            ) from None

    def start_recording(self) -> None:
        """Start the VM's screen recording.

        A VM left recording (a run killed mid-episode: OSWorld's server answers 400,
        "Recording is already in progress.") has that recording ended first, its video
        discarded unread, and is asked once more; any failure is an `EnvironmentFailure`.
        """
        try:
            self._call("POST", "/start_recording", read=bytes)
        except _NotOk as exc:
            if exc.status != 400:
                raise
            self._discard_recording()
            self._call("POST", "/start_recording", read=bytes)
        self._recording_started = True

    def _discard_recording(self) -> None:
        """`POST /end_recording` for a recording this client did not start: whatever the
        status (OSWorld's server stops its recorder before answering), the video is not
        read; closing the answer drops it."""
        where = "POST /end_recording"
        if self._is_closed():
            raise closed(where)
        seconds = self._answer_seconds
        deadline = time.monotonic() + seconds
        try:
            with (
                cut_by(self._cutoff),
                stream_until(
                    self._http, "POST", self.base_url + "/end_recording", deadline=deadline
                ),
            ):
                pass
        except httpx.HTTPError as exc:
            raise failure(where, exc, deadline=deadline, seconds=seconds) from None

    def _start_recording_or_note(self) -> None:
        """`start_recording` at `reset`; one that fails (but for a VM that gives no answer, or a
        stop) is logged as a warning and kept in `recording_problem`, and the episode runs
        unrecorded, as OSWorld's controller only logs a failed start."""
        try:
            self.start_recording()
        except VmUnanswered:
            raise
        except EnvironmentFailure as exc:
            if self._stopped.is_set():
                raise
            self.recording_problem = error_text(exc)
            _logger.warning(
                "%s: the screen recording did not start (%s): this episode runs unrecorded",
                self.base_url,
                self.recording_problem,
            )

    def end_recording(self, dest: str | os.PathLike[str]) -> Path:
        """Stop the recording and save the video the server sends to `dest`; returns `dest`.

        The body is streamed to `dest` + `.part` (removed first and made new, so a
        symbolic link left at that name is never written through) and renamed when
        whole; one over `max_recording_bytes` is an `EnvironmentFailure` and nothing is kept.
        """
        target = Path(dest)
        partial = target.with_name(target.name + ".part")
        deadline = time.monotonic() + TRANSFER_SECONDS
        where = "POST /end_recording"
        if self._is_closed():
            raise closed(where)
        answered = False
        try:
            with (
                cut_by(self._cutoff),
                stream_until(
                    self._http, "POST", self.base_url + "/end_recording", deadline=deadline
                ) as response,
            ):
                answered = True
                if response.status_code != 200:
                    raise EnvironmentFailure(f"POST /end_recording: HTTP {response.status_code}")
                # A fresh file: nothing left at that name (a planted link) is written through.
                with new_file(partial, EnvironmentFailure, replace=True) as out:
                    limit = self.max_recording_bytes
                    problem = copy_within(response, out, limit, setting="max_recording_bytes")
                    if problem is not None:
                        raise EnvironmentFailure(f"POST /end_recording: the video {problem}")
            partial.replace(target)
        except httpx.HTTPError as exc:
            raise failure(
                where, exc, deadline=deadline, seconds=TRANSFER_SECONDS, answered=answered
            ) from None
        except OSError as exc:
            raise EnvironmentFailure(f"cannot save the recording to {target}: {exc}") from None
        finally:
            self._recording_started = False
            partial.unlink(missing_ok=True)
        return target

    def execute(self, code: str) -> dict[str, Any]:
        """Run pyautogui code on the desktop; the server's answer (status, output, error,
        returncode).

        The body is ASCII JSON (`json_body`), so code holding a lone surrogate reaches the
        server escaped. A failed or unreadable answer is an `EnvironmentFailure`.
        """
        payload = {"command": ["python", "-c", PYAUTOGUI_PREFIX + code], "shell": False}
        body = json_body(payload)
        return self._call(
            "POST",
            "/execute",
            read=_execute_answer,
            retry_if=_unrun,
            timeout=outlasting_commands(self._http.timeout),
            **body,
        )

    def step(self, action: Action, pause: float = 0) -> StepResult:
        """Run one pyautogui or computer_13 action (or WAIT / DONE / FAIL); the observation
        after it.

        What the action did not do is reported, not raised, and the episode goes on: a
        computer_13 action the vocabulary refuses runs nothing, and `/execute` answering
        with an error status (OSWorld's server answers 500 for a command that overran) or
        with something unreadable leaves the command's fate unknown; either way the info is
        `{"error": why}` and the observation shows the desktop as it is. A VM that gives no
        answer at all (`VmUnanswered`), or an observation that cannot be read, is raised.
        """
        word = action_word(action)
        # The reward and the special actions' info are what OSWorld's DesktopEnv.step gives.
        if word in ("DONE", "FAIL"):
            return self.observe(), 0, True, {word.lower(): True}
        if word == "WAIT":
            self._sleep(pause)
            return self.observe(), 0, False, {}
        if isinstance(action, str):
            code = action
        elif isinstance(action, Mapping):
            size = self.screen_size
            try:
                code = computer_13_code(action, screen_size=size)
            except EnvironmentFailure as refused:  # the model's action: nothing runs
                return self.observe(), 0, False, {"error": str(refused)}
        else:
            raise EnvironmentFailure(
                f"step: an action is pyautogui code or a computer_13 object, "
                f"not {type(action).__name__}"
            )
        try:
            info: dict[str, Any] = {"execute": _kept_answer(self.execute(code))}
        except VmUnanswered:
            raise
        except EnvironmentFailure as failed:
            if self._stopped.is_set():  # the episode is being stopped: no more calls
                raise
            info = {"error": str(failed)}
        if pause:
            self._sleep(pause)
        return self.observe(), 0, False, info

    def evaluate(self) -> float | None:
        """None: the task's evaluator runs host-side (use DesktopEnv for scores)."""
        return None

    def close(self) -> None:
        """Save the recording (with `recording` set, once started), then close the HTTP client
        this object built. An `abort` before it does not stop it (one during it does).

        Once its HTTP client is closed (this one's, or one given and closed by its owner),
        every call fails at once, never tried again, with an `EnvironmentFailure` saying
        the environment was closed; calls under way in other threads when `close()` closes
        the client it built end so at once (one still connecting at its connect timeout).
        """
        self._stopped.clear()
        self._cutoff.clear()
        try:
            if self.recording is not None and self._recording_started:
                self.end_recording(self.recording)
        finally:
            self.setup.close()
            if self._own:
                self._closed = True
                self._stopped.set()  # waits between tries end
                self._cutoff.cut()  # so do the exchanges under way
                self._http.close()


__all__ = [
    "DEFAULT_READY_TIMEOUT",
    "DEFAULT_SETTLE",
    "PYAUTOGUI_PREFIX",
    "AsyncEnv",
    "DesktopEnvAdapter",
    "Env",
    "OSWorldServerEnv",
    "in_thread",
]
