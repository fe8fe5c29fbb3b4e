"""The pre-flight budget over the five-observation fixture episode, under each server profile.

Every request fits its profile (none is sent over a limit); the figures per
step (bytes and estimated tokens before and after) are printed; the cost of
the budget is measured as a ratio to `prepare_step` over the same episode.
"""

from __future__ import annotations

import pytest

from osharm_core import AgentConfig, AgentState, Observation
from osharm_core.budget import default_size_of, fit_step, measure
from osharm_core.limits import server_limits
from osharm_core.step import complete_step, prepare_step
from tests.benchmarks.timing import REPEATS, SLACK, paired_ratio, report
from tests.conftest import BUDGET_EPISODE, OBSERVATIONS

EPISODE = BUDGET_EPISODE
REPLY = "```python\npyautogui.click(10, 20)\n```"
#: The issue's target. The budget costs one size check on a step that fits;
#: a cut step counts only texts no earlier step or trim has counted (see
#: `ObservationRecord.text_tokens`).
TARGETS = {"nginx": 1.1, "vllm-default": 1.1}


def _observations() -> list[Observation]:
    return [
        Observation(
            screenshot=(OBSERVATIONS / f"{n}.png").read_bytes(),
            accessibility_tree=(OBSERVATIONS / f"{n}.xml").read_text(encoding="utf-8"),
        )
        for n in EPISODE
    ]


@pytest.mark.parametrize("profile", sorted(TARGETS))
def test_the_episode_fits_each_profile_at_a_small_cost(profile: str) -> None:
    """Zero requests over the profile's limits; the budget's cost as a ratio to prepare_step.

    Both timed episodes run from a fresh state and include `complete_step`, so
    no count cached by an earlier run is reused.
    """
    config = AgentConfig(action_space="pyautogui", server_profile=profile)
    limits = server_limits(profile)
    assert limits is not None
    observations = _observations()
    states = [AgentState()]
    print(f"\n{profile}: step, bytes before -> after, images, est. tokens before -> after")
    for number, observation in enumerate(observations, start=1):
        state = states[-1]
        request = prepare_step(config, state, "task", observation)
        fitted = fit_step(config, state, request, limits)
        before = measure(request.messages, config.model)
        after = measure(fitted.messages, config.model)
        assert (
            limits.exceeded(
                bytes_=default_size_of(config.model)(fitted.messages),
                images=after.images,
                input_tokens=after.input_tokens,
            )
            is None
        )
        if fitted.observation.degradation is not None:
            # The record's figures are the ones measured afresh, cached counts or not.
            assert fitted.observation.degradation.before == before
            assert fitted.observation.degradation.after == after
        print(
            f"  {number}: {before.bytes} -> {after.bytes} B, {before.images} -> {after.images} "
            f"images, {before.input_tokens} -> {after.input_tokens} tokens"
        )
        states.append(complete_step(config, state, fitted, REPLY)[0])

    reference = AgentConfig(action_space="pyautogui")

    def prepare() -> None:
        """The episode as the reference runs it: no profile, nothing measured."""
        state = AgentState()
        for observation in observations:
            request = prepare_step(reference, state, "task", observation)
            state = complete_step(reference, state, request, REPLY)[0]

    def prepare_and_fit() -> None:
        """The same episode from a fresh state under the profile: every count is done anew."""
        state = AgentState()
        for observation in observations:
            request = fit_step(
                config, state, prepare_step(config, state, "task", observation), limits
            )
            state = complete_step(config, state, request, REPLY)[0]

    prepare_and_fit()
    # The episode is short (about 0.1 s) and the overhead a few ms: more turns than
    # the default, and the median of back-to-back pairs, keep one busy moment on the
    # shared machine from deciding the ratio.
    ratio, work, floor = paired_ratio(prepare_and_fit, prepare, repeats=3 * REPEATS)
    ratio = report(
        f"episode prepare_step + fit_step ({profile}) vs prepare_step, median of pairs",
        work,
        floor,
        TARGETS[profile],
        ratio,
    )
    assert ratio <= TARGETS[profile] * SLACK
