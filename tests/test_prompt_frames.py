"""The system prompt under screenshot scaling: it states the grid the reply is read in.

With a scaled screenshot, a reply is read in the step's `CoordinateFrame`
(pixels of the sent image, or a 0-1000 / 0-999 / 0-1 scale) and mapped up to
the screen. So the prompt must describe that grid, not the screen; at the
default ("native", an identity frame) it stays the reference's prompt.
"""

from __future__ import annotations

import base64
import hashlib
import io
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from adapters.providers.native import display_size
from osharm_core import AgentConfig, AgentState, CoordinateFrame, complete_step, prepare_step
from osharm_core.budget import fit_step, refit_step
from osharm_core.frames import GRIDS
from osharm_core.limits import ServerLimits
from osharm_core.observation import png_size
from osharm_core.prompts import PROMPTS, reframe_system_message, system_message, system_prompt
from osharm_core.scaling import PRESETS, resolve_preset
from osharm_core.step import parse_reply
from tests.conftest import OBSERVATIONS, fixture_observation
from tests.strategies import preset_names, screen_sizes

# sha256 of each reference prompt, as they were before frames could change them.
REFERENCE_SHA256 = {
    (
        "a11y_tree",
        "computer_13",
    ): "fdc04ec72f35f7cc5b5556c894d66699519cb1460c10a215eb3044cd38439782",
    ("a11y_tree", "pyautogui"): "8b7583e267667e551b5d4f88a25d79713ce5ce020f29b63f68314dc5edc41dd0",
    (
        "screenshot",
        "computer_13",
    ): "8a522f9755e3540a042f5ae92dbf141db641fba1a03d0fc7b6491d3f7c4dc343",
    ("screenshot", "pyautogui"): "a722ca70278f8e8e50d7a300117cba90216de877088f5af2e7b16124029d84b1",
    ("screenshot_a11y_tree", "computer_13"): (
        "e15a07cac38f732f8eb03d8ede24f9d350e458b4e65f4a7596e24272a4df8561"
    ),
    ("screenshot_a11y_tree", "pyautogui"): (
        "4313635753060425dcf2fc2d0ee631a5dcc40f39159184d890f71c1a50b47a59"
    ),
    ("som", "pyautogui"): "d3324dd2a8c1fad8ab6864db121b59752ed036015ff7c22a106c75c24e5ae01e",
}
SCREENSHOT_PAIRS = sorted(k for k in PROMPTS if k[0] != "a11y_tree")
ALL_PAIRS = sorted(PROMPTS)
_STATED = re.compile(
    r"x runs from 0 at the left edge to (\S+) at the right edge, and y from 0 at the top "
    r"edge to (\S+) at the bottom edge"
)
_RANGE = re.compile(r"^    ([xy]) \((?:required|optional)\): a number from 0 to (\S+)$", re.M)

#: Any frame, on any grid (the presets make only some of these).
frames = st.builds(
    CoordinateFrame,
    screen_width=st.integers(1, 6000),
    screen_height=st.integers(1, 4000),
    image_width=st.integers(1, 6000),
    image_height=st.integers(1, 4000),
    grid=st.sampled_from(GRIDS),
    rounding=st.sampled_from(("round", "floor")),
)
preset_frames = st.one_of(
    st.tuples(preset_names, screen_sizes).map(lambda t: PRESETS[t[0]].frame_for(*t[1])),
    st.tuples(st.integers(3136, 4_000_000), screen_sizes).map(
        lambda t: resolve_preset(f"max_pixels={t[0]}", "gpt-4o").frame_for(*t[1])
    ),
)


def config_for(pair: tuple[str, str]) -> AgentConfig:
    return AgentConfig(observation_type=pair[0], action_space=pair[1])  # type: ignore[arg-type]


def stated_extent(prompt: str) -> tuple[str, str]:
    """The largest x and y the prompt tells the model (every statement of it must agree)."""
    found = set(_STATED.findall(prompt))
    assert len(found) == 1, found
    (extent,) = found
    ranges = _RANGE.findall(prompt)
    assert all(value == extent[0 if axis == "x" else 1] for axis, value in ranges), ranges
    return extent


# --- the default stays the reference's -----------------------------------------------------------


@pytest.mark.parametrize("pair", ALL_PAIRS)
def test_the_reference_prompts_are_unchanged(pair: tuple[str, str]) -> None:
    """Byte for byte what they were; no frame, or an identity frame, gives exactly them."""
    assert hashlib.sha256(PROMPTS[pair].encode()).hexdigest() == REFERENCE_SHA256[pair]
    config = config_for(pair)
    assert system_prompt(config) is PROMPTS[pair]
    assert system_prompt(config, None) is PROMPTS[pair]
    assert system_prompt(config, CoordinateFrame.identity(2560, 1440)) is PROMPTS[pair]


@given(screen_sizes)
def test_an_identity_frame_of_any_size_keeps_the_reference_prompt(size: tuple[int, int]) -> None:
    for pair in ALL_PAIRS:
        assert system_prompt(config_for(pair), PRESETS["native"].frame_for(*size)) is PROMPTS[pair]


def test_the_default_step_sends_the_reference_system_message() -> None:
    config = AgentConfig(observation_type="screenshot", action_space="computer_13")
    request = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    assert request.frame is None
    assert request.messages[0].text == system_message(config, "task")
    assert "the screen is 1920 x 1080 pixels" in request.messages[0].text


# --- a scaled step states its frame's grid -------------------------------------------------------


@given(preset_frames, st.sampled_from(ALL_PAIRS))
def test_every_preset_states_its_frames_grid(frame: CoordinateFrame, pair: tuple[str, str]) -> None:
    """The prompt's stated extent is the frame's grid, and a reply at it lands on the screen."""
    config = config_for(pair)
    prompt = system_prompt(config, frame)
    if frame.is_identity:
        assert prompt is PROMPTS[pair]
        return
    width, height = frame.grid_extent
    assert stated_extent(prompt) == (str(width), str(height))
    sx, sy = frame.to_screen(width, height)
    assert 0 <= sx <= frame.screen_width
    assert 0 <= sy <= frame.screen_height
    assert frame.to_screen(0, 0) == (0, 0)


@given(frames, st.sampled_from(ALL_PAIRS))
def test_any_frame_states_its_grid_and_nothing_else(
    frame: CoordinateFrame, pair: tuple[str, str]
) -> None:
    """On every grid, the stated extent and every computer_13 range name the frame's grid;
    the prompt never speaks of screen pixels, and its examples parse inside the grid."""
    prompt = system_prompt(config_for(pair), frame)
    if frame.is_identity:
        assert prompt is PROMPTS[pair]
        return
    width, height = frame.grid_extent
    assert stated_extent(prompt) == (str(width), str(height))
    assert "screen pixels" not in prompt
    assert "the screen is" not in prompt
    shown = re.split(r"[Ff]or example:\n", prompt, maxsplit=1)[1].split("\n\n")[0]
    example = parse_reply(config_for(pair), shown)
    assert example
    if pair[1] == "computer_13":
        (action,) = example
        assert isinstance(action, dict)
        assert 0 <= action["x"] <= width
        assert 0 <= action["y"] <= height


@pytest.mark.parametrize("pair", [p for p in SCREENSHOT_PAIRS if p[1] == "computer_13"])
@pytest.mark.parametrize(
    ("scaling", "model", "extent", "corner"),
    [
        ("openai-high", "gpt-4o", ("1365", "768"), (1920, 1080)),
        ("qwen2-vl", "gpt-4o", ("1000", "1000"), (1920, 1080)),
        ("gemini", "gemini-2.5-pro", ("999", "999"), (1918, 1078)),
        ("ui-tars-1.5", "gpt-4o", ("1932", "1092"), (1920, 1080)),
    ],
)
def test_a_step_that_follows_its_prompt_clicks_on_the_screen(
    pair: tuple[str, str],
    scaling: str,
    model: str,
    extent: tuple[str, str],
    corner: tuple[int, int],
) -> None:
    """A 1920x1080 step: the model reads the stated size and clicks its far corner, which lands
    on the screen's far corner (the review's reply at 1900, 1060 was read as sent pixels)."""
    config = AgentConfig(
        model=model, observation_type=pair[0], action_space="computer_13", scaling=scaling
    )
    request = prepare_step(config, AgentState(), "click", fixture_observation("mousepad_notes"))
    assert request.frame is not None
    system = request.messages[0].text
    assert system == system_message(config, "click", request.frame)
    assert stated_extent(system) == extent
    assert "1920" not in system
    x, y = extent
    reply = f'```json\n{{"action_type": "CLICK", "x": {x}, "y": {y}}}\n```'
    _, actions = complete_step(config, AgentState(), request, reply)
    assert actions == [{"action_type": "CLICK", "x": corner[0], "y": corner[1]}]


@pytest.mark.parametrize("pair", [p for p in SCREENSHOT_PAIRS if p[1] == "pyautogui"])
def test_pyautogui_prompts_state_the_sent_size(pair: tuple[str, str]) -> None:
    config = AgentConfig(
        observation_type=pair[0],  # type: ignore[arg-type]
        action_space="pyautogui",
        scaling="openai-high",
    )
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    system = request.messages[0].text
    assert "which measures 1365 x 768 pixels" in system
    assert stated_extent(system) == ("1365", "768")
    reply = "```python\npyautogui.click(1365, 768)\n```"
    _, actions = complete_step(config, AgentState(), request, reply)
    assert actions is not None
    assert actions[-1].endswith("pyautogui.click(1920, 1080)")


def test_the_tree_the_prompt_and_the_reply_agree() -> None:
    """screenshot_a11y_tree scaled: the prompt says the table shares the reply's measure, and a
    point read off the table (in the frame) lands on its element's screen position."""
    config = AgentConfig(
        observation_type="screenshot_a11y_tree", action_space="computer_13", scaling="qwen2-vl"
    )
    request = prepare_step(config, AgentState(), "t", fixture_observation("libreoffice_calc_sales"))
    assert request.frame is not None
    assert request.linearized is not None
    system = request.messages[0].text
    assert (
        "The table's positions and sizes are measured the same way as your coordinates." in system
    )
    assert stated_extent(system) == ("1000", "1000")
    sent = request.observation.accessibility_tree or ""
    screen = request.linearized.table
    sent_row, screen_row = next(
        (a, b) for a, b in zip(sent.split("\n")[1:], screen.split("\n")[1:], strict=False) if a != b
    )
    mx, my = (int(v) for v in sent_row.split("\t")[-2].strip("()").split(", "))
    sx, sy = (int(v) for v in screen_row.split("\t")[-2].strip("()").split(", "))
    assert 0 <= mx <= 1000
    assert 0 <= my <= 1000
    reply = f'{{"action_type": "CLICK", "x": {mx}, "y": {my}}}'
    _, actions = complete_step(config, AgentState(), request, reply)
    assert actions is not None
    (action,) = actions
    assert isinstance(action, dict)
    assert abs(action["x"] - sx) <= 1
    assert abs(action["y"] - sy) <= 1


def test_a_tree_only_step_is_never_scaled_and_keeps_the_reference_prompt() -> None:
    """With no image there is no frame: the tree stays in screen pixels, and so does the prompt."""
    config = AgentConfig(
        observation_type="a11y_tree", action_space="computer_13", scaling="qwen2-vl"
    )
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    assert request.frame is None
    assert request.messages[0].text == system_message(config, "t")
    assert system_prompt(config) in request.messages[0].text


def test_set_of_marks_states_the_grid_for_points_outside_the_boxes() -> None:
    config = AgentConfig(observation_type="som", action_space="pyautogui", scaling="openai-high")
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    system = request.messages[0].text
    assert "pyautogui.click(tag_3)" in system
    assert (
        "For a point outside every box, read it off the screenshot. Positions are pixels" in system
    )
    assert stated_extent(system) == ("1365", "768")


def test_the_password_is_replaced_in_a_framed_prompt_too() -> None:
    frame = PRESETS["openai-high"].frame_for(1920, 1080)
    config = AgentConfig(client_password="hunter2")
    prompt = system_prompt(config, frame)
    assert "`hunter2`" in prompt
    assert "`password`" not in prompt


# --- each step describes its own frame -----------------------------------------------------------


def test_each_request_describes_its_current_screenshot() -> None:
    """The frame follows each screenshot's size; the one system message describes the latest."""
    config = AgentConfig(
        observation_type="screenshot", action_space="computer_13", scaling="claude"
    )
    state = AgentState()
    small = (OBSERVATIONS / "mousepad_notes.png").read_bytes()
    buffer = io.BytesIO()
    Image.open(io.BytesIO(small)).resize((2560, 1600)).save(buffer, "PNG")
    sizes = []
    for png in (small, buffer.getvalue()):
        request = prepare_step(config, state, "t", {"screenshot": png})
        assert request.frame is not None
        sizes.append(stated_extent(request.messages[0].text))
        assert sizes[-1] == tuple(map(str, request.frame.grid_extent))
        state, _ = complete_step(config, state, request, '{"action_type": "CLICK"}')
    assert sizes[0] != sizes[1]
    assert len([m for m in request.messages if m.role == "system"]) == 1


def test_a_downscaled_budget_step_describes_the_smaller_screenshot() -> None:
    """fit_step halves the screenshot: its system message now states the halved size, refit_step
    repeats that, and a reply at the stated corner lands on the screen's corner."""
    config = AgentConfig(action_space="computer_13", observation_type="screenshot")
    request = prepare_step(config, AgentState(), "t", fixture_observation("libreoffice_calc_sales"))
    assert "the screen is 1920 x 1080 pixels" in request.messages[0].text
    fitted = fit_step(config, AgentState(), request, ServerLimits(max_bytes=400_000))
    record = fitted.observation.degradation
    assert record is not None
    assert record.screenshot_size is not None
    system = fitted.messages[0].text
    assert system == system_message(config, "t", fitted.frame)
    assert stated_extent(system) == tuple(map(str, record.screenshot_size))
    again = refit_step(config, AgentState(), request, record)
    assert again.messages == fitted.messages
    x, y = record.screenshot_size
    _, actions = complete_step(
        config, AgentState(), fitted, f'{{"action_type": "CLICK", "x": {x}, "y": {y}}}'
    )
    assert actions == [{"action_type": "CLICK", "x": 1920, "y": 1080}]


def test_reframing_leaves_a_foreign_system_message_alone() -> None:
    config = AgentConfig()
    frame = PRESETS["openai-high"].frame_for(1920, 1080)
    assert reframe_system_message(config, "my own prompt", None, frame) == "my own prompt"
    text = system_message(config, "t")
    assert reframe_system_message(config, text, None, None) == text
    assert reframe_system_message(config, text, None, frame) == system_message(config, "t", frame)


# --- native computer-use tools -------------------------------------------------------------------


def test_a_native_tools_prompt_agrees_with_its_display_size() -> None:
    """Anthropic's tool is told the sent screenshot's size; the prompt states the same size, and
    the tool's reply (sent pixels) still maps to the screen as before."""
    config = AgentConfig(
        model="anthropic-computer/claude-sonnet-4-6",
        observation_type="screenshot",
        action_space="pyautogui",
    )
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    width, height = display_size(request.messages, (1, 1))
    assert (width, height) == (1429, 804)
    assert stated_extent(request.messages[0].text) == (str(width), str(height))
    sent = base64.b64decode(request.observation.screenshot or "")
    assert png_size(sent) == (width, height)
    reply = "```python\npyautogui.click(714, 402)\n```"
    _, actions = complete_step(config, AgentState(), request, reply)
    assert actions == ["pyautogui.click(959, 540)"]


@pytest.mark.parametrize("model", ["gemini-computer/gemini-3.5-flash", "openai-computer/gpt-5.4"])
def test_native_tools_with_an_unscaled_screenshot_keep_the_reference_prompt(model: str) -> None:
    config = AgentConfig(model=model, observation_type="screenshot", action_space="pyautogui")
    request = prepare_step(config, AgentState(), "t", fixture_observation("mousepad_notes"))
    assert request.frame is None
    assert request.messages[0].text == system_message(config, "t")
