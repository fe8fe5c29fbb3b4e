"""`PromptAgent`: the reference agent's interface as a thin stateful shell over the pure core.

It holds the current immutable `AgentState`, builds each step with
`prepare_step`, asks its model client, and swaps in the state
`complete_step` returns. Drop it into an OSWorld / OS-Harm loop in place of
`mm_agents.agent.PromptAgent`.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any, Final, Literal

import attrs

from adapters._wire import log_quote
from adapters.accounting.budget import Budget, Reservation, check_budget
from adapters.accounting.cost import UsageTotals, step_cost, step_tokens
from adapters.accounting.prices import PriceTable, default_prices
from adapters.contract import ModelClient, ModelRequest, ModelResponse, Usage
from adapters.engine.client import HttpModelClient, billed_of
from adapters.engine.server_limits import body_size_of, fit_request
from adapters.errors import AgentBusyError, BudgetExceeded, error_line
from adapters.record import StepRecipient, StepRecord, raw_observation
from adapters.registry import client_for
from osharm_core import (
    MAX_ACTIONS_PER_REPLY,
    Action,
    AgentConfig,
    AgentState,
    CoordinateFrame,
    ImagePart,
    code_actions,
    thaw,
)
from osharm_core.budget import count_tokens
from osharm_core.config import check_config
from osharm_core.errors import ConfigError, excerpt
from osharm_core.observation import Observation
from osharm_core.prompts import system_prompt
from osharm_core.safety import reply_events
from osharm_core.scaling import effective_scaling
from osharm_core.step import StepRequest, complete_step, prepare_step

DEFAULT_LOGGER: Final = "desktopenv.agent"


class _ConfigField:
    """An agent attribute that reads and (validated) writes one `AgentConfig` field."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    def __get__(self, agent: PromptAgent | None, owner: type | None = None) -> Any:
        if agent is None:
            return self
        return getattr(agent.config, self.name)

    def __set__(self, agent: PromptAgent, value: Any) -> None:
        agent.config = attrs.evolve(agent.config, **{self.name: value})


@attrs.frozen
class _Pending:
    """One step between building the request and receiving the reply."""

    config: AgentConfig
    state: AgentState
    instruction: str
    step: StepRequest
    model_request: ModelRequest
    raw: Observation
    chain: int  # the agent's chain count when the step began (see `start_new_chain`)
    started: datetime = attrs.field(factory=lambda: datetime.now(UTC))


@attrs.define
class _Call:
    """One model call's timing: when it began (`time.perf_counter`) and how long it took."""

    began: float
    seconds: float = 0.0


def _describe_images(images: tuple[ImagePart, ...]) -> str:
    return ", ".join(
        f"{len(i.data)} b64 chars sha256:{hashlib.sha256(i.data.encode()).hexdigest()[:12]}"
        for i in images
    )


#: What the agent calls on its logger.
_LOGGER_METHODS: Final = ("isEnabledFor", "debug", "info", "warning", "error")


class PromptAgent:
    """The reference `PromptAgent`'s constructor, attributes and methods, over the pure core.

    Positional parameters and defaults are the reference's. `client` is any
    `ModelClient`; without one, `client_for(model)` is called on the first
    `predict`, so building an agent needs no key. `recorder` (for example a
    `TrajectoryRecorder`) receives every finished step. An invalid
    combination raises `ValueError` here, as the reference does, and so does a
    `client` without `complete` / `acomplete`, a `recorder` without a `record` method
    or a `budget` that is not a `Budget` (a `ConfigError`, before any model is called).

    The configuration fields are attributes (`agent.temperature = 0.2` is
    validated); `system_message` is the prompt without the task sentence;
    `observations`, `actions` and `thoughts` are fresh lists built from the
    immutable `state` on every access.

    `budget` (a `Budget` shared by a run's agents) caps tokens or dollars:
    once a cap is reached, `predict` raises `BudgetExceeded` before sending
    anything; while other agents' requests in flight may use up a run cap,
    it waits for their answers (see `Budget.reserve`). `usage_totals` is the
    episode's usage and cost so far. A 2xx reply the provider may have billed
    that gave no step (`ModelCallError.billed`, `ModelResponse.billed`) is
    charged to both, even when the call failed: the usage its body reported,
    or, when none could be read, an estimate (see `billed_totals`).
    """

    platform = _ConfigField()
    model = _ConfigField()
    max_tokens = _ConfigField()
    top_p = _ConfigField()
    temperature = _ConfigField()
    action_space = _ConfigField()
    observation_type = _ConfigField()
    max_trajectory_length = _ConfigField()
    a11y_tree_max_tokens = _ConfigField()
    client_password = _ConfigField()

    def __init__(
        self,
        platform: str = "ubuntu",
        model: str = "gpt-4-vision-preview",
        max_tokens: int = 1500,
        top_p: float = 0.9,
        temperature: float = 0.5,
        action_space: str = "computer_13",
        observation_type: str = "screenshot_a11y_tree",
        max_trajectory_length: int = 3,
        a11y_tree_max_tokens: int = 10000,
        client_password: str = "password",
        *,
        client: ModelClient | None = None,
        recorder: StepRecipient | None = None,
        budget: Budget | None = None,
    ) -> None:
        self._config = AgentConfig(
            platform=platform,  # type: ignore[arg-type]
            model=model,
            max_tokens=max_tokens,
            top_p=top_p,
            temperature=temperature,
            action_space=action_space,  # type: ignore[arg-type]
            observation_type=observation_type,  # type: ignore[arg-type]
            max_trajectory_length=max_trajectory_length,
            a11y_tree_max_tokens=a11y_tree_max_tokens,
            client_password=client_password,
        )
        if client is not None and (
            isinstance(client, type)
            or not any(callable(getattr(client, name, None)) for name in ("complete", "acomplete"))
        ):
            raise ConfigError(
                "client must be a ModelClient (complete / acomplete methods: see "
                f"adapters.client_for) or None; got {type(client).__name__} {excerpt(client)}"
            )
        self._client = client
        self._client_given = client is not None
        self.recorder = recorder
        self.budget = budget
        self._usage = UsageTotals()
        self._state = AgentState()
        self._stepping = threading.Lock()  # held from a step's start to its end
        self._chains = 0  # how many times a new provider conversation was begun
        self._chain_lock = threading.Lock()  # the state and the chain count change together
        self.logger = logging.getLogger(DEFAULT_LOGGER)

    def __getstate__(self) -> dict[str, Any]:
        """The agent as `pickle` and `copy` take it, as OSWorld's `run_multienv.py` hands agents
        to its worker processes (spawn start method): without its step lock (a new one is made)
        and without an HTTP client it resolved from the model name itself (connections do not
        cross processes; resolved again on first use there). Any other client goes along, a
        replay's with its place in the recording and an `HttpModelClient` as its configuration
        (key included; it opens its own connections). An agent in the middle of a step raises
        `AgentBusyError`; one holding a `Budget`, or a client sharing a `RateLimiter` or given
        its own httpx client, raises `ConfigurationError` (each counts or holds one process's
        calls: build them in each worker)."""
        if self._stepping.locked():
            raise AgentBusyError("cannot copy or pickle the agent while a step is under way")
        state = self.__dict__.copy()
        del state["_stepping"], state["_chain_lock"]
        if not self._client_given and isinstance(self._client, HttpModelClient):
            state["_client"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._stepping = threading.Lock()
        self._chain_lock = threading.Lock()

    @classmethod
    def from_config(
        cls,
        config: AgentConfig,
        *,
        client: ModelClient | None = None,
        recorder: StepRecipient | None = None,
        budget: Budget | None = None,
    ) -> PromptAgent:
        """An agent for a ready `AgentConfig` (including the options the reference lacks)."""
        agent = cls(client=client, recorder=recorder, budget=budget)
        agent.config = config
        return agent

    @property
    def config(self) -> AgentConfig:
        """The agent's configuration (replaceable).

        Changing the model drops a client resolved from the old model name and,
        as `start_new_chain()` does, the provider conversation of the old model
        (its ids and native record mean nothing to another model); the
        trajectory is kept. Changed while a step is in flight, the settings
        take effect from the next step, and the step's end keeps no conversation
        of the old model.
        """
        return self._config

    @config.setter
    def config(self, config: AgentConfig) -> None:
        check_config(config)
        if config.model != self._config.model:
            if not self._client_given:
                self._client = None
            self.start_new_chain()
        self._config = config

    @property
    def recorder(self) -> StepRecipient | None:
        """What receives every finished step's `StepRecord` (`None`: nothing): anything with a
        `step(record)` method (a `TrajectoryRecorder`), checked when set, so a wrong one fails
        here, not after a paid model call."""
        return self._recorder

    @recorder.setter
    def recorder(self, recorder: StepRecipient | None) -> None:
        if recorder is not None and (
            isinstance(recorder, type) or not isinstance(recorder, StepRecipient)
        ):
            raise ConfigError(
                "recorder must have a step(record) method (a TrajectoryRecorder: see "
                f"adapters.record.Recorder) or be None; got {type(recorder).__name__} "
                f"{excerpt(recorder)}"
            )
        self._recorder = recorder

    @property
    def budget(self) -> Budget | None:
        """The `Budget` whose caps this agent's calls count against (`None`: no caps), checked
        when set."""
        return self._budget

    @budget.setter
    def budget(self, budget: Budget | None) -> None:
        self._budget = check_budget(budget)

    @property
    def client(self) -> ModelClient:
        """The model client, resolved with `client_for(model)` on first use when none was given."""
        if self._client is None:
            self._client = client_for(self.config.model)
        return self._client

    @property
    def state(self) -> AgentState:
        """The trajectory so far, as an immutable value."""
        return self._state

    @property
    def usage_totals(self) -> UsageTotals:
        """Token usage and cost of this episode's steps (since the last `reset`)."""
        return self._usage

    def charge_usage(self, usage: Usage, model: str) -> float | None:
        """Count a call made for this episode beside the agent's own (a safety monitor's) in
        `usage_totals` and the budget, priced with the budget's table; returns its cost
        (`None`: unknown). A cap it reaches stops the agent's next request."""
        cost = step_cost(usage, model, self._prices())
        reached = self._charge(UsageTotals().add(usage, cost), None)
        if reached is not None:
            self.logger.warning("%s; no further request will be sent", reached)
        return cost

    @property
    def system_message(self) -> str:
        """The system prompt for this configuration, without the task sentence (as the reference)."""
        return system_prompt(self.config)

    @property
    def observations(self) -> list[dict[str, str | None]]:
        """Each turn's observation as sent: `{"screenshot": base64 or None, "accessibility_tree": text or None}`."""
        return [
            {"screenshot": r.screenshot, "accessibility_tree": r.accessibility_tree}
            for r in self._state.observations
        ]

    @property
    def actions(self) -> list[list[Action] | None]:
        """Each turn's actions (`None` where the reply could not be parsed), as fresh plain values."""
        return [None if a is None else [thaw(x) for x in a] for a in self._state.actions]

    @property
    def thoughts(self) -> list[str]:
        """Each turn's raw reply (`""` where it could not be parsed)."""
        return list(self._state.thoughts)

    @property
    def pending_safety_checks(self) -> tuple[tuple[str, str, str], ...]:
        """Safety checks the provider raised on the last step, as `(id, code, message)`; never acknowledged.

        While any are pending, a continued Responses chain refuses the next
        call: decide, then `start_new_chain()` (or `reset()`).
        """
        continuation = self._state.continuation
        return () if continuation is None else continuation.safety_checks

    def start_new_chain(self) -> None:
        """Forget where a stateful provider conversation stands, keeping the trajectory.

        Called while a step is in flight, it holds for that step's end too: the step's turn
        is kept, the conversation it would continue is not.
        """
        while True:  # the new state is built outside the lock: a long one takes a while
            state = self._state
            fresh = attrs.evolve(state, continuation=None)
            with self._chain_lock:
                if self._state is state:
                    self._chains += 1
                    self._state = fresh
                    return

    def reset(self, _logger: logging.Logger | None = None, **_: object) -> None:
        """Start a new episode: clear the trajectory and set the logger (the default one when None).

        Other keywords that newer OSWorld loops pass (such as `vm_ip`) are accepted and ignored.
        A step in flight raises `AgentBusyError` (its end would write the old episode's turn
        into the new one); a logger without the `logging.Logger` methods the agent calls
        (a logger's name given instead) raises `ConfigError`.
        """
        if _logger is not None and not all(
            callable(getattr(_logger, name, None)) for name in _LOGGER_METHODS
        ):
            raise ConfigError(
                "reset() takes a logging.Logger (or None for the default one); got "
                f"{type(_logger).__name__} {excerpt(_logger)}"
            )
        self._claim("reset()")
        try:
            with self._chain_lock:
                self._state = AgentState()
            self._usage = UsageTotals()
            self.logger = _logger if _logger is not None else logging.getLogger(DEFAULT_LOGGER)
        finally:
            self._stepping.release()

    def _claim(self, what: str) -> None:
        """Take the agent for one step (or a reset); `AgentBusyError` if a step is in flight."""
        if not self._stepping.acquire(blocking=False):
            raise AgentBusyError(
                f"PromptAgent.{what}: another step of this agent is still in flight; an agent "
                "takes one step at a time (its trajectory is one episode's): await or join "
                "that step first, or use one agent per episode"
            )

    def step(self, instruction: str, obs: Mapping[str, Any] | Observation) -> StepRecord:
        """One step, as a value: what was sent, the reply, the actions, the usage and cost.

        A model error propagates (typed) and leaves the state exactly as it was.
        An empty reply (a silent refusal, a budget spent on reasoning) is a reply:
        it is recorded like any unparsable one. A recorder error (a full disk)
        propagates after the state was updated: the step happened, only its record
        is missing. A second step started while one is in flight (from another
        thread) raises `AgentBusyError` before any call.
        """
        return self._step(instruction, obs, "step()")

    def _step(
        self, instruction: str, obs: Mapping[str, Any] | Observation, what: str
    ) -> StepRecord:
        self._claim(what)
        held = None
        try:
            budget = self._budget_for_next()
            held = None if budget is None else budget.reserve(self._usage)
            pending = self._begin(instruction, obs)
            with self._calling(pending, held) as call:
                response = self.client.complete(pending.model_request)
            return self._finish(pending, response, call.seconds, held)
        finally:
            self._end_step(held)

    async def astep(self, instruction: str, obs: Mapping[str, Any] | Observation) -> StepRecord:
        """`step` for async callers: the model call awaits `acomplete`.

        On asyncio a prompt that takes real work (a large tree to parse, marks
        to draw, a screenshot to resize, a request to fit) is built in the
        loop's default executor, so a loop running many agents goes on serving
        the others meanwhile; a small one is built in place (see
        `INLINE_TREE_CHARS`). A second step started while one is in flight (two tasks
        on one agent) raises `AgentBusyError` before any call; a cancelled step frees
        the agent.
        """
        return await self._astep(instruction, obs, "astep()")

    async def _astep(
        self, instruction: str, obs: Mapping[str, Any] | Observation, what: str
    ) -> StepRecord:
        self._claim(what)
        held = None
        try:
            budget = self._budget_for_next()
            held = None if budget is None else await budget.areserve(self._usage)
            if _cheap_prompt(self.config, obs):
                pending = self._begin(instruction, obs)
            else:
                pending = await _off_loop(self._begin, instruction, obs)
            with self._calling(pending, held) as call:
                response = await self.client.acomplete(pending.model_request)
            return self._finish(pending, response, call.seconds, held)
        finally:
            self._end_step(held)

    def predict(
        self, instruction: str, obs: Mapping[str, Any] | Observation
    ) -> tuple[str, list[Action] | None]:
        """One step as OSWorld's loop takes it: the model's reply and the actions parsed from
        it (`None` when unparsable; `("", [])` for an empty pyautogui reply, `("", None)`
        for computer_13, as the reference does). See `step`."""
        record = self._step(instruction, obs, "predict()")
        return record.text, record.plain_actions

    async def apredict(
        self, instruction: str, obs: Mapping[str, Any] | Observation
    ) -> tuple[str, list[Action] | None]:
        """`predict` for async callers (see `astep`)."""
        record = await self._astep(instruction, obs, "apredict()")
        return record.text, record.plain_actions

    @contextlib.contextmanager
    def _calling(self, pending: _Pending, held: Reservation | None) -> Iterator[_Call]:
        """Times the model call; a call that fails (or is cancelled) is logged and the 2xx
        replies it got are charged before the error goes on."""
        call = _Call(time.perf_counter())
        try:
            yield call
        except Exception as exc:
            self._log_failure(exc, time.perf_counter() - call.began)
            self._charge_failed(pending, exc, held)
            raise
        except BaseException as exc:  # cancelled, timed out, Ctrl-C: charged all the same
            self._charge_failed(pending, exc, held)
            raise
        call.seconds = time.perf_counter() - call.began

    def _end_step(self, held: Reservation | None) -> None:
        if held is not None:
            held.release()  # a failed call's place; nothing once the step is settled
        self._stepping.release()

    def _begin(self, instruction: str, obs: Mapping[str, Any] | Observation) -> _Pending:
        with self._chain_lock:
            config, state, chain = self.config, self._state, self._chains
        step = prepare_step(config, state, instruction, obs)
        if config.server_profile is not None:
            step = fit_request(config, state, step, body_size_of(self.client, config, state))
            if step.observation.degradation is not None:
                self.logger.warning(
                    "Step %d: request cut down to fit server_profile %r: %s",
                    len(state) + 1,
                    config.server_profile,
                    step.observation.degradation.to_json(),
                )
        request = ModelRequest.from_config(config, step.messages, state.continuation)
        if self.logger.isEnabledFor(logging.DEBUG):
            self._log_request(len(state) + 1, step)
        return _Pending(config, state, instruction, step, request, raw_observation(obs), chain)

    def _log_request(self, number: int, step: StepRequest) -> None:
        images = tuple(i for m in step.messages for i in m.images)
        self.logger.debug(
            "Step %d: %d messages, %d text chars, %d images [%s]",
            number,
            len(step.messages),
            sum(len(m.text) for m in step.messages),
            len(images),
            _describe_images(images),
        )

    def _finish(
        self,
        pending: _Pending,
        response: ModelResponse,
        latency: float,
        held: Reservation | None = None,
    ) -> StepRecord:
        reply_frame = _reply_frame(pending.step.frame, response.frame)
        new_state, actions = complete_step(
            pending.config,
            pending.state,
            pending.step,
            response.text,
            continuation=response.continuation,
            reply_frame=reply_frame,
        )
        # Accounted before the state moves on: if pricing fails, the turn is neither taken nor
        # recorded, and the error leaves the agent as it was.
        cost, budget_note = self._account(pending, response, held, len(new_state))
        with self._chain_lock:
            if pending.chain != self._chains:  # a new chain began while the model answered
                new_state = attrs.evolve(new_state, continuation=None)
            self._state = new_state
        dropped = _dropped_actions(pending, response.text, actions)
        self._log_reply(len(new_state), response, latency, actions, dropped)
        record = StepRecord(
            instruction=pending.instruction,
            config=pending.config,
            observation=pending.raw,
            request=pending.step,
            response=response,
            actions=new_state.actions[-1],
            history=len(pending.state),
            latency=latency,
            started=pending.started,
            reply_frame=reply_frame,
            dropped_actions=dropped,
            cost_usd=cost,
            budget_exceeded=budget_note,
            safety_events=reply_events(
                len(new_state),
                response.text,
                refusal=response.refusal,
                finish_reason=response.finish_reason,
                safety_checks=()
                if response.continuation is None
                else response.continuation.safety_checks,
                by=response.model,
            ),
        )
        if self.recorder is not None:
            self.recorder.step(record)
        return record

    def _log_reply(
        self,
        number: int,
        response: ModelResponse,
        latency: float,
        actions: list[Action] | None,
        dropped: int,
    ) -> None:
        self.logger.info("RESPONSE: %s", response.text)
        if response.refusal is not None or not response.text:
            self.logger.warning(
                "Step %d: the model %s (finish reason %s)",
                number,
                f"refused: {log_quote(response.refusal)}"
                if response.refusal
                else "gave an empty reply",
                log_quote(response.finish_reason),
            )
        if dropped:
            self.logger.warning(
                "Step %d: the reply holds %d code actions past the limit of %d; they were left out",
                number,
                dropped,
                MAX_ACTIONS_PER_REPLY,
            )
        self.logger.debug(
            "Step %d: model %s, %d tries, %.3fs, usage %s, %s actions",
            number,
            response.model,
            response.tries,
            latency,
            response.usage,
            "unparsable" if actions is None else len(actions),
        )

    def _account(
        self,
        pending: _Pending,
        response: ModelResponse,
        held: Reservation | None,
        number: int,
    ) -> tuple[float | None, str | None]:
        """Price step `number`, add it (and the earlier 2xx replies of its call that gave
        none, `response.billed`) to the episode's (and the budget's, settling `held`)
        totals; a reached cap's note.

        A reply a fork or a resumed task replays from its recording (`prepaid`) was
        paid for by the run that recorded it: its recorded cost is returned for the record,
        and it adds nothing to the totals or to the caps. (A `replay:` model stands in for
        a model, and its recorded usage counts.)
        """
        prices = self._prices()
        cost = step_cost(response.usage, pending.config.model, prices)
        step = (
            UsageTotals() if response.prepaid is True else UsageTotals().add(response.usage, cost)
        )
        if response.billed:
            billed = self._billed(pending, response.billed, held, f"Step {number}", response.usage)
            step = step + billed
        reached = self._charge(step, held)
        if reached is not None:
            self.logger.warning("Step %d: %s; no further request will be sent", number, reached)
        return cost, None if reached is None else str(reached)

    def _charge(self, step: UsageTotals, held: Reservation | None) -> BudgetExceeded | None:
        """Add `step` to the episode's and the budget's totals (settling `held`); the cap
        now reached, if any."""
        self._usage = self._usage + step
        if self.budget is None:
            return None
        if held is not None:
            held.settle(step)
        else:
            self.budget.charge(step)
        return self.budget.exceeded(self._usage)

    def _charge_failed(
        self, pending: _Pending, error: BaseException, held: Reservation | None
    ) -> None:
        """Charge the 2xx replies a failed or interrupted call got (`billed_of`), settling `held`."""
        billed = billed_of(error)
        if not billed:
            return
        step = self._billed(pending, billed, held, f"Step {len(pending.state) + 1} failed")
        reached = self._charge(step, held)
        if reached is not None:
            self.logger.warning("%s; no further request will be sent", reached)

    def _billed(
        self,
        pending: _Pending,
        billed: tuple[Usage, ...],
        held: Reservation | None,
        what: str,
        answered: Usage | None = None,
    ) -> UsageTotals:
        """The totals of 2xx replies that gave no step, logged (see `billed_totals`)."""
        request, prices = pending.model_request, self._prices()
        totals = billed_totals(billed, pending.config, request, prices, held, answered)
        self.logger.warning(
            "%s: %d %s with HTTP 2xx gave no step but may have been billed; charged: %s",
            what,
            len(billed),
            "reply" if len(billed) == 1 else "replies",
            totals.describe(),
        )
        return totals

    def _prices(self) -> PriceTable:
        return self.budget.prices if self.budget is not None else default_prices()

    def _budget_for_next(self) -> Budget | None:
        """The budget the next call takes a place under: none when the client answers it from
        a recording (a fork's or a continued task's prefix, prepaid)."""
        return None if getattr(self.client, "replays_next", False) is True else self.budget

    def _log_failure(self, exc: Exception, latency: float) -> None:
        self.logger.error(
            FAILED_CALL_MESSAGE,
            latency,
            error_line(exc),
        )


def billed_totals(
    billed: tuple[Usage, ...],
    config: AgentConfig,
    request: ModelRequest,
    prices: PriceTable,
    held: Reservation | None = None,
    answered: Usage | None = None,
) -> UsageTotals:
    """What the 2xx replies of one call that gave no step are charged (`ModelCallError.billed`):
    each one's reported usage at its price; one whose usage could not be read, an estimate
    that leans high, the largest of: the request's own (its input tokens counted locally,
    cl100k and the images' rules, plus all of `max_tokens` as output), the largest step
    charged in the run (what `held` holds), and what the call's other replies reported
    (`answered`: its final reply's usage). Its cost is unknown when the model has no price.

    >>> from osharm_core import Message, TextPart
    >>> config = AgentConfig(model="claude-sonnet-4-5", max_tokens=100)
    >>> request = ModelRequest.from_config(config, (Message("user", (TextPart("hi"),)),))
    >>> billed = (Usage(input_tokens=900, output_tokens=20), Usage())
    >>> totals = billed_totals(billed, config, request, default_prices(), answered=Usage(
    ...     input_tokens=1000, output_tokens=50))
    >>> totals.steps, totals.failed_steps, totals.estimated_steps, totals.tokens
    (2, 2, 1, 1970)
    """
    totals = UsageTotals()
    unread = 0
    known = [u for u in (*billed, answered) if u is not None and step_tokens(u) is not None]
    for usage in billed:
        if step_tokens(usage) is None:
            unread += 1
        else:
            totals = totals.add(usage, step_cost(usage, config.model, prices), failed=True)
    if not unread:
        return totals
    sent = count_tokens(request.messages, config.model)
    guesses = [Usage(input_tokens=sent, output_tokens=config.max_tokens), *known]
    tokens = max(step_tokens(u) or 0 for u in guesses)
    costs = [step_cost(u, config.model, prices) for u in guesses]
    cost = None if costs[0] is None else max(c for c in costs if c is not None)
    if held is not None:
        tokens = max(tokens, held.tokens)
        cost = None if cost is None else max(cost, held.cost_usd)
    for _ in range(unread):
        totals = totals.add_estimate(tokens, cost)
    return totals


#: The agent's log message for a failed model call (a caller that reports the failure itself,
#: as the CLI does, can leave these records out).
FAILED_CALL_MESSAGE: Final = "Model call failed after %.3fs: %s; the trajectory is unchanged"


#: The most accessibility-tree text whose prompt `apredict` builds on the event loop itself
#: (about 2 ms of parsing at ~25 us per 1,000 characters). Handing the work to a thread costs
#: more than that under the GIL: measured with 32 agents on one loop, building small prompts in
#: place saved ~1 ms of CPU per step and 3-5% of wall time.
INLINE_TREE_CHARS: Final = 80_000


def _cheap_prompt(config: AgentConfig, obs: Mapping[str, Any] | Observation) -> bool:
    """Whether this step's prompt is cheaper to build in place than in a thread: no marks
    to draw, no screenshot to resize, no request to fit, and no large tree to linearize."""
    if (
        config.observation_type == "som"
        or effective_scaling(config.scaling, config.model) != "native"
    ):
        return False
    if config.server_profile is not None:
        return False
    if config.observation_type == "screenshot":
        return True
    if isinstance(obs, Observation):
        tree: object = obs.accessibility_tree
    else:
        tree = obs.get("accessibility_tree") if isinstance(obs, Mapping) else None
    return not isinstance(tree, str | bytes | bytearray) or len(tree) <= INLINE_TREE_CHARS


async def _off_loop(build: Callable[..., _Pending], *args: Any) -> _Pending:
    """`build(*args)` in the running asyncio loop's default executor (here, on another loop)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:  # not asyncio (e.g. trio)
        return build(*args)
    return await asyncio.to_thread(build, *args)


def _reply_frame(
    sent: CoordinateFrame | None, recorded: CoordinateFrame | Literal["unscaled"] | None
) -> CoordinateFrame | None:
    """The frame a reply is read in when it is not its request's frame `sent`: the frame a
    replayed reply was `recorded` in (an identity frame for screen pixels); else None.

    >>> scaled = CoordinateFrame(screen_width=1920, screen_height=1080, image_width=1280, image_height=720)
    >>> _reply_frame(scaled, None), _reply_frame(scaled, scaled), _reply_frame(None, "unscaled")
    (None, None, None)
    >>> _reply_frame(scaled, "unscaled").is_identity, _reply_frame(None, scaled) == scaled
    (True, True)
    """
    if recorded is None:
        return None
    if recorded == "unscaled" or recorded.is_identity:
        if sent is None or sent.is_identity:
            return None
        return CoordinateFrame.identity(sent.screen_width, sent.screen_height)
    return None if recorded == sent else recorded


def _dropped_actions(pending: _Pending, text: str, actions: list[Action] | None) -> int:
    """How many code actions past the per-reply limit the reply held (0 unless at the limit)."""
    if pending.config.action_space != "pyautogui" or actions is None:
        return 0
    if len(actions) < MAX_ACTIONS_PER_REPLY:
        return 0
    return code_actions(text).dropped
