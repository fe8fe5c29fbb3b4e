"""The environment contract: what an episode loop asks of a desktop, sync and async.

An environment is anything with OSWorld's `DesktopEnv` methods:
`reset(task_config=...) -> observation`, `step(action, pause) -> (observation,
reward, done, info)`, `evaluate() -> float | None` and `close()`; observations
are OSWorld observation dicts (`screenshot` PNG bytes, `accessibility_tree`
XML text). `in_thread` gives any of them the async form, each call in a worker
thread, so an asyncio runner can drive many at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from contextvars import ContextVar
from typing import Any, Protocol, TypeVar, runtime_checkable

from osharm_core import Action

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


#: The executor `in_thread` environments run their calls in; `None`: the loop's default.
#: `arun_task_list` sets it for its run (a thread per worker), so episodes waiting on slow
#: desktops neither wait for each other nor for the threads that build prompts.
ENV_EXECUTOR: ContextVar[Executor | None] = ContextVar("osharm_env_executor", default=None)


@runtime_checkable
class PacedEnv(Protocol):
    """An environment that moves once per model turn (a `ReplayEnv(per_turn=True)`): told by
    `begin_turn()` before each model call."""

    per_turn: bool

    def begin_turn(self) -> Any:
        """A model turn begins (see `ReplayEnv.begin_turn`)."""
        ...


@runtime_checkable
class Abortable(Protocol):
    """An environment that can cut a call under way short (`OSWorldServerEnv`)."""

    def abort(self) -> None:
        """End the call under way as soon as it can."""
        ...


@runtime_checkable
class RecordsScreen(Protocol):
    """An environment that records its screen (`OSWorldServerEnv` with `--record`)."""

    @property
    def recording_problem(self) -> str | None:
        """Why the recording did not start (`None`: it did, or none was asked for)."""
        ...


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
            if isinstance(self.env, Abortable):
                self.env.abort()
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
        return isinstance(self.env, PacedEnv) and self.env.per_turn is True

    @property
    def recording_problem(self) -> str | None:
        """Why the environment's screen recording did not start, if it did not (`OSWorldServerEnv`)."""
        return self.env.recording_problem if isinstance(self.env, RecordsScreen) else None

    async def begin_turn(self) -> Any:
        """The environment's `begin_turn()` (see `ReplayEnv`), in a worker thread."""
        env = self.env
        return await self._call(env.begin_turn) if isinstance(env, PacedEnv) else None


def in_thread(env: Env) -> AsyncEnv:
    """`env` for asyncio callers: each call runs in a worker thread, so the event loop never
    blocks. A cancelled call (an episode's time limit) is let finish first: the thread
    cannot be stopped, and nothing else may use the environment while it runs; an
    environment with an `abort()` method (`OSWorldServerEnv`) is asked to cut it short."""
    return _InThread(env)


__all__ = ["ENV_EXECUTOR", "AsyncEnv", "Env", "Observation", "StepResult", "in_thread"]
