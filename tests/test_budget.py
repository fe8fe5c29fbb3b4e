"""The pre-flight budget: measurements, the declared degradation order, and its record."""

from __future__ import annotations

import base64
import json
import math

import pytest
from hypothesis import given

from osharm_core import (
    AgentConfig,
    AgentState,
    ConfigError,
    RequestBudgetError,
    ServerLimits,
    StateError,
)
from osharm_core.budget import default_size_of, downscale_sizes, fit_step, image_tokens, measure
from osharm_core.config import MAX_CONFIG_INT
from osharm_core.limits import Degradation, server_limits
from osharm_core.messages import render_openai_chat
from osharm_core.observation import png_size
from osharm_core.scaling import PRESETS, resolve_preset
from osharm_core.step import StepRequest, complete_step, prepare_step
from tests.conftest import BUDGET_EPISODE, fixture_observation
from tests.strategies import scaling_settings, screen_sizes

EPISODE = BUDGET_EPISODE
REPLY = "```python\npyautogui.click(10, 20)\n```"


def history(config: AgentConfig, turns: int) -> AgentState:
    """The state after `turns` steps of the fixture episode, each fitted as the agent would."""
    state = AgentState()
    limits = server_limits(config.server_profile)
    for name in EPISODE[:turns]:
        request = prepare_step(config, state, "task", fixture_observation(name))
        if limits is not None:
            request = fit_step(config, state, request, limits)
        state, _ = complete_step(config, state, request, REPLY)
    return state


@pytest.mark.parametrize(
    ("model", "size", "tokens"),
    [
        ("gpt-4o", (1024, 1024), 765),
        ("gpt-4o", (2048, 4096), 1105),
        ("claude-sonnet-4-5", (1000, 1000), 1334),
        ("gemini-2.0-flash", (384, 384), 258),
        ("gemini-2.0-flash", (1920, 1080), 6 * 258),
        ("vllm/Qwen2.5-VL-7B-Instruct", (1932, 1092), 69 * 39),
    ],
)
def test_image_tokens_follow_each_providers_documented_rule(
    model: str, size: tuple[int, int], tokens: int
) -> None:
    """OpenAI tiles, Anthropic's w*h/750, Gemini's 258 per tile, Qwen's 28 px patches."""
    assert image_tokens(model, *size) == tokens


def test_measure_counts_bytes_images_and_tokens() -> None:
    """Bytes are the JSON body's, images the parts', tokens text plus image rule."""
    config = AgentConfig(observation_type="screenshot", action_space="pyautogui")
    request = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    size = measure(request.messages, "gpt-4o")
    body = json.dumps(render_openai_chat(request.messages, "gpt-4o")).encode()
    assert size.bytes == len(body) + 256  # the messages exactly, and room for the envelope
    assert size.images == 1
    assert size.input_tokens > image_tokens("gpt-4o", 1920, 1080)


def test_a_request_within_its_limits_is_left_exactly_as_it_was() -> None:
    """No limit broken: the very same request comes back, with no record."""
    config = AgentConfig(action_space="pyautogui")
    request = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    assert fit_step(config, AgentState(), request, ServerLimits(max_images=5)) is request


def test_first_the_oldest_history_images_go_and_their_text_stays() -> None:
    """vllm-default: every history screenshot is left out, oldest first; the trees stay."""
    config = AgentConfig(action_space="pyautogui")
    state = history(config, 3)
    request = prepare_step(config, state, "task", fixture_observation("mousepad_notes"))
    fitted = fit_step(config, state, request, server_limits("vllm-default"))
    record = fitted.observation.degradation
    assert record is not None
    assert record.dropped_images == (1, 2, 3)
    assert record.screenshot_size is None
    assert record.tree_tokens is None
    assert record.before.images == 4
    assert record.after.images == 1
    assert [m.text for m in fitted.messages] == [m.text for m in request.messages]
    assert fitted.messages[-1] == request.messages[-1]


def test_only_as_many_images_go_as_needed() -> None:
    """With room for two images, only the oldest history screenshot is left out."""
    config = AgentConfig(action_space="pyautogui", observation_type="screenshot")
    state = history(config, 2)
    request = prepare_step(config, state, "task", fixture_observation("mousepad_notes"))
    record = fit_step(config, state, request, ServerLimits(max_images=2)).observation.degradation
    assert record is not None
    assert record.dropped_images == (1,)


def test_then_the_current_screenshot_is_downscaled_and_its_frame_follows() -> None:
    """A byte limit one screenshot cannot meet: it is downscaled, and clicks map through its frame."""
    config = AgentConfig(action_space="pyautogui", observation_type="screenshot")
    request = prepare_step(config, AgentState(), "t", fixture_observation("libreoffice_calc_sales"))
    fitted = fit_step(config, AgentState(), request, ServerLimits(max_bytes=400_000))
    record = fitted.observation.degradation
    assert record is not None
    assert record.dropped_images == ()
    assert record.screenshot_size in {(960, 540), (672, 378), (480, 270)}  # a halving step
    assert record.after.bytes <= 400_000
    sent = base64.b64decode(fitted.messages[-1].images[0].data)
    assert png_size(sent) == record.screenshot_size
    frame = fitted.frame
    assert frame is not None
    assert (frame.image_width, frame.image_height) == record.screenshot_size
    assert frame.to_screen(*record.screenshot_size) == (1920, 1080)
    _, actions = complete_step(config, AgentState(), fitted, REPLY)
    x, y = frame.to_screen(10, 20)
    assert actions == [f"pyautogui.click({x}, {y})"]
    assert (x, y) != (10, 20)


def test_last_the_trees_are_trimmed_further() -> None:
    """An input-token limit the tree breaks: the tree is trimmed to a smaller token limit."""
    config = AgentConfig(action_space="pyautogui", observation_type="a11y_tree")
    request = prepare_step(
        config, AgentState(), "t", fixture_observation("chromium_inventory_table")
    )
    fitted = fit_step(config, AgentState(), request, ServerLimits(max_input_tokens=4000))
    record = fitted.observation.degradation
    assert record is not None
    assert record.tree_tokens == 2500
    assert record.after.input_tokens <= 4000
    tree = fitted.observation.accessibility_tree
    assert tree is not None
    assert tree.endswith("[...]\n")


def test_a_request_that_cannot_fit_is_never_handed_back() -> None:
    """No images allowed at all: a typed error naming the limit and by how much."""
    config = AgentConfig(action_space="pyautogui", observation_type="screenshot")
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    with pytest.raises(RequestBudgetError, match=r"max_images=0.*still 1 \(1 over\)") as caught:
        fit_step(config, AgentState(), request, ServerLimits(max_images=0))
    assert (caught.value.limit, caught.value.value, caught.value.maximum) == ("max_images", 1, 0)


@pytest.mark.parametrize("observation_type", ["screenshot_a11y_tree", "som", "screenshot"])
def test_nginx_profile_keeps_every_step_of_the_episode_under_one_mebibyte(
    observation_type: str,
) -> None:
    """Three turns of history on the real fixtures: every request measured fits 1 MiB."""
    config = AgentConfig(
        action_space="pyautogui", observation_type=observation_type, server_profile="nginx"
    )
    limit = server_limits("nginx")
    assert limit is not None
    state = AgentState()
    for name in EPISODE:
        request = prepare_step(config, state, "task", fixture_observation(name))
        fitted = fit_step(config, state, request, limit)
        size = default_size_of(config.model)(fitted.messages)
        assert size <= 1024 * 1024
        state, _ = complete_step(config, state, fitted, REPLY)
    assert AgentState.from_json(state.to_json()) == state


def test_the_record_round_trips_and_limits_validate() -> None:
    """Degradation records read back equal; profiles and limits are checked."""
    config = AgentConfig(action_space="pyautogui")
    state = history(config, 3)
    request: StepRequest = prepare_step(config, state, "t", fixture_observation("mousepad_notes"))
    record = fit_step(config, state, request, server_limits("vllm-default")).observation.degradation
    assert record is not None
    assert Degradation.from_json(json.loads(json.dumps(record.to_json()))) == record
    with pytest.raises(ConfigError, match="server_profile must be one of nginx, vllm-default"):
        AgentConfig(server_profile="apache")
    with pytest.raises(ConfigError, match="max_bytes must be a non-negative int"):
        ServerLimits(max_bytes=-1)
    explicit = AgentConfig(server_profile=ServerLimits(max_images=2, max_input_tokens=9000))
    assert AgentConfig.from_json(json.loads(json.dumps(explicit.to_json()))) == explicit


def test_a_downscaled_screenshot_takes_its_tree_along() -> None:
    """A point read off the tree of a downscaled step lands where the tree's node is on screen."""
    config = AgentConfig(action_space="pyautogui", observation_type="screenshot_a11y_tree")
    observation = fixture_observation("libreoffice_calc_sales")
    request = prepare_step(config, AgentState(), "t", observation)
    fitted = fit_step(config, AgentState(), request, ServerLimits(max_bytes=150_000))
    frame = fitted.frame
    assert frame is not None
    assert fitted.observation.degradation is not None
    assert fitted.observation.degradation.screenshot_size is not None
    assert request.linearized is not None
    screen_rows = _positions(request.linearized.table)
    sent_rows = _positions(fitted.observation.accessibility_tree)
    assert sent_rows
    assert sent_rows.keys() <= screen_rows.keys()
    for row, (x, y) in sent_rows.items():
        sx, sy = screen_rows[row]
        mx, my = frame.to_screen(x, y)
        assert abs(mx - sx) <= 4
        assert abs(my - sy) <= 4
    assert any(screen_rows[row] != point for row, point in sent_rows.items())


def test_a_downscaled_trees_cell_text_stays_as_the_desktop_wrote_it() -> None:
    """After a downscale only the node's own position and size move to the new grid; a text
    line of the document that ends in two pairs is not a row and keeps its numbers."""
    document = "Measured box:\t(100, 200)\t(30, 40)\nend of note"
    ns = "https://accessibility.ubuntu.example.org/ns/"
    xml = (
        f'<desktop-frame xmlns:st="{ns}state" xmlns:cp="{ns}component">'
        '<text st:showing="true" st:visible="true" st:editable="true"'
        ' cp:screencoord="(0, 0)" cp:size="(1920, 1000)">'
        + document.replace("\t", "&#9;")
        + "</text></desktop-frame>"
    )
    config = AgentConfig(action_space="pyautogui", observation_type="screenshot_a11y_tree")
    screenshot = fixture_observation("libreoffice_calc_sales")["screenshot"]
    observation = {"screenshot": screenshot, "accessibility_tree": xml}
    request = prepare_step(config, AgentState(), "t", observation)
    fitted = fit_step(config, AgentState(), request, ServerLimits(max_bytes=150_000))
    frame = fitted.frame
    assert frame is not None
    width, height = frame.model_point(1920, 1000)
    assert (width, height) != (1920, 1000)
    tree = fitted.observation.accessibility_tree
    assert tree is not None
    assert tree.split("\n", 1)[1] == f"text\t\t{document}\t\t\t(0, 0)\t({width}, {height})"


def _positions(tree: str | None) -> dict[str, tuple[float, float]]:
    """Each row's leading columns -> its position, for rows ending in `(x, y)\t(w, h)`."""
    rows: dict[str, tuple[float, float]] = {}
    for line in (tree or "").split("\n")[1:]:
        *head, position, _size = ["", "", *line.split("\t")]
        if position.startswith("(") and "," in position:
            x, y = (float(v) for v in position.strip("()").split(","))
            rows.setdefault("\t".join(head), (x, y))
    return rows


@given(screen_sizes, scaling_settings)
def test_downscaled_sizes_are_ones_the_server_keeps(screen: tuple[int, int], scaling: str) -> None:
    """Under a preset that resizes to multiples (Qwen-VL, UI-TARS, max_pixels=N) each size tried
    is a multiple of it the server leaves as it is, each smaller than the last; under any other
    preset the sizes are the halving steps recorded trajectories were made with."""
    config = AgentConfig(scaling=scaling)
    preset = resolve_preset(scaling, config.model)
    width, height = preset.target_size(*screen)
    sizes = downscale_sizes(config, width, height)
    if preset.multiple is None:
        assert sizes == tuple(
            (max(1, math.floor(width * f)), max(1, math.floor(height * f)))
            for f in (0.5, 0.35, 0.25, 0.18)
        )
        return
    if preset.name in PRESETS:
        assert sizes  # a screen of 800x600 or more has room to shrink under every named preset
        assert sizes[0][0] <= width / 2 + preset.multiple
        assert sizes[0][1] <= height / 2 + preset.multiple
    last = (width, height)
    for size in sizes:
        assert size[0] % preset.multiple == 0
        assert size[1] % preset.multiple == 0
        assert preset.target_size(*size) == size
        assert size[0] <= last[0]
        assert size[1] <= last[1]
        assert size != last
        last = size


def test_a_downscaled_qwen_screenshot_is_answered_in_the_pixels_sent() -> None:
    """The Qwen processor keeps the downscaled size, so the model's corner is the screen's
    (it used to be sent at 966x546, seen at 952x560 and a click at its corner left the screen)."""
    config = AgentConfig(
        model="vllm/Qwen/Qwen2.5-VL-7B-Instruct",
        observation_type="screenshot",
        action_space="pyautogui",
        scaling="auto",
    )
    request = prepare_step(config, AgentState(), "t", fixture_observation("libreoffice_calc_sales"))
    fitted = fit_step(config, AgentState(), request, ServerLimits(max_bytes=700_000))
    frame = fitted.frame
    assert frame is not None
    assert fitted.observation.degradation is not None
    size = (frame.image_width, frame.image_height)
    assert fitted.observation.degradation.screenshot_size == size
    assert PRESETS["qwen2.5-vl"].target_size(*size) == size
    assert image_tokens(config.model, *size) == (size[0] // 28) * (size[1] // 28)
    system = fitted.messages[0].parts[0]
    assert f"measures {size[0]} x {size[1]} pixels" in getattr(system, "text", "")
    _, actions = complete_step(
        config,
        AgentState(),
        fitted,
        f"```python\npyautogui.click({size[0] - 1}, {size[1] - 1})\n```",
    )
    assert actions is not None
    x, y = (int(v) for v in actions[0].removeprefix("pyautogui.click(").rstrip(")").split(","))
    assert 1915 <= x < 1920
    assert 1075 <= y < 1080


_SIZE = {"bytes": 1, "images": 1, "input_tokens": 1}


@pytest.mark.parametrize(
    ("field", "value", "quoted"),
    [
        ("screenshot_size", [0, 5], r"got \[0, 5\]"),
        ("screenshot_size", [-3, 5], r"got \[-3, 5\]"),
        ("screenshot_size", [True, 7], r"got \[True, 7\]"),
        ("screenshot_size", [5, 1_048_577], r"got \[5, 1048577\]"),
        ("screenshot_size", [5.0, 5], r"got \[5\.0, 5\]"),
        ("screenshot_size", [5, 5, 5], r"got \[5, 5, 5\]"),
        ("screenshot_size", "5x5", "got '5x5'"),
        ("tree_tokens", 0, "got 0"),
        ("tree_tokens", -5, "got -5"),
        ("tree_tokens", True, "got True"),
        ("tree_tokens", 2**63, "got 9223372036854775808"),
        ("dropped_images", [1, 0], r"got \[1, 0\]"),
        ("dropped_images", [False], r"got \[False\]"),
        ("dropped_images", {"1": 1}, "got {'1': 1}"),
        ("before", {"bytes": 1, "images": 1}, "got {'bytes': 1, 'images': 1}"),
        ("after", None, "got None"),
    ],
)
def test_a_bad_degradation_record_is_a_state_error_naming_its_field(
    field: str, value: object, quoted: str
) -> None:
    """Sizes are 1 to the largest frame side and trees and turns at least 1, never booleans:
    a hostile record never reaches a frame or a resample."""
    record = {"before": _SIZE, "after": _SIZE, field: value}
    with pytest.raises(StateError, match=f"^'{field}' must be .*; {quoted}$"):
        Degradation.from_json(record)


def test_server_limits_are_capped_like_every_config_integer() -> None:
    """A limit past 2**63-1 (or a bool) is a ConfigError quoting it briefly, so every accepted
    config writes as JSON (the Ray runner ships it to workers that way)."""
    for bad, quoted in ((2**63, "9223372036854775808"), (10**4400, "integer of 14617 bits")):
        with pytest.raises(ConfigError, match=f"max_bytes must be .*{quoted}"):
            ServerLimits(max_bytes=bad)
        with pytest.raises(ConfigError, match=quoted):
            AgentConfig.from_json({"server_profile": {"max_input_tokens": bad}})
    with pytest.raises(ConfigError, match=r"max_images must be .*got True"):
        ServerLimits(max_images=True)
    config = AgentConfig(server_profile=ServerLimits(max_bytes=MAX_CONFIG_INT, max_images=0))
    assert AgentConfig.from_json(json.loads(json.dumps(config.to_json()))) == config
