"""An OSWorld `DesktopEnv` you already have, under the `Env` contract, its answers checked."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol, TypeVar, runtime_checkable

from adapters.errors import EnvironmentFailure, error_line, error_text
from adapters.runs.computer_13 import action_word, computer_13_code
from adapters.runs.env_contract import Observation, StepResult
from adapters.runs.vm_answers import (
    MAX_ANSWER_DEPTH,
    given_screen,
    is_screen,
    nested_past,
    png_size,
)
from adapters.runs.vm_http import seconds_limit
from adapters.trajectories.osharm import finite_number
from osharm_core import Action, OsharmError
from osharm_core.vocabulary import DEFAULT_SCREEN_SIZE

_T = TypeVar("_T")


def _observation(value: object, where: str) -> Observation:
    """`value` when it is an observation dict whose screenshot is bytes and tree text, each
    when present; else an `EnvironmentFailure` saying what `where` returned."""
    if not isinstance(value, dict):
        raise EnvironmentFailure(f"{where} returned {type(value).__name__}, no observation")
    for key, kinds, noun in _OBSERVED:
        item = value.get(key)
        if not isinstance(item, kinds):
            raise EnvironmentFailure(f"{where}: {key!r} is {type(item).__name__}, not {noun}")
    return value


#: What an observation's screenshot and tree may be, and how an error names that.
_OBSERVED: Final = (
    ("screenshot", bytes | bytearray | None, "bytes"),
    ("accessibility_tree", str | bytes | None, "text"),
)


#: Seconds a desktop is left to settle after a task's setup before the first observation
#: (OS-Harm's runner waits about this long; OSWorld's run.py waits 60).
DEFAULT_SETTLE: Final = 10.0


def settle_seconds(value: object) -> float:
    """A `settle` argument: seconds in 0..3600, else a `ConfigError`."""
    return seconds_limit("settle", value, high=3600)


@runtime_checkable
class _SizedScreen(Protocol):
    screen_size: object


@runtime_checkable
class _MeasuredScreen(Protocol):
    screen_width: object
    screen_height: object


@runtime_checkable
class _Observing(Protocol):
    def _get_obs(self) -> Any: ...


@runtime_checkable
class _Closable(Protocol):
    def close(self) -> Any: ...


def _own_screen_size(env: object) -> tuple[int, int] | None:
    """A wrapped env's screen size when it keeps one in whole pixels (`screen_size`, or
    `screen_width` and `screen_height`), else None. OSWorld's `DesktopEnv` keeps none
    (its `vm_screen_size` asks the VM, and is not used)."""
    try:
        if isinstance(env, _SizedScreen):
            size: object = env.screen_size
        elif isinstance(env, _MeasuredScreen):
            size = (env.screen_width, env.screen_height)
        else:
            return None
    except Exception:  # a property that fails: no size known
        return None
    pair = tuple(size) if isinstance(size, list | tuple) else None
    return pair if is_screen(pair) else None


def _unwritable(info: Mapping[str, Any]) -> str | None:
    """Why a step's `info` cannot go in its traj.jsonl line (strict JSON), or None."""
    if nested_past(info, MAX_ANSWER_DEPTH):
        return f"is nested more than {MAX_ANSWER_DEPTH} levels deep"
    try:
        json.dumps(info, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as exc:
        return f"cannot be written as JSON: {error_text(exc)}"
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
        self.settle = settle_seconds(settle)
        self._sleep = sleep or time.sleep
        self._screen_size = None if screen_size is None else given_screen(screen_size)
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
        if screenshot:  # bytes: `_observation` saw to it
            try:
                return png_size(bytes(screenshot[:24]))
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
        if not self.settle or not isinstance(self.env, _Observing):
            return self._seen(first)
        self._sleep(self.settle)
        return self._seen(_observation(_called("_get_obs", self.env._get_obs), "_get_obs"))

    def _refused(self, why: EnvironmentFailure) -> StepResult:
        """The step of a refused computer_13 action: nothing ran, the desktop as last seen."""
        observation = self._last
        if observation is None:  # stepped before any reset: look without acting
            if not isinstance(self.env, _Observing):
                raise EnvironmentFailure(f"step: {why} (and no observation to return)") from None
            look = _called("_get_obs", self.env._get_obs)
            observation = self._seen(_observation(look, "_get_obs"))
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
        if not isinstance(action, str) and action_word(action) is None:
            try:
                computer_13_code(action, screen_size=self.screen_size)
            except EnvironmentFailure as refused:  # the model's action: nothing runs
                return self._refused(refused)
        result = _called("step", self.env.step, action, pause)
        if not isinstance(result, tuple) or len(result) != 4:
            raise EnvironmentFailure("step must return (observation, reward, done, info)")
        obs, reward, done, info = result
        reward = finite_number("step: reward is", reward)  # DesktopEnv's 0 stays 0 in traj.jsonl
        if not isinstance(info, Mapping | None):
            raise EnvironmentFailure(f"step: info is {type(info).__name__}, not a mapping")
        info = dict(info or {})
        problem = _unwritable(info)
        if problem is not None:
            raise EnvironmentFailure(f"step: info {problem}")
        return self._seen(_observation(obs, "step")), reward, bool(done), info

    def evaluate(self) -> float | None:
        """`DesktopEnv.evaluate()`, as a finite float (or None when it gives none)."""
        score = _called("evaluate", self.env.evaluate)
        if score is None:
            return None
        return finite_number("evaluate returned", score)  # an int stays one, as in the reference

    def close(self) -> None:
        """`DesktopEnv.close()`, when it has one."""
        if isinstance(self.env, _Closable):
            self.env.close()


__all__ = ["DEFAULT_SETTLE", "DesktopEnvAdapter"]
