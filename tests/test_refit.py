"""`refit_step`: a recorded `Degradation` applied again gives the very request `fit_step` sent."""

from __future__ import annotations

import attrs
import pytest

from osharm_core import AgentConfig, AgentState, ObservationRecord, ServerLimits, StateError
from osharm_core.budget import fit_step, refit_step
from osharm_core.limits import Degradation, RequestSize
from osharm_core.scaling import resolve_preset
from osharm_core.step import StepRequest, complete_step, prepare_step, step_messages
from tests.conftest import BUDGET_EPISODE, fixture_observation

REPLY = "```python\npyautogui.click(10, 20)\n```"


@pytest.mark.parametrize(
    ("config", "limits"),
    [
        (
            AgentConfig(observation_type="screenshot_a11y_tree", action_space="pyautogui"),
            ServerLimits(max_images=2, max_bytes=700_000),
        ),
        (
            AgentConfig(observation_type="a11y_tree", action_space="pyautogui"),
            ServerLimits(max_input_tokens=3000),
        ),
        (
            AgentConfig(
                observation_type="screenshot", action_space="pyautogui", scaling="qwen2.5-vl"
            ),
            ServerLimits(max_images=1, max_bytes=700_000),
        ),
        (
            AgentConfig(
                observation_type="screenshot_a11y_tree",
                action_space="pyautogui",
                scaling="ui-tars-1.5",
            ),
            ServerLimits(max_images=2, max_bytes=500_000),
        ),
        (
            AgentConfig(
                observation_type="som", action_space="pyautogui", scaling="max_pixels=1000000"
            ),
            ServerLimits(max_images=1, max_bytes=300_000),
        ),
    ],
    ids=["images-bytes", "tokens", "qwen2.5-vl", "ui-tars-1.5", "max-pixels-som"],
)
def test_refit_repeats_every_cut_fit_step_made(config: AgentConfig, limits: ServerLimits) -> None:
    """Over an episode, each step refitted from its record equals the step as fitted, history too.

    Under a preset whose server resizes to multiples of 28 px, every downscaled size is one
    that server keeps, so the frame describes the image the model answers about.
    (Set-of-marks and rebuilding from files: tests/facade/test_rebuild_sent.py, end to end.)
    """
    preset = resolve_preset(config.scaling, config.model)
    state = AgentState()
    cut = downscaled = 0
    for name in BUDGET_EPISODE[:3]:
        request = prepare_step(config, state, "task", fixture_observation(name))
        fitted = fit_step(config, state, request, limits)
        degradation = fitted.observation.degradation
        if degradation is not None:
            cut += 1
            again = refit_step(config, state, request, degradation)
            assert again.messages == fitted.messages
            assert again.observation == fitted.observation
            assert again.frame == fitted.frame
            size = degradation.screenshot_size
            if size is not None and preset.multiple is not None:
                downscaled += 1
                assert fitted.frame is not None
                assert (fitted.frame.image_width, fitted.frame.image_height) == size
                assert preset.target_size(*size) == size
        state, _ = complete_step(config, state, fitted, REPLY)
    assert cut  # the limits are tight enough to cut something
    assert downscaled or preset.multiple is None


def test_a_record_that_does_not_fit_the_request_is_refused() -> None:
    """A turn with no screenshot shown, or a size with no screenshot, is a `StateError`."""
    config = AgentConfig(observation_type="a11y_tree", action_space="pyautogui")
    request = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    size = RequestSize(bytes=1, images=0, input_tokens=1)
    record = Degradation(before=size, after=size, dropped_images=(1,))
    with pytest.raises(StateError, match="turn 1's screenshot"):
        refit_step(config, AgentState(), request, record)
    with pytest.raises(StateError, match="downscales the screenshot"):
        refit_step(
            config,
            AgentState(),
            request,
            attrs.evolve(record, dropped_images=(), screenshot_size=(10, 10)),
        )


def test_a_recorded_size_larger_than_the_screenshot_is_refused() -> None:
    """fit_step only ever shrinks: a record that would enlarge (and decode) a huge image is a
    `StateError` before anything is resampled."""
    config = AgentConfig(observation_type="screenshot", action_space="pyautogui")
    request = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    size = RequestSize(bytes=1, images=1, input_tokens=1)
    for bigger in ((1921, 1080), (1920, 1081), (1 << 20, 1 << 20)):
        record = Degradation(before=size, after=size, screenshot_size=bigger)
        with pytest.raises(StateError, match=f"to {bigger[0]} x {bigger[1]} pixels.*1920 x 1080"):
            refit_step(config, AgentState(), request, record)
    same = Degradation(before=size, after=size, screenshot_size=(1920, 1080))
    assert refit_step(config, AgentState(), request, same).frame is None


def _from_table(config: AgentConfig, request: StepRequest) -> StepRequest:
    """`request` as a recording without the raw tree rebuilds it: `step_messages` over the
    observation record it showed, no linearized table kept."""
    record = ObservationRecord(
        screenshot=request.observation.screenshot,
        accessibility_tree=request.observation.accessibility_tree,
        frame=request.observation.frame,
    )
    return StepRequest(
        messages=step_messages(config, AgentState(), "task", record), observation=record
    )


def test_a_downscaled_step_rebuilt_from_its_table_shows_the_tree_in_the_new_frame() -> None:
    """A step built from a kept linearized table (no raw tree) and downscaled shows its tree
    rows in the smaller image's pixels, as the step prepared from the raw tree does: they once
    stayed in screen pixels beside a 960x540 screenshot and a prompt saying so."""
    config = AgentConfig(observation_type="screenshot_a11y_tree", action_space="pyautogui")
    live = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    rebuilt = _from_table(config, live)
    assert rebuilt.messages == live.messages
    size = RequestSize(bytes=1, images=1, input_tokens=1)
    record = Degradation(before=size, after=size, screenshot_size=(960, 540))
    expected = refit_step(config, AgentState(), live, record)
    again = refit_step(config, AgentState(), rebuilt, record)
    assert expected.observation.accessibility_tree != live.observation.accessibility_tree
    assert again.observation == expected.observation
    assert again.messages == expected.messages
    limits = ServerLimits(max_bytes=40_000)
    fitted = fit_step(config, AgentState(), live, limits)
    assert fitted.observation.degradation is not None
    assert fitted.observation.degradation.screenshot_size is not None
    assert fit_step(config, AgentState(), rebuilt, limits).messages == fitted.messages


def test_a_table_shown_in_a_scaled_frame_without_its_source_is_refused() -> None:
    """Rows already on a scaled grid cannot be moved to a smaller one exactly without the
    table they came from: a `StateError`, never a tree in the wrong frame."""
    config = AgentConfig(
        observation_type="screenshot_a11y_tree", action_space="pyautogui", scaling="claude"
    )
    live = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    assert live.frame is not None
    size = RequestSize(bytes=1, images=1, input_tokens=1)
    record = Degradation(before=size, after=size, screenshot_size=(700, 394))
    with pytest.raises(StateError, match="earlier scaled frame"):
        refit_step(config, AgentState(), _from_table(config, live), record)
    assert refit_step(config, AgentState(), live, record).frame is not None
