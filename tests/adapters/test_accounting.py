"""The price table, its matching rules, cost arithmetic, usage totals and budget caps as values."""

from __future__ import annotations

import asyncio
import json
import math
import pickle
import re
import threading
from functools import reduce
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapters import Budget, BudgetExceeded, PriceTable, UsageTotals, load_prices, step_cost
from adapters.accounting import (
    ModelPrice,
    Reservation,
    default_prices,
    normalise_model_name,
    price_usage,
    recorded_totals,
    step_tokens,
)
from adapters.accounting.prices import FIRST_PARTY_SCHEMES
from adapters.contract import MAX_TOKEN_COUNT, Usage
from adapters.trajectories.jsonl import TrajectoryEntry
from osharm_core.errors import ConfigError
from tests.strategies import (
    hostile_usages,
    model_words,
    prices_per_million,
    scheme_separators,
    shared_runs,
    usages,
)

PRICE = ModelPrice(model="m", input=3.0, cached_input=0.3, output=15.0)


# --- the shipped table --------------------------------------------------------------


def test_the_shipped_table_is_versioned_dated_and_sourced() -> None:
    """Every entry has a read date and a vendor URL; the table has a version; names are unique."""
    table = default_prices()
    assert table.version == "2026-11-23"
    assert table.entries
    for entry in table.entries:
        assert entry.read == "2026-11-23"
        assert entry.source.startswith(
            ("https://docs.anthropic.com/", "https://platform.claude.com/")
        )
        assert entry.output >= entry.input > 0
        assert entry.cached_input is None or entry.cached_input < entry.input


def test_the_shipped_table_is_package_data() -> None:
    """prices.json is listed in pyproject's package-data, so an install carries it."""
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text(encoding="utf-8")
    assert '"adapters.accounting" = ["prices.json"]' in pyproject


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("anthropic/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("Claude-Sonnet-4-5", "claude-sonnet-4-5"),
        ("claude-opus-4-0", "claude-opus-4"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("claude-opus-4-1-20250805", "claude-opus-4-1"),
        ("claude-3-7-sonnet-latest", "claude-3-7-sonnet"),
        ("claude-3-5-sonnet-2024-10-22", "claude-3-5-sonnet"),
        ("claude-sonnet-5", "claude-sonnet-5"),
    ],
)
def test_names_that_match(name: str, expected: str) -> None:
    """Exact names, aliases, dated snapshots and first-party scheme prefixes match."""
    found = default_prices().lookup(name)
    assert found is not None
    assert found.model == expected


@pytest.mark.parametrize(
    "name",
    [
        "claude-sonnet-5-5",  # a newer model is never priced as an older one
        "claude-sonnet-4-5-preview",
        "claude-sonnet-4-5x",
        "claude-sonnet",
        "together/claude-sonnet-4-5",  # a third party's price is not the vendor's
        "openrouter/anthropic/claude-sonnet-4-5",
        "azure/claude-sonnet-4-5",
        "replay:/tmp/run",
        "gpt-4o",  # no vendor page was available when the table was read
        "",
        "   ",
    ],
)
def test_names_that_do_not_match(name: str) -> None:
    assert default_prices().lookup(name) is None


def test_normalise_model_name() -> None:
    assert normalise_model_name(" anthropic/CLAUDE-3-haiku ") == "claude-3-haiku"
    assert normalise_model_name("gemini/models/gemini-2.5-pro") == "gemini-2.5-pro"
    assert normalise_model_name("compat/x") is None
    assert normalise_model_name("openai-computer|GPT-5.4") == "gpt-5.4"
    assert normalise_model_name("models/gemini-2.5-pro") == "gemini-2.5-pro"
    assert normalise_model_name("compat:x") is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("anthropic-computer/claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("anthropic-computer:claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("Anthropic-Computer|Claude-Opus-4-0", "claude-opus-4"),
        ("anthropic:claude-sonnet-4-5", "claude-sonnet-4-5"),
        ("anthropic|claude-3-haiku", "claude-3-haiku"),
        ("gemini:models/claude-sonnet-4-5", "claude-sonnet-4-5"),
    ],
)
def test_native_computer_use_schemes_and_every_separator_price_as_the_vendor(
    name: str, expected: str
) -> None:
    """The computer-use schemes are the vendor's API and model; `:` and `|` work as `/` does."""
    found = default_prices().lookup(name)
    assert found is not None
    assert found.model == expected


@pytest.mark.parametrize(
    "name",
    [
        "compat:claude-sonnet-4-5",
        "together|claude-sonnet-4-5",
        "anthropic-computer/compat/claude-sonnet-4-5",
        "openai-computer/computer-use-preview",  # no OpenAI price was available to read
        "claude-sonnet-4-5:extra",
        "anthropic/",
    ],
)
def test_other_prefixed_names_stay_unpriced_in_the_shipped_table(name: str) -> None:
    assert default_prices().lookup(name) is None


@given(st.sampled_from(default_prices().entries), st.data())
def test_a_first_party_scheme_never_changes_the_price(
    entry: ModelPrice, data: st.DataObject
) -> None:
    """Any first-party scheme, with any separator, in any case, prices a name as the bare name."""
    name = data.draw(st.sampled_from(entry.names))
    scheme = data.draw(st.sampled_from(FIRST_PARTY_SCHEMES))
    separator = data.draw(scheme_separators)
    prefixed = f"{scheme}{separator}{name}"
    if data.draw(st.booleans()):
        prefixed = f" {prefixed.upper()} "
    assert default_prices().lookup(prefixed) == default_prices().lookup(name) == entry


@given(model_words, model_words, scheme_separators, scheme_separators)
def test_a_user_entry_matches_its_exact_name_whatever_the_scheme(
    scheme: str, model: str, written: str, asked: str
) -> None:
    """An entry for `scheme/model` (any separator) prices that name with any separator."""
    table = load_prices({"models": [_entry(f"{scheme}{written}{model}", input=7.0)]})
    found = table.lookup(f"{scheme}{asked}{model}")
    assert found is not None
    assert found.input == 7.0


def test_exact_user_entries_for_prefixed_names() -> None:
    """The names the registry takes (README's own example among them) can be priced by a user."""
    table = load_prices(
        {
            "models": [
                _entry("anthropic-computer/claude-sonnet-4-6", input=9.0),
                _entry("compat/llama3", input=0.5),
                _entry("replay:/tmp/Run"),
            ]
        }
    )
    computer = table.lookup("anthropic-computer:claude-sonnet-4-6")
    assert computer is not None
    assert computer.input == 9.0
    assert table.lookup("compat|LLAMA3") is not None
    assert table.lookup("replay:/tmp/run") is not None
    assert table.lookup("together/llama3") is None
    usage = Usage(input_tokens=1_000_000, output_tokens=0)
    assert step_cost(usage, "compat:llama3", table) == pytest.approx(0.5)


def test_one_name_in_two_separators_is_listed_twice() -> None:
    with pytest.raises(ConfigError, match="listed twice"):
        PriceTable.from_json({"models": [_entry("compat/x"), _entry("compat:x")]})


# --- user prices ------------------------------------------------------------------


def _entry(model: str, **changes: Any) -> dict[str, Any]:
    entry = {
        "model": model,
        "input": 2.5,
        "cached_input": 1.25,
        "output": 10.0,
        "read": "2026-11-01",
        "source": "https://example.org/prices",
    }
    entry.update(changes)
    return entry


def test_overrides_from_a_mapping_add_and_replace() -> None:
    """A user entry adds a model, and replaces a shipped one of the same name."""
    table = load_prices(
        {
            "version": "mine",
            "models": [
                _entry("gpt-4o"),
                _entry("claude-sonnet-4-5", input=1.0, cached_input=None),
            ],
        }
    )
    assert table.version == "2026-11-23+mine"
    gpt = table.lookup("openai/gpt-4o-2024-08-06")
    assert gpt is not None
    assert (gpt.input, gpt.cached_input, gpt.output) == (2.5, 1.25, 10.0)
    sonnet = table.lookup("claude-sonnet-4-5")
    assert sonnet is not None
    assert sonnet.input == 1.0
    assert table.lookup("claude-3-haiku") is not None


def _input_price(table: PriceTable, name: str) -> float | None:
    found = table.lookup(name)
    return None if found is None else found.input


def test_overriding_an_alias_keeps_the_entry_s_other_names() -> None:
    """claude-sonnet-4-0 is an alias of claude-sonnet-4: overriding it leaves the model its price."""
    table = load_prices({"models": [_entry("claude-sonnet-4-0", input=2.0)]})
    assert _input_price(table, "claude-sonnet-4-0") == 2.0
    assert _input_price(table, "claude-sonnet-4") == 3.0
    assert _input_price(table, "claude-sonnet-4-20250514") == 3.0
    assert _input_price(table, "anthropic:claude-sonnet-4") == 3.0


def test_overriding_the_main_name_keeps_the_aliases_and_gives_it_the_snapshots() -> None:
    table = load_prices({"models": [_entry("claude-sonnet-4", input=2.0)]})
    assert _input_price(table, "claude-sonnet-4") == 2.0
    assert _input_price(table, "claude-sonnet-4-20250514") == 2.0
    assert _input_price(table, "claude-sonnet-4-0") == 3.0


def test_overriding_every_name_of_an_entry_replaces_it() -> None:
    table = load_prices({"models": [_entry("claude-sonnet-4", aliases=["claude-sonnet-4-0"])]})
    assert [e for e in table.entries if "claude-sonnet-4" in e.names] == [
        table.lookup("claude-sonnet-4-0")
    ]
    assert len(table.entries) == len(default_prices().entries)


@given(st.sampled_from(default_prices().entries), st.data())
def test_an_override_changes_only_the_names_it_lists(
    entry: ModelPrice, data: st.DataObject
) -> None:
    """Every shipped name the override does not list keeps its shipped price."""
    listed = data.draw(st.lists(st.sampled_from(entry.names), min_size=1, unique=True))
    table = load_prices({"models": [_entry(listed[0], aliases=listed[1:], input=0.125)]})
    for shipped in default_prices().entries:
        for name in shipped.names:
            expected = 0.125 if name in listed else shipped.input
            assert _input_price(table, name) == expected, name


def test_overrides_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "prices.json"
    path.write_text(
        json.dumps({"version": "file", "models": [_entry("my-model")]}), encoding="utf-8"
    )
    assert load_prices(path).lookup("my-model") is not None
    assert load_prices(PriceTable.from_file(path)).lookup("my-model") is not None


@pytest.mark.parametrize(
    ("table", "words"),
    [
        ([], "'models' list"),
        ({"models": "x"}, "'models' list"),
        ({"models": [1]}, "models[0] must be an object"),
        ({"models": [_entry("a", input=-1)]}, "input must be a finite number of USD"),
        ({"models": [{k: v for k, v in _entry("a").items() if k != "input"}]}, "'input'"),
        ({"models": [_entry("a", aliases=["b", " "])]}, "aliases must be a list of non-empty"),
        ({"version": " ", "models": []}, "version must be a non-empty string"),
        ({"models": [_entry("a", input=float("nan"))]}, "finite number"),
        ({"models": [_entry("a", output=True)]}, "finite number"),
        ({"models": [_entry("a", output="3")]}, "finite number"),
        ({"models": [_entry("a", output=10**400)]}, "finite number"),
        ({"models": [_entry("a", read="yesterday")]}, "YYYY-MM-DD"),
        ({"models": [_entry("a", source="file:///etc/passwd")]}, "http(s) URL"),
        ({"models": [_entry("a", colour="red")]}, "unknown keys: colour"),
        ({"models": [_entry("a", aliases="b")]}, "aliases must be a list"),
        ({"models": [_entry("a"), _entry("a")]}, "listed twice"),
        ({"models": [_entry("a", aliases=["b"]), _entry("b")]}, "listed twice"),
        ({"models": [_entry("")]}, "model must be a non-empty string"),
    ],
)
def test_bad_price_tables_are_clear_errors(table: object, words: str) -> None:
    """A malformed table or entry is a ConfigError naming the file, the entry and the field."""
    with pytest.raises(ConfigError, match=None) as caught:
        PriceTable.from_json(table, "prices.json")
    assert words in str(caught.value)
    assert "prices.json" in str(caught.value)


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"input": -0.5}, "ModelPrice.input must be a finite number"),
        ({"output": float("inf")}, "ModelPrice.output must be a finite number"),
        ({"cached_input": True}, "ModelPrice.cached_input must be a finite number"),
        ({"model": "  "}, "ModelPrice.model must be a non-empty string"),
        ({"aliases": ("ok", 5)}, "ModelPrice.aliases must be a list of non-empty names"),
        ({"read": "last week"}, "ModelPrice.read must be a YYYY-MM-DD date"),
        ({"source": "ftp://x"}, "ModelPrice.source must be an http(s) URL"),
    ],
)
def test_a_price_built_in_code_is_checked_as_a_table_entry_is(
    fields: dict[str, Any], words: str
) -> None:
    """ModelPrice(...) refuses what a table entry may not hold, naming the field."""
    with pytest.raises(ConfigError, match=re.escape(words)):
        ModelPrice(**{"model": "m", "input": 1.0, "output": 2.0, **fields})


def test_a_price_built_in_code_compares_its_names_in_lower_case() -> None:
    """Names are stripped and lower-cased as a table's are, so a mixed-case name is found."""
    price = ModelPrice(model=" My-Model ", input=1.0, output=2.0, aliases=["Other"])
    assert price.names == ("my-model", "other")
    assert PriceTable(version="v", entries=[price]).lookup("MY-MODEL") is price


def test_an_unreadable_price_file_is_a_config_error(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    for path in (tmp_path / "bad.json", tmp_path / "missing.json"):
        with pytest.raises(ConfigError, match="cannot read price table"):
            load_prices(path)


# --- cost arithmetic ----------------------------------------------------------------


def test_cost_of_a_step() -> None:
    """Uncached input at the input rate, cached at the cached rate, output (reasoning inside) at output."""
    usage = Usage(input_tokens=10_000, cached_input_tokens=4_000, output_tokens=500)
    assert price_usage(usage, PRICE) == pytest.approx((6000 * 3 + 4000 * 0.3 + 500 * 15) / 1e6)
    with_reasoning = attrs.evolve(usage, reasoning_tokens=400)
    assert price_usage(with_reasoning, PRICE) == price_usage(usage, PRICE)


@pytest.mark.parametrize(
    "usage",
    [
        Usage(),
        Usage(input_tokens=10),
        Usage(output_tokens=10),
        Usage(input_tokens=-1, output_tokens=10),
        Usage(total_tokens=99),
    ],
)
def test_cost_is_unknown_without_input_and_output_counts(usage: Usage) -> None:
    assert price_usage(usage, PRICE) is None


def test_cached_tokens_need_a_cached_rate() -> None:
    """No cached rate: a step with cached tokens has no known cost; one without has."""
    no_cache = attrs.evolve(PRICE, cached_input=None)
    assert (
        price_usage(Usage(input_tokens=10, output_tokens=1, cached_input_tokens=5), no_cache)
        is None
    )
    assert price_usage(
        Usage(input_tokens=10, output_tokens=1, cached_input_tokens=0), no_cache
    ) == (pytest.approx(45e-6))


def test_step_cost_uses_the_shipped_table_or_the_one_given() -> None:
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    assert step_cost(usage, "claude-3-haiku-20240307") == pytest.approx(1.5)
    assert step_cost(usage, "gpt-4o") is None
    mine = load_prices({"models": [_entry("gpt-4o")]})
    assert step_cost(usage, "gpt-4o", mine) == pytest.approx(12.5)


@given(usages(), prices_per_million, prices_per_million, prices_per_million)
def test_cost_is_finite_non_negative_and_monotone_in_tokens(
    usage: Usage, input_rate: float, cached_rate: float, output_rate: float
) -> None:
    """More input or more output tokens never cost less, whatever the counts and rates."""
    price = ModelPrice(
        model="m", input=input_rate, cached_input=min(cached_rate, input_rate), output=output_rate
    )
    cost = price_usage(usage, price)
    if cost is None:
        return
    assert math.isfinite(cost)
    assert cost >= 0
    assert usage.input_tokens is not None
    assert usage.output_tokens is not None
    more_in = attrs.evolve(usage, input_tokens=usage.input_tokens + 1000)
    more_out = attrs.evolve(usage, output_tokens=usage.output_tokens + 1000)
    assert price_usage(more_in, price) >= cost  # type: ignore[operator]
    assert price_usage(more_out, price) >= cost  # type: ignore[operator]


@given(
    hostile_usages(),
    st.floats(0, 1e308),
    st.floats(0, 1e308) | st.none(),
    st.floats(0, 1e308),
)
def test_any_counts_and_rates_cost_a_finite_amount_or_nothing(
    usage: Usage, input_rate: float, cached_rate: float | None, output_rate: float
) -> None:
    """A 400-digit count (JSON allows it) or a huge rate never raises OverflowError nor costs inf:
    a count outside 0 to MAX_TOKEN_COUNT is unreported, an unbounded cost unknown."""
    price = ModelPrice(model="m", input=input_rate, cached_input=cached_rate, output=output_rate)
    cost = price_usage(usage, price)
    assert cost is None or (math.isfinite(cost) and cost >= 0)
    if not all(
        c is not None and 0 <= c < MAX_TOKEN_COUNT
        for c in (usage.input_tokens, usage.output_tokens)
    ):
        assert cost is None
    totals = UsageTotals().add(usage, cost)
    assert 0 <= totals.tokens < 2 * MAX_TOKEN_COUNT
    assert math.isfinite(totals.known_cost_usd)


# --- totals -------------------------------------------------------------------------


@given(st.lists(st.tuples(usages(), st.none() | st.floats(0, 100)), max_size=12))
def test_totals_are_sums(steps: list[tuple[Usage, float | None]]) -> None:
    """Adding steps one by one gives the sums of their counts and known costs."""
    totals = reduce(lambda t, s: t.add(*s), steps, UsageTotals())

    def total(counts: list[int | None]) -> int:
        return sum(c for c in counts if c is not None and c >= 0)

    assert totals.steps == len(steps)
    assert totals.input_tokens == total([u.input_tokens for u, _ in steps])
    assert totals.output_tokens == total([u.output_tokens for u, _ in steps])
    assert totals.cached_input_tokens == total([u.cached_input_tokens for u, _ in steps])
    assert totals.reasoning_tokens == total([u.reasoning_tokens for u, _ in steps])
    assert totals.tokens == sum(step_tokens(u) or 0 for u, _ in steps)
    assert totals.known_cost_usd == pytest.approx(sum(c for _, c in steps if c is not None))
    assert totals.unpriced_steps == sum(c is None for _, c in steps)
    assert (totals.cost_usd is None) == any(c is None for _, c in steps)


@given(
    st.lists(st.tuples(usages(), st.none() | st.floats(0, 100)), max_size=6),
    st.lists(st.tuples(usages(), st.none() | st.floats(0, 100)), max_size=6),
)
def test_totals_of_episodes_add_up_to_the_run(
    first: list[tuple[Usage, float | None]], second: list[tuple[Usage, float | None]]
) -> None:
    """Two episodes' totals added are the totals of all their steps (what a run summary shows)."""
    a = reduce(lambda t, s: t.add(*s), first, UsageTotals())
    b = reduce(lambda t, s: t.add(*s), second, UsageTotals())
    both = reduce(lambda t, s: t.add(*s), first + second, UsageTotals())
    summed = a + b
    assert attrs.evolve(summed, known_cost_usd=0.0) == attrs.evolve(both, known_cost_usd=0.0)
    assert summed.known_cost_usd == pytest.approx(both.known_cost_usd)
    assert UsageTotals() + a == a


def test_step_tokens() -> None:
    assert step_tokens(Usage(input_tokens=5, output_tokens=2, total_tokens=100)) == 7
    assert step_tokens(Usage(input_tokens=5, total_tokens=9)) == 9
    assert step_tokens(Usage(total_tokens=-3)) is None


def test_failed_and_estimated_replies_are_counted_apart() -> None:
    """A reply that gave no step counts among the steps, and says so; an estimated one adds
    tokens and cost, not per-kind counts."""
    read = UsageTotals().add(Usage(input_tokens=100, output_tokens=20), 0.5, failed=True)
    both = read.add_estimate(300, 0.25)
    assert (both.steps, both.failed_steps, both.estimated_steps) == (2, 2, 1)
    assert (both.tokens, both.input_tokens, both.output_tokens) == (420, 100, 20)
    assert both.cost_usd == pytest.approx(0.75)
    assert "2 failed replies charged, 1 as an estimate" in both.describe()
    assert (both + both).failed_steps == 4
    assert UsageTotals().add_estimate(300, None).cost_usd is None


def test_describe() -> None:
    one = UsageTotals().add(Usage(input_tokens=100, output_tokens=20, cached_input_tokens=50), 0.5)
    assert one.describe() == ("tokens 120 (in 100, cached 50, out 20, reasoning 0); cost $0.5000")
    partly = one.add(Usage(), None)
    assert "1 step(s) without usage" in partly.describe()
    assert "cost at least $0.5000 (1 step(s) unpriced)" in partly.describe()
    assert "cost unknown" in UsageTotals().add(Usage(), None).describe()


# --- caps ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("caps", "words"),
    [
        ({"max_episode_tokens": 0}, "max_episode_tokens must be > 0"),
        ({"max_episode_tokens": 1.5}, "must be an integer"),
        ({"max_run_tokens": True}, "must be an integer"),
        ({"max_episode_cost": -1.0}, "max_episode_cost must be > 0"),
        ({"max_run_cost": float("inf")}, "must be a number"),
        ({"max_run_cost": "5"}, "must be a number"),
        # Python's ints have no bound (argparse and JSON take hundreds of digits); a float
        # cannot hold this one, and the check must say so rather than overflow.
        ({"max_run_tokens": 10**400}, "got 10000000000000000000...(401 characters)"),
        ({"max_run_cost": 10**400}, "that a float can hold"),
    ],
)
def test_bad_caps_are_config_errors(caps: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Budget(**caps)
    assert words in str(caught.value)


@pytest.mark.parametrize("prices", ["my_prices.json", Path("prices.json"), {"entries": []}, 5])
def test_prices_that_are_not_a_table_are_refused_when_the_budget_is_built(prices: object) -> None:
    """Budget(prices="my_prices.json") was taken, and the first predict paid for a model call
    before failing with a raw AttributeError; now a ConfigError pointing at load_prices."""
    with pytest.raises(ConfigError, match=r"prices must be a PriceTable or None \(read a file"):
        Budget(max_episode_cost=1.0, prices=prices)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="prices must be a PriceTable"):
        step_cost(Usage(input_tokens=1, output_tokens=1), "gpt-4o", prices)  # type: ignore[arg-type]


def _step(tokens: int, cost: float | None) -> UsageTotals:
    return UsageTotals().add(Usage(input_tokens=tokens, output_tokens=0), cost)


def test_episode_caps() -> None:
    budget = Budget(max_episode_tokens=100, max_episode_cost=1.0)
    assert budget.exceeded(_step(99, 0.5)) is None
    reached = budget.exceeded(_step(100, 0.5))
    assert isinstance(reached, BudgetExceeded)
    assert (reached.scope, reached.tokens) == ("episode", 100)
    assert "100 tokens used, cap 100" in str(reached)
    by_cost = budget.exceeded(_step(10, 1.0))
    assert by_cost is not None
    assert "$1.0000 spent, cap $1" in by_cost.reason
    unpriced = budget.exceeded(_step(10, None))
    assert unpriced is not None
    assert "cannot be kept" in unpriced.reason


def test_a_token_cap_is_reached_by_a_step_without_usage() -> None:
    """A step whose provider reported no usage adds 0 tokens, so a token cap cannot be kept
    past it: it reaches the cap (episode and run), as an unpriced step reaches a dollar cap.
    Without a token cap such steps stop nothing."""
    unreported = UsageTotals().add(Usage(), None)
    episode = Budget(max_episode_tokens=1_000).exceeded(unreported)
    assert episode is not None
    assert episode.reason == (
        "usage not reported for a step, so the episode token cap 1000 cannot be kept"
    )
    run = Budget(max_run_tokens=1_000)
    run.charge(_step(10, None))
    assert run.run_exceeded() is None
    run.charge(unreported)
    assert run.run_exceeded() == (
        "usage not reported for a step, so the run token cap 1000 cannot be kept"
    )
    assert (
        Budget(max_episode_cost=1.0, prices=PriceTable(version="x", entries=())).exceeded(
            unreported
        )
        is not None
    )
    assert Budget(max_run_cost=5.0).exceeded(_step(10, 0.1).add(Usage(), 0.0)) is None


@given(st.lists(usages(), min_size=1, max_size=12), st.integers(1, 5_000_000))
def test_a_token_cap_is_passed_by_at_most_one_step(steps: list[Usage], cap: int) -> None:
    """One agent under a token cap: every step but the last it sent was reported and left
    the total under the cap, so the cap is passed by the last step alone, whatever the steps
    (unreported ones included)."""
    budget = Budget(max_run_tokens=cap, max_episode_tokens=cap)
    episode = UsageTotals()
    sent: list[Usage] = []
    for usage in steps:
        try:
            held = budget.reserve(episode)
        except BudgetExceeded:
            break
        step = UsageTotals().add(usage, None)
        held.settle(step)
        episode = episode + step
        sent.append(usage)
    before_last = reduce(lambda t, u: t.add(u, None), sent[:-1], UsageTotals())
    assert before_last.unreported_steps == 0
    assert before_last.tokens < cap
    if len(sent) < len(steps):
        assert budget.run_exceeded() is not None


def test_a_budget_carries_over_what_another_was_charged() -> None:
    """`carry_over` counts another budget's totals and largest step: its reservations hold
    that step, and a cap counts what was spent before."""
    spent = UsageTotals(steps=6, tokens=84)
    budget = Budget(max_run_tokens=100)
    budget.carry_over(spent, (14, 0.5))
    assert (budget.run_totals, budget.largest_step) == (spent, (14, 0.5))
    held = budget.reserve(UsageTotals())
    assert (held.tokens, held.cost_usd, budget.in_flight) == (14, 0.5, 1)
    held.settle(_tokens(14))
    assert budget.run_exceeded() is None  # 98 of 100
    held = budget.reserve(UsageTotals())
    held.settle(_tokens(14))
    assert budget.run_exceeded() == "112 tokens used, cap 100"


def test_the_ray_budget_actor_starts_from_what_the_budget_was_charged() -> None:
    """The cluster's `BudgetActor` (its body, without Ray) seeded with 84 of 100 tokens spent
    in steps of 14: two requests fit before the cap, as on one process; a third waits and
    ends once they are charged (it used to start from 0 and let about 8 more go)."""
    from adapters.runs.ray_runner import BudgetActor

    async def run() -> tuple[object, ...]:
        actor = BudgetActor(100, None, UsageTotals(steps=6, tokens=84), (14, 0.0))
        first = await actor.reserve("a")
        second = await actor.reserve("b")
        third = asyncio.ensure_future(actor.reserve("c"))
        for _ in range(3):
            await asyncio.sleep(0)
        waited = not third.done()
        for place in (first, second):
            assert isinstance(place[0], int)
            actor.settle(place[0], _tokens(14))
        return first, second, waited, await third, actor.run_exceeded()

    first, second, waited, third, reached = asyncio.run(run())
    assert (first, second, waited) == ((1, 14, 0.0), (2, 14, 0.0), True)
    assert third == ("112 tokens used, cap 100", 112, None)
    assert reached == "112 tokens used, cap 100"


def test_run_caps_come_first_and_count_every_episode() -> None:
    budget = Budget(max_run_tokens=150, max_episode_tokens=1000)
    budget.charge(_step(100, None))
    assert budget.run_exceeded() is None
    budget.charge(_step(60, None))
    assert budget.run_totals.tokens == 160
    assert budget.run_exceeded() == "160 tokens used, cap 150"
    with pytest.raises(BudgetExceeded) as caught:
        budget.check(UsageTotals())
    assert caught.value.scope == "run"


def test_no_caps_never_stop() -> None:
    budget = Budget()
    budget.charge(_step(10**9, None))
    budget.check(_step(10**9, None))
    assert not budget.caps_cost


def test_budget_exceeded_pickles() -> None:
    error = BudgetExceeded("100 tokens used, cap 100", scope="episode", tokens=100, cost_usd=0.1)
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.reason, copy.scope, copy.tokens, copy.cost_usd) == (
        error.reason,
        "episode",
        100,
        0.1,
    )
    assert str(copy) == str(error) == "episode budget exceeded: 100 tokens used, cap 100"


# --- requests in flight against a shared run cap -------------------------------------


def _tokens(tokens: int) -> UsageTotals:
    return _step(tokens, None)


async def _pending(budget: Budget) -> asyncio.Task[Reservation]:
    """An `areserve` started and run until it either holds a place or waits for one."""
    task = asyncio.ensure_future(budget.areserve(UsageTotals()))
    for _ in range(3):
        await asyncio.sleep(0)
    return task


def test_without_a_run_cap_nothing_is_held_or_waited_for() -> None:
    budget = Budget(max_episode_tokens=10)
    held = [budget.reserve(UsageTotals()) for _ in range(5)]
    assert budget.in_flight == 0
    for reservation in held:
        reservation.settle(_tokens(3))
    assert budget.run_totals.tokens == 15


def test_the_run_s_first_request_goes_alone() -> None:
    """Nothing is known to estimate with before the first step: a second request waits for it."""

    async def run() -> None:
        budget = Budget(max_run_tokens=1000)
        first = await budget.areserve(UsageTotals())
        second = await _pending(budget)
        assert not second.done()
        first.settle(_tokens(10))
        assert (await second).tokens == 10
        assert budget.in_flight == 1

    asyncio.run(run())


def test_requests_in_flight_hold_the_largest_step_against_the_cap() -> None:
    """Cap 100, steps of 30: 30 charged + 3 x 30 in flight reach it, so a fifth request waits."""

    async def run() -> None:
        budget = Budget(max_run_tokens=100)
        (await budget.areserve(UsageTotals())).settle(_tokens(30))
        held = [await budget.areserve(UsageTotals()) for _ in range(3)]
        assert [r.tokens for r in held] == [30, 30, 30]
        waiting = await _pending(budget)
        assert not waiting.done()
        held[0].release()  # a failed call gives its place back
        place = await waiting
        held[1].settle(_tokens(30))
        held[2].settle(_tokens(30))
        place.settle(_tokens(30))
        assert budget.run_totals.tokens == 120
        assert budget.in_flight == 0
        with pytest.raises(BudgetExceeded, match="120 tokens used, cap 100"):
            await budget.areserve(UsageTotals())

    asyncio.run(run())


def test_a_waiting_request_ends_when_the_steps_in_flight_reach_the_cap() -> None:
    async def run() -> None:
        budget = Budget(max_run_tokens=50)
        (await budget.areserve(UsageTotals())).settle(_tokens(20))
        first = await budget.areserve(UsageTotals())
        second = await budget.areserve(UsageTotals())
        waiting = await _pending(budget)
        first.settle(_tokens(20))
        assert not waiting.done()
        second.settle(_tokens(20))
        with pytest.raises(BudgetExceeded) as caught:
            await waiting
        assert (caught.value.scope, caught.value.tokens) == ("run", 60)

    asyncio.run(run())


def test_a_dollar_cap_holds_the_largest_cost_in_flight() -> None:
    async def run() -> None:
        budget = Budget(max_run_cost=1.0)
        (await budget.areserve(UsageTotals())).settle(_step(10, 0.4))
        held = [await budget.areserve(UsageTotals()) for _ in range(2)]
        assert [r.cost_usd for r in held] == [pytest.approx(0.4)] * 2
        waiting = await _pending(budget)  # $0.40 spent + $0.80 in flight
        assert not waiting.done()
        held[0].settle(_step(10, 0.1))
        (await waiting).release()
        held[1].release()
        assert budget.run_totals.known_cost_usd == pytest.approx(0.5)

    asyncio.run(run())


def test_settle_and_release_count_once() -> None:
    budget = Budget(max_run_tokens=100)
    first = budget.reserve(UsageTotals())
    first.settle(_tokens(10))
    first.release()
    second = budget.reserve(UsageTotals())
    second.release()
    second.release()
    assert (budget.in_flight, budget.run_totals.tokens) == (0, 10)


def test_a_cancelled_wait_leaves_nothing_behind() -> None:
    async def run() -> None:
        budget = Budget(max_run_tokens=100)
        first = await budget.areserve(UsageTotals())
        waiting = await _pending(budget)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert budget.in_flight == 1
        first.release()
        assert budget.in_flight == 0
        (await budget.areserve(UsageTotals())).release()

    asyncio.run(run())


def test_a_waiting_thread_goes_once_the_request_in_flight_is_answered() -> None:
    budget = Budget(max_run_tokens=100)
    first = budget.reserve(UsageTotals())
    got: list[Reservation] = []
    thread = threading.Thread(target=lambda: got.append(budget.reserve(UsageTotals())))
    thread.start()
    first.settle(_tokens(25))
    thread.join(timeout=30)
    assert not thread.is_alive()
    assert got[0].tokens == 25
    got[0].release()


def test_on_an_event_loop_thread_reserve_checks_without_waiting() -> None:
    """A blocking wait there could stall the very requests it waits for."""

    async def run() -> Reservation:
        return budget.reserve(UsageTotals())

    budget = Budget(max_run_tokens=100)
    first = budget.reserve(UsageTotals())
    second = asyncio.run(run())
    assert budget.in_flight == 2
    first.release()
    second.release()


@given(shared_runs)
def test_concurrent_agents_send_what_one_agent_would(run: tuple[int, int, int]) -> None:
    """Steps of one size: any number of agents sharing a run cap stop after as many steps
    (and tokens) as a single agent would."""
    workers, size, cap = run
    budget = Budget(max_run_tokens=cap)

    async def agent() -> None:
        while True:
            try:
                held = await budget.areserve(UsageTotals())
            except BudgetExceeded:
                return
            await asyncio.sleep(0)
            held.settle(_tokens(size))

    async def all_of_them() -> None:
        await asyncio.gather(*(agent() for _ in range(workers)))

    asyncio.run(all_of_them())
    assert budget.run_totals.steps == -(-cap // size)
    assert budget.in_flight == 0


@pytest.mark.parametrize(
    ("model", "counted"),
    [
        ("gpt-4o", False),  # a fork's (or continued task's) replayed prefix: prepaid
        ("claude-sonnet-4-5", False),
        ("replay:runs/demo", True),  # a replay model stands in for a model: its usage counts
        ("REPLAY|runs/demo", True),
        (" replay/runs/demo", True),
        ("replayer-9", False),
    ],
)
def test_recorded_totals_leave_out_a_replayed_prefix(model: str, counted: bool) -> None:
    """A fork's replayed line was counted as a step of unknown cost, so the recorded run's cost
    was unknown though every live step was priced."""
    live = TrajectoryEntry(
        step=2, response="DONE", model=model, usage=Usage(input_tokens=10, output_tokens=2),
        cost_usd=0.01,
    )  # fmt: skip
    replayed = TrajectoryEntry(step=1, response="x", model=model, replayed_from="rec#1")
    totals = recorded_totals([replayed, live])
    assert totals.steps == (2 if counted else 1)
    assert totals.cost_usd == (None if counted else 0.01)
