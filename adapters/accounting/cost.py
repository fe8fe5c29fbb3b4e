"""Cost per step and usage totals per episode and run, as values.

A step's cost is `(input - cached) * input price + cached * cached price +
output * output price`, per million tokens. Reasoning tokens are inside
`output_tokens` for every provider (see `Usage`), so they are billed as
output and never twice. A cost is `None` (unknown) when the model has no
price, when the provider did not report input and output tokens (a count
outside 0 to `MAX_TOKEN_COUNT` is not a report), when it reported cached
tokens and the price has no cached rate, or when it would not be finite.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Final, Protocol

import attrs

from adapters.accounting.prices import ModelPrice, PriceTable, check_prices, default_prices
from adapters.contract import Usage, plausible_count

_MILLION = 1_000_000


def price_usage(usage: Usage, price: ModelPrice) -> float | None:
    """What `usage` costs at `price` in USD, or `None` when the counts or rates needed are missing.

    Cached tokens past the input count (which no provider reports) are taken as the input count.

    >>> price = ModelPrice(model="m", input=3.0, cached_input=0.3, output=15.0)
    >>> round(price_usage(Usage(input_tokens=1000, output_tokens=100, cached_input_tokens=400), price), 6)
    0.00342
    """
    inp, out = plausible_count(usage.input_tokens), plausible_count(usage.output_tokens)
    if inp is None or out is None:
        return None
    cached = min(plausible_count(usage.cached_input_tokens) or 0, inp)
    if cached and price.cached_input is None:
        return None
    cached_rate = price.cached_input or 0.0
    cost = ((inp - cached) * price.input + cached * cached_rate + out * price.output) / _MILLION
    return cost if math.isfinite(cost) else None


def step_cost(usage: Usage, model: str, prices: PriceTable | None = None) -> float | None:
    """The USD cost of one response's `usage` for `model` (the shipped table unless `prices`), or `None`.

    >>> from adapters.contract import Usage
    >>> step_cost(Usage(input_tokens=1_000_000, output_tokens=0), "claude-sonnet-4-20250514")
    3.0
    >>> step_cost(Usage(input_tokens=10, output_tokens=1), "compat/my-model") is None
    True
    """
    given = check_prices(prices)
    price = (given if given is not None else default_prices()).lookup(model)
    return None if price is None else price_usage(usage, price)


def step_tokens(usage: Usage) -> int | None:
    """Input plus output tokens of one response (the reported total when either is missing)."""
    inp, out = plausible_count(usage.input_tokens), plausible_count(usage.output_tokens)
    if inp is not None and out is not None:
        return inp + out
    return plausible_count(usage.total_tokens)


@attrs.frozen(kw_only=True)
class UsageTotals:
    """Usage and cost summed over steps (an episode, a run, several runs); `add` and `+` give new totals.

    `tokens` sums `step_tokens`; the per-kind sums count only what providers
    reported. `unreported_steps` counts steps with no token counts at all
    (they add 0 tokens); `unpriced_steps` steps whose cost is unknown.
    `cost_usd` is the sum of the known costs, or `None` when any step's cost
    is unknown (`known_cost_usd` is then a lower bound).

    `failed_steps` counts the replies charged that gave no step: a 2xx reply
    the provider may have billed but that could not be decoded, was cut off,
    or was an error (`ModelCallError.billed`, `ModelResponse.billed`); they
    are among `steps`. `estimated_steps` counts those whose usage could not be
    read, charged an estimate instead (`add_estimate`): their tokens are in
    `tokens` and their cost in `known_cost_usd`, not in the per-kind sums.
    """

    steps: int = 0
    tokens: int = 0
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    known_cost_usd: float = 0.0
    unreported_steps: int = 0
    unpriced_steps: int = 0
    failed_steps: int = 0
    estimated_steps: int = 0

    @property
    def cost_usd(self) -> float | None:
        """The total cost in USD when every step's cost is known, else `None`."""
        return None if self.unpriced_steps else self.known_cost_usd

    def add(self, usage: Usage, cost_usd: float | None, *, failed: bool = False) -> UsageTotals:
        """These totals plus one step's `usage` and cost (`None`: unknown); `failed`: a reply
        charged that gave no step."""
        tokens = step_tokens(usage)
        return attrs.evolve(
            self,
            steps=self.steps + 1,
            tokens=self.tokens + (tokens or 0),
            input_tokens=self.input_tokens + (plausible_count(usage.input_tokens) or 0),
            cached_input_tokens=self.cached_input_tokens
            + (plausible_count(usage.cached_input_tokens) or 0),
            output_tokens=self.output_tokens + (plausible_count(usage.output_tokens) or 0),
            reasoning_tokens=self.reasoning_tokens + (plausible_count(usage.reasoning_tokens) or 0),
            known_cost_usd=self.known_cost_usd + (cost_usd or 0.0),
            unreported_steps=self.unreported_steps + (tokens is None),
            unpriced_steps=self.unpriced_steps + (cost_usd is None),
            failed_steps=self.failed_steps + failed,
        )

    def add_estimate(self, tokens: int, cost_usd: float | None) -> UsageTotals:
        """These totals plus a reply the provider may have billed whose usage could not be
        read (it gave no step), charged an estimate: `tokens`, and `cost_usd` (`None`: unknown).

        >>> UsageTotals().add_estimate(1200, 0.01).describe()
        'tokens 1200 (in 0, cached 0, out 0, reasoning 0); 1 failed reply charged, 1 as an estimate; cost $0.0100'
        """
        return attrs.evolve(
            self,
            steps=self.steps + 1,
            tokens=self.tokens + tokens,
            known_cost_usd=self.known_cost_usd + (cost_usd or 0.0),
            unpriced_steps=self.unpriced_steps + (cost_usd is None),
            failed_steps=self.failed_steps + 1,
            estimated_steps=self.estimated_steps + 1,
        )

    def __add__(self, other: UsageTotals) -> UsageTotals:
        """The totals of both (an episode's added to a run's, two runs', ...)."""
        if not isinstance(other, UsageTotals):
            return NotImplemented
        return UsageTotals(
            **{
                field.name: getattr(self, field.name) + getattr(other, field.name)
                for field in attrs.fields(UsageTotals)
            }
        )

    def describe(self) -> str:
        """One line for a summary: `tokens 1234 (in 1200, cached 0, out 34); cost $0.0042`."""
        parts = [
            f"tokens {self.tokens} (in {self.input_tokens}, cached {self.cached_input_tokens}, "
            f"out {self.output_tokens}, reasoning {self.reasoning_tokens})"
        ]
        if self.unreported_steps:
            parts.append(f"{self.unreported_steps} step(s) without usage")
        if self.failed_steps:
            failed = "reply" if self.failed_steps == 1 else "replies"
            estimated = f", {self.estimated_steps} as an estimate" * bool(self.estimated_steps)
            parts.append(f"{self.failed_steps} failed {failed} charged{estimated}")
        if self.unpriced_steps == 0:
            parts.append(f"cost ${self.known_cost_usd:.4f}")
        elif self.unpriced_steps < self.steps:
            parts.append(
                f"cost at least ${self.known_cost_usd:.4f} ({self.unpriced_steps} step(s) unpriced)"
            )
        else:
            parts.append("cost unknown (no price for this model)")
        return "; ".join(parts)


class _Recorded(Protocol):
    @property
    def usage(self) -> Usage: ...

    @property
    def cost_usd(self) -> float | None: ...

    @property
    def model(self) -> str: ...

    @property
    def replayed_from(self) -> str | None: ...


#: A `replay:PATH` model name, however the registry lets it be spelled (`replay/`, `REPLAY|`).
_REPLAY_MODEL: Final = re.compile(r"replay[/|:]", re.IGNORECASE)


def prepaid(entry: _Recorded) -> bool:
    """Whether a recorded step was replayed from an earlier recording that paid for it: a
    fork's or a continued task's prefix (`replayed_from` set). A run whose model is itself a
    `replay:` recording is not prepaid: its replies stand in for a model's, and count."""
    return entry.replayed_from is not None and not _REPLAY_MODEL.match(entry.model.strip())


def recorded_totals(entries: Iterable[_Recorded]) -> UsageTotals:
    """The totals of a recorded trajectory's steps (`TrajectoryEntry`s: their usage and
    `cost_usd`), leaving out the `prepaid` ones, as `PromptAgent.usage_totals` does."""
    totals = UsageTotals()
    for entry in entries:
        if not prepaid(entry):
            totals = totals.add(entry.usage, entry.cost_usd)
    return totals
