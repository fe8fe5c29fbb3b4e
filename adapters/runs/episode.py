"""The one episode loop: every entry point (the CLI, task lists, workers, Ray) runs this.

```
env.reset ─▶ recorder.begin
  ( agent.step ─▶ recorder.step ─▶ ( env.step ─▶ recorder.action )* )*
      until DONE / FAIL, the environment's done, --max-steps, a budget cap or a failure
env.evaluate ─▶ recorder.finish
```

This is the only place that knows about terminal actions, observations that run
out, budget stops and environment failures. It returns an `Episode` value and
leaves the task's outcome (skipped, stopped, timed out, ...) to the runner
(`adapters.runs.tasks.arun_task`). `arun_episode` is the loop; `run_episode` its
synchronous shell for a synchronous agent and environment, with no event loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from concurrent.futures import Executor
from datetime import datetime
from typing import Any, Final, Literal, Protocol, TypeVar, runtime_checkable

import attrs

from adapters._checks import positive_int
from adapters.errors import (
    BudgetExceeded,
    EnvironmentFailure,
    ModelCallError,
    RevertFailure,
    SafetyCheckPending,
    TrajectoryError,
    UnwritableRecord,
    error_text,
)
from adapters.record import ActionRecord, EpisodeEnd, Recorder, StepRecord, raw_observation
from adapters.runs.env_contract import PacedEnv
from adapters.runs.screening import Screening, state_of
from adapters.runs.vm_http import VmUnanswered
from adapters.trajectories.osharm import ResultWriter, finite_number
from osharm_core import Action, AgentConfig, ConfigError
from osharm_core.errors import ObservationError, RequestBudgetError
from osharm_core.safety import SafetyTally, withheld_actions

_T = TypeVar("_T")
StepResult = tuple[dict[str, Any], float, bool, dict[str, Any]]

#: What ends one episode as failed while a run goes on: its model call failed, its setup was
#: refused or failed, its environment failed (`EnvironmentFailure`: an answer that cannot be
#: read, a screenshot that is no PNG, ...), it gave an observation that cannot be read or that
#: no request can fit, or a value its record cannot hold (`TrajectoryError`). Not a desktop
#: that is gone, nor a folder that cannot be written: see `stops_run`.
EPISODE_FAILURES: Final = (
    ModelCallError,
    EnvironmentFailure,
    ObservationError,
    RequestBudgetError,
    TrajectoryError,
)


def stops_run(exc: BaseException) -> bool:
    """Whether a failure stops the whole run rather than its episode: a VM that gives no answer
    at all or could not be restored to its snapshot (the next task on it would fail the same
    way, or start on a dirty desktop); a result folder that cannot be written (every later
    task's would fail too; a record refused for a value JSON cannot hold costs only its
    episode); and anything that is not an episode failure."""
    if isinstance(exc, TrajectoryError):
        return not isinstance(exc, UnwritableRecord)
    return isinstance(exc, VmUnanswered | RevertFailure) or not isinstance(exc, EPISODE_FAILURES)


#: Why an episode ended: a terminal action, the environment's `done`, the observations of a
#: paced replay running out, the step limit, a budget cap, an action the screen withheld
#: (with `on_flag="end"`), or a failure.
Ending = Literal["DONE", "FAIL", "done", "ran out", "max steps", "budget", "blocked", "failed"]


@attrs.frozen
class Episode:
    """How one episode went: why it ended, its score, how many model steps it took, and (ended
    by a budget cap, a screen or a failure) why, with the error itself when it failed;
    `safety` counts its steps' safety events."""

    ended: Ending
    score: float | None = None
    steps: int = 0
    detail: str = ""
    error: BaseException | None = attrs.field(default=None, eq=False)
    safety: SafetyTally = attrs.field(factory=SafetyTally)

    @property
    def failed(self) -> bool:
        """Whether the episode failed (its record holds OSWorld's error line)."""
        return self.ended == "failed"


@runtime_checkable
class SteppingAgent(Protocol):
    """An agent that gives a `StepRecord` per step (`PromptAgent`)."""

    def step(self, instruction: str, obs: Mapping[str, Any]) -> StepRecord: ...

    async def astep(self, instruction: str, obs: Mapping[str, Any]) -> StepRecord: ...


class _Turns:
    """The agent, the environment and the recorder behind the awaitables the loop calls: with
    `sync`, the agent's and the environment's synchronous methods, called in place (they never
    suspend); else their async ones, awaited. Recorder calls go to `executor` when
    offloading (they write files)."""

    def __init__(
        self,
        agent: Any,
        env: Any,
        recorder: Recorder,
        *,
        sync: bool = False,
        offload: bool = False,
        executor: Executor | None = None,
        on_step: Callable[[StepRecord], None] | None = None,
        clock: Callable[[], datetime] = datetime.now,
        screening: Screening | None = None,
    ) -> None:
        self.agent, self.env, self.recorder = agent, env, recorder
        self.sync, self.offload, self.executor = sync, offload, executor
        self.on_step, self.clock, self.screening = on_step, clock, screening
        self.steps = 0  # the model steps taken
        self.safety = SafetyTally()  # their safety events
        self.blocked = ""  # why the screen ended the episode
        self.paced = isinstance(env, PacedEnv) and env.per_turn is True

    async def _env(self, result: Any) -> Any:
        return result if self.sync else await result

    async def reset(self, task_config: Mapping[str, Any] | None) -> Mapping[str, Any]:
        return await self._env(self.env.reset(task_config=dict(task_config or {})))  # type: ignore[no-any-return]

    async def execute(self, action: Action, pause: float) -> StepResult:
        return await self._env(self.env.step(action, pause))  # type: ignore[no-any-return]

    async def evaluate(self) -> object:
        return await self._env(self.env.evaluate())

    async def begin_turn(self) -> tuple[Mapping[str, Any], bool] | None:
        return await self._env(self.env.begin_turn())  # type: ignore[no-any-return]

    async def step(
        self, instruction: str, obs: Mapping[str, Any], config: AgentConfig
    ) -> StepRecord:
        agent = self.agent
        if isinstance(agent, SteppingAgent):
            return (
                agent.step(instruction, obs) if self.sync else await agent.astep(instruction, obs)
            )
        if self.sync:
            text, actions = agent.predict(instruction, obs)
        else:
            text, actions = await agent.apredict(instruction, obs)
        observation = raw_observation(obs)
        return StepRecord.of_reply(
            instruction, config, observation, text, actions, step=self.steps + 1
        )

    async def record(self, write: Callable[[_T], object], value: _T) -> None:
        if not self.offload:
            write(value)
            return
        writing = asyncio.get_running_loop().run_in_executor(self.executor, write, value)
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError:
            await asyncio.wait([writing])  # a cancel: the write in flight finishes first
            raise


async def arun_episode(
    agent: Any,
    env: Any,
    recorder: Recorder,
    *,
    instruction: str,
    config: AgentConfig,
    max_steps: int,
    task_config: Mapping[str, Any] | None = None,
    observation: Mapping[str, Any] | None = None,
    pause: float = 0.0,
    offload: bool = False,
    executor: Executor | None = None,
    on_step: Callable[[StepRecord], None] | None = None,
    clock: Callable[[], datetime] = datetime.now,
    screening: Screening | None = None,
) -> Episode:
    """One episode of `agent` (a `PromptAgent`, or any agent with OSWorld's `predict` /
    `apredict`) on `env` (an `AsyncEnv`, or with `run_episode` an `Env`), recorded by
    `recorder`; starts with `env.reset(task_config=...)` unless the first `observation` is
    given.

    Each model step executes its actions in turn (DONE and FAIL included, as OSWorld's loop
    does; they end it, and so does the environment's `done`); an unparsable reply executes
    nothing and the episode goes on. A `BudgetExceeded` ends the episode like running out of
    steps (it is evaluated, and its record says why), except a run cap reached before the
    episode's first live model call (its earlier steps, if any, replayed from a recording):
    then it did not begin, and the error propagates with nothing finished. An episode failure
    (see `EPISODE_FAILURES`) is recorded (OSWorld's error line) and returned as
    `Episode(ended="failed")`; anything that stops the run (`stops_run`) propagates. With
    `offload`, the recorder's writes run in `executor` (default: the loop's), so an event loop
    running many episodes never waits for a disk. `on_step` (on the event loop) sees each
    step's record before the recorder does; `clock` gives the local time each action begins.
    `screening` screens each step's actions before any runs (see `adapters.runs.screening`):
    its events are in the step's record, a withheld action and the rest of its step do not
    run, and with `on_flag="end"` the episode ends there (`ended="blocked"`).
    """
    positive_int("max_steps", max_steps)
    turns = _Turns(
        agent,
        env,
        recorder,
        offload=offload,
        executor=executor,
        on_step=on_step,
        clock=clock,
        screening=None if screening is None else screening.for_task(instruction),
    )
    return await _episode(turns, instruction, config, max_steps, task_config, observation, pause)


async def _episode(
    turns: _Turns,
    instruction: str,
    config: AgentConfig,
    max_steps: int,
    task_config: Mapping[str, Any] | None,
    observation: Mapping[str, Any] | None,
    pause: float,
) -> Episode:
    recorder, began = turns.recorder, False
    try:
        if observation is None:
            observation = await turns.reset(task_config)
        began = True
        await turns.record(recorder.begin, observation)
        ended, budget = await _steps(turns, observation, instruction, config, max_steps, pause)
        score = _score(await turns.evaluate())
    except BudgetExceeded:
        raise  # not begun: its record stays unfinished, so a rerun with more budget runs it
    except Exception as exc:
        # OSWorld's error line, even for what stops the run once the episode has begun; a
        # desktop gone before its first observation leaves the folder as it was.
        stops = stops_run(exc)
        if began or not stops:
            await turns.record(recorder.finish, EpisodeEnd(failed=error_text(exc)))
        if stops:
            raise
        failure = _failure(exc)
        return Episode("failed", steps=turns.steps, detail=failure, error=exc, safety=turns.safety)
    await turns.record(recorder.finish, EpisodeEnd(score=score, budget_exceeded=budget))
    detail = turns.blocked if budget is None else budget
    return Episode(ended, score, turns.steps, detail, safety=turns.safety)


async def _steps(
    turns: _Turns,
    observation: Mapping[str, Any],
    instruction: str,
    config: AgentConfig,
    max_steps: int,
    pause: float,
) -> tuple[Ending, str | None]:
    """The model steps of an episode (counted in `turns.steps`): why they ended, and the reason
    a budget cap gave when one ended them."""
    obs, called = observation, False  # called: whether a live model has answered
    for step in range(1, max_steps + 1):
        if turns.paced:
            moved = await turns.begin_turn()
            if moved is not None:
                obs, ran_out = moved
                if ran_out:
                    return "ran out", None
                moved_on = ActionRecord(
                    step=step - 1, action=None, observation=obs, started=turns.clock()
                )
                await turns.record(turns.recorder.action, moved_on)
        before = state_of(turns.agent) if turns.screening is not None else None
        try:
            record = await turns.step(instruction, obs, config)
        except BudgetExceeded as exc:
            if exc.scope == "run" and not called:
                raise
            return "budget", error_text(exc)
        except SafetyCheckPending as exc:  # only a person may lift it: the episode ends here
            turns.blocked = f"ended at step {step}: {error_text(exc)}"
            return "blocked", None
        turns.steps += 1
        called = called or not record.prepaid
        if turns.screening is not None and before is not None:
            record = await turns.screening.apply(
                record, before, step=step, agent=turns.agent, sync=turns.sync
            )
        if record.safety_events:
            turns.safety += SafetyTally.of(record.safety_events)
        if turns.on_step is not None:
            turns.on_step(record)
        await turns.record(turns.recorder.step, record)
        withheld = withheld_actions(record.safety_events)
        actions = record.plain_actions or []
        for index, action in enumerate(actions):
            if index in withheld:  # it does not run, nor does the rest of its step
                if turns.screening is None or not turns.screening.ends:
                    break
                turns.blocked = f"ended by the screen at step {step}, action {index + 1}"
                return "blocked", None
            obs, ended = await _execute(turns, step, action, pause)
            if ended == "done":  # the environment ended it: a DONE or FAIL the reply went on to
                ended = next(filter(None, map(_terminal, actions[index + 1 :])), "done")
            if ended is not None:
                return ended, None
    return "max steps", None


async def _execute(
    turns: _Turns, step: int, action: Action, pause: float
) -> tuple[Mapping[str, Any], Ending | None]:
    """One action executed and recorded; the observation after it, and why the episode ended
    (`None`: it goes on)."""
    started = turns.clock()  # before it runs, as the reference stamps an action
    obs, reward, done, info = await turns.execute(action, pause)
    executed = ActionRecord(
        step=step,
        action=action,
        observation=obs,
        reward=reward,
        done=done,
        info=info,
        started=started,
    )
    await turns.record(turns.recorder.action, executed)
    return obs, _terminal(action) or ("done" if done else None)


def _terminal(action: Action) -> Literal["DONE", "FAIL"] | None:
    """DONE or FAIL when `action` is one (a special word, or a computer_13 action type)."""
    word = action.strip() if isinstance(action, str) else action.get("action_type")
    return "DONE" if word == "DONE" else "FAIL" if word == "FAIL" else None


def _failure(exc: Exception) -> str:
    """What failed, for an outcome's detail: a model call or an observation says so."""
    text = error_text(exc)
    if isinstance(exc, ModelCallError):
        return f"model call failed: {text}"
    return f"observation unreadable: {text}" if isinstance(exc, ObservationError) else text


def _score(value: object) -> float | None:
    """The score `evaluate` gave: `None` (nothing scored the episode) or a finite number (an int
    kept as it is, as the reference writes `result.txt`), else an `EnvironmentFailure`."""
    return None if value is None else finite_number("evaluate returned", value)


def run_episode(
    agent: Any,
    env: Any,
    observation: Mapping[str, Any],
    recorder: Recorder,
    *,
    max_steps: int,
    instruction: str | None = None,
    config: AgentConfig | None = None,
    pause: float = 0.0,
    clock: Callable[[], datetime] | None = None,
    screening: Screening | None = None,
) -> float | None:
    """One episode with a synchronous agent and environment from its first `observation`, as
    OSWorld's `run_single_example` runs one: returns the score; an episode failure is
    recorded, then raised. `instruction`, `config` and `clock` (the local time actions are
    stamped with) default to a `ResultWriter`'s task, configuration and clock; `screening`
    is as for `arun_episode` (its monitor called synchronously).

    It is `arun_episode` over calls that never suspend, so it finishes in one step of the
    coroutine, with no event loop.
    """
    if isinstance(recorder, ResultWriter):
        instruction = recorder.task.instruction if instruction is None else instruction
        config = recorder.config if config is None else config
        clock = recorder.clock if clock is None else clock
    if instruction is None or config is None:
        raise ConfigError(
            "run_episode needs instruction= and config= unless it records into a ResultWriter"
        )
    positive_int("max_steps", max_steps)
    screening = None if screening is None else screening.for_task(instruction)
    turns = _Turns(
        agent, env, recorder, sync=True, clock=clock or datetime.now, screening=screening
    )
    episode = _episode(turns, instruction, config, max_steps, None, observation, pause)
    try:
        episode.send(None)
    except StopIteration as stop:
        result: Episode = stop.value
    else:  # cannot happen: nothing awaits
        episode.close()
        raise RuntimeError("a synchronous episode suspended")
    if result.error is not None:
        raise result.error
    return result.score
