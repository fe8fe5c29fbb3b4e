"""Native computer-use models and scaling: their replies arrive as pixels of the sent screenshot.

The providers convert each vendor's coordinates (Gemini's 0-999 grid, pixels
for OpenAI and Anthropic) into pixels of the screenshot they sent; the step's
coordinate frame then maps those to the screen. So such a model's frame must
read pixels: `auto` picks a pixel preset, and a grid preset is refused.
"""

from __future__ import annotations

import base64
import io

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image

from osharm_core import AgentConfig, AgentState, ConfigError, complete_step, prepare_step
from osharm_core.observation import png_size
from osharm_core.scaling import (
    answers_in_sent_pixels,
    effective_scaling,
    preset_for_model,
    resolve_preset,
    vendor_limit,
)
from tests.conftest import OBSERVATIONS
from tests.strategies import screen_sizes


@pytest.mark.parametrize(
    ("model", "preset"),
    [
        ("gemini-computer/gemini-3.5-flash", "native"),
        ("gemini-2.5-computer-use-preview-10-2025", "native"),
        ("anthropic-computer/claude-sonnet-4-6", "claude"),
        ("openai-computer/gpt-5.4", "openai-high"),
        ("computer-use-preview", "native"),
        ("gemini-2.5-pro", "gemini"),
    ],
)
def test_auto_gives_native_protocols_a_pixel_preset(model: str, preset: str) -> None:
    assert preset_for_model(model) == preset


def test_a_grid_preset_is_refused_for_a_native_protocol() -> None:
    assert answers_in_sent_pixels("gemini-computer/gemini-3.5-flash")
    with pytest.raises(ConfigError, match="native computer-use tool"):
        AgentConfig(model="gemini-computer/gemini-3.5-flash", scaling="gemini")
    AgentConfig(model="gemini-2.5-pro", scaling="gemini")  # a chat model may use the grid


def test_a_native_reply_in_sent_pixels_lands_on_the_screen() -> None:
    """Anthropic's tool sees the `claude`-sized screenshot; its provider writes sent pixels."""
    config = AgentConfig(
        model="anthropic-computer/claude-sonnet-4-6",
        observation_type="screenshot",
        action_space="pyautogui",
        scaling="auto",
    )
    png = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
    request = prepare_step(config, AgentState(), "task", {"screenshot": png})
    assert request.frame is not None
    assert (request.frame.image_width, request.frame.image_height) == (1429, 804)
    reply = "```python\npyautogui.click(714, 402)\n```"
    _, actions = complete_step(config, AgentState(), request, reply)
    assert actions == ["pyautogui.click(959, 540)"]


# --- the default scaling ("native") on native tools ----------------------------------------------


@pytest.mark.parametrize(
    ("model", "scaling"),
    [
        ("anthropic-computer/claude-sonnet-4-6", "claude"),
        ("anthropic-computer/claude-sonnet-4-5", "claude"),
        ("ANTHROPIC-COMPUTER/Claude-Opus-4-7", "claude-hires"),
        ("anthropic-computer/my-claude-alias", "claude"),
        ("openai-computer/gpt-5.4", "native"),
        ("computer-use-preview", "native"),
        ("gemini-computer/gemini-3.5-flash", "native"),
        ("claude-sonnet-4-6", "native"),
        ("anthropic/claude-sonnet-4-6", "native"),
    ],
)
def test_native_means_the_size_the_vendor_would_shrink_to(model: str, scaling: str) -> None:
    """Only Anthropic's tool reads coordinates in an image its API shrank; "native" on it is
    the `claude` (or Opus 4.7's `claude-hires`) preset, and an explicit setting stays as set."""
    assert effective_scaling("native", model) == scaling
    assert effective_scaling("claude-hires", model) == "claude-hires"
    assert effective_scaling("auto", model) == "auto"


def test_the_default_frames_a_claude_tool_screenshot() -> None:
    """AgentConfig's default scaling sends Claude's tool the 1429x804 image its API would have
    made of the 1920x1080 screen, and maps its pixels back to the screen."""
    config = AgentConfig(
        model="anthropic-computer/claude-sonnet-4-6",
        observation_type="screenshot",
        action_space="pyautogui",
    )
    assert config.scaling == "native"
    png = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
    request = prepare_step(config, AgentState(), "task", {"screenshot": png})
    assert request.frame is not None
    assert (request.frame.image_width, request.frame.image_height) == (1429, 804)
    sent = base64.b64decode(request.observation.screenshot or "")
    assert png_size(sent) == (1429, 804)
    x, y = request.frame.model_point(1800, 1000)  # where Claude sees the screen's (1800, 1000)
    reply = f"```python\npyautogui.click({x}, {y})\n```"
    _, actions = complete_step(config, AgentState(), request, reply)
    (action,) = actions
    sx, sy = map(int, action.removeprefix("pyautogui.click(").removesuffix(")").split(", "))
    assert abs(sx - 1800) <= 1  # within the frames' 1 px round trip
    assert abs(sy - 1000) <= 1


def test_a_screen_within_the_limit_is_sent_as_captured() -> None:
    """Opus 4.7 reads up to 2576 px / 3.75 MP: a 1080p screenshot needs no scaling at all."""
    config = AgentConfig(model="anthropic-computer/claude-opus-4-7", observation_type="screenshot")
    png = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
    request = prepare_step(config, AgentState(), "task", {"screenshot": png})
    assert request.frame is None
    assert request.observation.screenshot == base64.b64encode(png).decode()


@settings(max_examples=30)  # each example encodes a 1080p screenshot
@given(
    st.sampled_from(("", "openai/", "anthropic/", "gemini/", "compat/", "azure/", "vllm/"))
    .flatmap(lambda prefix: st.from_regex(r"\A[a-z0-9.\-]{1,20}\Z").map(prefix.__add__))
    .filter(lambda name: "computer" not in name)
)
def test_prompt_agent_models_keep_native_as_captured(model: str) -> None:
    """A model that writes its own pyautogui code sees the screenshot byte for byte at "native"."""
    assert effective_scaling("native", model) == "native"
    config = AgentConfig(model=model, observation_type="screenshot")
    png = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
    request = prepare_step(config, AgentState(), "task", {"screenshot": png})
    assert request.frame is None
    assert request.observation.screenshot == base64.b64encode(png).decode()


# --- explicit presets on Anthropic's tool ---------------------------------------------------------


def _white_png(width: int, height: int) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (width, height), "white").save(buffer, "PNG")
    return buffer.getvalue()


@pytest.mark.parametrize(
    ("model", "scaling", "screen", "sent"),
    [
        # larger than Sonnet's limit (1568 px / 1.15 MP): fitted within it
        ("anthropic-computer/claude-sonnet-4-6", "claude-hires", (1920, 1080), (1429, 804)),
        ("anthropic-computer/claude-sonnet-4-6", "openai-high", (3440, 1440), (1568, 656)),
        ("anthropic-computer/claude-sonnet-4-6", "ui-tars-1.5", (1920, 1080), (1426, 806)),
        ("anthropic-computer/claude-sonnet-4-6", "max_pixels=2500000", (1920, 1080), (1426, 806)),
        # within it: sent at the preset's own size
        ("anthropic-computer/claude-sonnet-4-6", "openai-high", (1920, 1080), (1365, 768)),
        ("anthropic-computer/claude-sonnet-4-6", "max_pixels=500000", (1920, 1080), (924, 504)),
        # Opus 4.7 keeps up to 2576 px / 3.75 MP
        ("anthropic-computer/claude-opus-4-7", "openai-high", (3440, 1440), (1834, 768)),
        ("anthropic-computer/claude-opus-4-7", "ui-tars-1.5", (3840, 2160), (2576, 1447)),
    ],
)
def test_an_explicit_preset_never_sends_claude_an_image_anthropic_shrinks(
    model: str, scaling: str, screen: tuple[int, int], sent: tuple[int, int]
) -> None:
    """Anthropic shrinks an image past the model's limit and Claude answers in the smaller one;
    sent at the preset's larger size, its clicks were read as pixels of that size (0.74x of
    their place on a 1080p screen). The preset is honoured up to the limit, the frame and the
    tool's display size are the size sent, and a click lands where Claude pointed."""
    config = AgentConfig(
        model=model, observation_type="screenshot", action_space="pyautogui", scaling=scaling
    )
    request = prepare_step(config, AgentState(), "task", {"screenshot": _white_png(*screen)})
    assert png_size(base64.b64decode(request.observation.screenshot or "")) == sent
    assert request.frame is not None
    assert (request.frame.image_width, request.frame.image_height) == sent
    limit = vendor_limit(model)
    assert limit is not None
    assert limit.target_size(*sent) == sent  # what Anthropic keeps as it is
    x, y = request.frame.model_point(screen[0] - 20, screen[1] - 20)
    reply = f"```python\npyautogui.click({x}, {y})\n```"
    _, actions = complete_step(config, AgentState(), request, reply)
    (action,) = actions or [""]
    sx, sy = map(int, action.removeprefix("pyautogui.click(").removesuffix(")").split(", "))
    assert abs(sx - (screen[0] - 20)) <= 2
    assert abs(sy - (screen[1] - 20)) <= 2


@given(
    st.sampled_from(["anthropic-computer/claude-sonnet-4-6", "anthropic-computer/claude-opus-4-7"]),
    st.sampled_from(["native", "auto", "claude", "claude-hires", "openai-high", "qwen2.5-vl"])
    | st.sampled_from(["ui-tars-1.5"])
    | st.integers(10_000, 12_845_056).map(lambda n: f"max_pixels={n}"),
    screen_sizes,
)
def test_every_pixel_preset_fits_what_anthropic_keeps(
    model: str, scaling: str, screen: tuple[int, int]
) -> None:
    """On Anthropic's tool no setting sends an image its API would resize, and none sends one
    larger than the preset itself would."""
    preset = resolve_preset(scaling, model)
    limit = vendor_limit(model)
    assert limit is not None
    sent = preset.target_size(*screen)
    assert limit.target_size(*sent) == sent
    if preset.within is not None:
        own = attrs.evolve(preset, within=None).target_size(*screen)
        assert sent == limit.target_size(*own)
    for other in ("gpt-4o", "claude-sonnet-4-6", "openai-computer/gpt-5.4"):
        assert vendor_limit(other) is None
        assert resolve_preset(scaling if scaling != "native" else "claude", other).within is None
