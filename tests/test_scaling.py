"""Scaling presets: the vendors' documented sizes, the registry's choice, the resampled images."""

from __future__ import annotations

import base64
import io
import os
import struct
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from PIL import Image

from adapters.registry import scaling_preset_for
from osharm_core import AgentConfig, AgentState, ConfigError, ScreenshotError, tag_screenshot
from osharm_core.marks import encode_png, resample_screenshot
from osharm_core.observation import png_size
from osharm_core.scaling import PRESETS, preset_for_model, resize_png, resolve_preset, smart_resize
from osharm_core.step import prepare_step
from tests.conftest import fixture_observation, png_claiming
from tests.strategies import png_chunk, png_modes, raw_png, screen_sizes


@given(screen_sizes)
def test_presets_keep_within_the_documented_limits(size: tuple[int, int]) -> None:
    """OpenAI fits 2048 and a 768 shortest side; Claude 1568 px and 1.15 MP; Gemini 2x2 tiles."""
    w, h = PRESETS["openai-high"].target_size(*size)
    assert max(w, h) <= 2048
    assert min(w, h) <= 768
    w, h = PRESETS["claude"].target_size(*size)
    assert max(w, h) <= 1568
    assert w * h <= 1_150_000
    w, h = PRESETS["claude-hires"].target_size(*size)
    assert max(w, h) <= 2576
    assert w * h <= 3_750_000
    w, h = PRESETS["gemini"].target_size(*size)
    assert max(w, h) <= 1536
    assert PRESETS["native"].target_size(*size) == size


@given(screen_sizes)
def test_smart_resize_gives_multiples_of_28_within_the_pixel_bounds(size: tuple[int, int]) -> None:
    """The Qwen-VL resize: both sides multiples of 28, the area between min and max pixels."""
    for name in ("qwen2.5-vl", "ui-tars-1.5", "ui-tars"):
        preset = PRESETS[name]
        w, h = preset.target_size(*size)
        assert w % 28 == 0
        assert h % 28 == 0
        assert (preset.min_pixels or 0) <= w * h <= (preset.max_pixels or 0)
    w, h = resolve_preset("max_pixels=1003520", "any").target_size(*size)
    assert w * h <= 1003520


def test_documented_examples() -> None:
    """OpenAI's 1024x1024 becomes 768x768; a Qwen 1920x1080 at 1280 patches is 1316x728."""
    assert PRESETS["openai-high"].target_size(1024, 1024) == (768, 768)
    assert PRESETS["openai-high"].target_size(2048, 4096) == (768, 1536)
    assert smart_resize(1920, 1080, factor=28, min_pixels=3136, max_pixels=1280 * 28 * 28) == (
        1316,
        728,
    )


@pytest.mark.parametrize(
    ("model", "preset"),
    [
        ("gpt-4o", "openai-high"),
        ("o3", "openai-high"),
        ("claude-3-7-sonnet-20250219", "claude"),
        ("anthropic/claude-opus-4-1", "claude"),
        ("claude-opus-4-7", "claude-hires"),
        ("gemini-2.5-pro", "gemini"),
        ("vllm/Qwen/Qwen2.5-VL-7B-Instruct", "qwen2.5-vl"),
        ("compat|qwen2-vl-72b", "qwen2-vl"),
        ("vllm/ByteDance-Seed/UI-TARS-1.5-7B", "ui-tars-1.5"),
        ("compat/ui-tars-72b-dpo", "ui-tars"),
        ("computer-use-preview", "native"),
        ("compat/llama3", "native"),
    ],
)
def test_auto_picks_the_family_preset(model: str, preset: str) -> None:
    """scaling="auto" picks the preset from the model name, provider prefix ignored."""
    assert preset_for_model(model) == preset
    assert resolve_preset("auto", model).name == preset


def test_the_registry_names_the_preset_of_a_registered_model() -> None:
    """The registry resolves the name (scheme or family) and names the preset auto would pick."""
    assert scaling_preset_for("claude-sonnet-4-5") == "claude"
    assert scaling_preset_for("vllm/ByteDance-Seed/UI-TARS-1.5-7B") == "ui-tars-1.5"


def test_config_lists_the_choices_for_a_bad_scaling() -> None:
    """An unknown scaling is a ConfigError listing auto, the presets and max_pixels=N."""
    with pytest.raises(ConfigError, match="scaling must be one of auto, native, openai-high"):
        AgentConfig(scaling="tiny")
    with pytest.raises(ConfigError, match="max_pixels=N"):
        AgentConfig(scaling="max_pixels=0")
    config = AgentConfig(scaling="auto", server_profile="nginx")
    assert AgentConfig.from_json(config.to_json()) == config


def test_a_scaled_screenshot_is_sent_at_the_preset_size() -> None:
    """The PNG sent has the preset's size, and the frame says so."""
    obs = fixture_observation("libreoffice_calc_sales")
    config = AgentConfig(observation_type="screenshot", scaling="claude")
    request = prepare_step(config, AgentState(), "t", obs)
    sent = base64.b64decode(request.messages[-1].images[0].data)
    assert png_size(sent) == (1429, 804)
    assert request.frame is not None
    assert (request.frame.image_width, request.frame.image_height) == (1429, 804)
    Image.open(io.BytesIO(sent)).load()


def test_set_of_marks_are_drawn_at_the_sent_size() -> None:
    """The tagged PNG has the sent size; masks stay in screen pixels, the native ones."""
    obs = fixture_observation("mousepad_file_menu")
    native = tag_screenshot(obs["screenshot"], obs["accessibility_tree"])
    small = tag_screenshot(obs["screenshot"], obs["accessibility_tree"], size=(960, 540))
    assert png_size(small.tagged_screenshot) == (960, 540)
    assert set(small.masks) <= set(native.masks)
    assert len(small.masks) >= len(native.masks) * 0.8


def test_the_tree_beside_a_scaled_screenshot_is_in_the_model_grid() -> None:
    """A tree position read off the scaled observation maps back to the element's screen position."""
    obs = fixture_observation("chromium_settings_form")
    native = prepare_step(AgentConfig(), AgentState(), "t", obs).observation.accessibility_tree
    config = AgentConfig(scaling="gemini")
    request = prepare_step(config, AgentState(), "t", obs)
    assert request.frame is not None
    assert native is not None
    scaled = request.observation.accessibility_tree
    assert scaled is not None
    row_native = native.splitlines()[1].split("\t")
    row_scaled = scaled.splitlines()[1].split("\t")
    x, y = (int(v) for v in row_native[-2].strip("()").split(", "))
    mx, my = (int(v) for v in row_scaled[-2].strip("()").split(", "))
    sx, sy = request.frame.to_screen(mx, my)
    assert abs(sx - x) <= 2
    assert abs(sy - y) <= 2


def test_native_scaling_sends_todays_bytes() -> None:
    """scaling="native" (the default) leaves the observation exactly as before: no frame."""
    obs = fixture_observation("thunar_context_menu")
    request = prepare_step(AgentConfig(), AgentState(), "t", obs)
    assert request.frame is None
    assert request.messages[-1].images[0].data == base64.b64encode(obs["screenshot"]).decode()


def test_the_readme_frames_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    """The frames example (docs/frames-and-budgets.md) prints the frame and the click mapped to the screen."""
    from tests.test_readme import DOCS, ROOT, _python_blocks

    block = next(b for b in _python_blocks(DOCS) if 'scaling="claude"' in b)
    cwd = Path.cwd()
    os.chdir(ROOT)
    try:
        exec(compile(block, "README.md", "exec"), {})
    finally:
        os.chdir(cwd)
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(
        "CoordinateFrame(screen_width=1920, screen_height=1080, image_width=1429"
    )
    assert out[1] == "['pyautogui.click(959, 540)']"


@pytest.mark.parametrize("scaling", ["openai-high", "claude", "gemini", "qwen2-vl", "ui-tars-1.5"])
@pytest.mark.parametrize("size", [(2_000_000, 1), (1, 2_000_000)])
def test_a_screenshot_too_large_to_frame_is_a_screenshot_error(
    scaling: str, size: tuple[int, int]
) -> None:
    """A PNG header claiming a side past MAX_FRAME_SIDE is refused as the screenshot's fault,
    naming its size, not as a frame ConfigError."""
    config = AgentConfig(
        model="gpt-4o", observation_type="screenshot", action_space="pyautogui", scaling=scaling
    )
    with pytest.raises(ScreenshotError, match=f"screenshot is {size[0]} x {size[1]} pixels"):
        prepare_step(config, AgentState(), "t", {"screenshot": png_claiming(*size)})


@pytest.mark.parametrize("scaling", ["openai-high", "claude", "gemini", "qwen2-vl", "ui-tars-1.5"])
@pytest.mark.parametrize("size", [(1 << 20, 1), (1, 1 << 20)])
def test_a_screenshot_at_the_largest_side_is_framed_unless_sent_larger(
    scaling: str, size: tuple[int, int]
) -> None:
    """At the largest side a screenshot is framed; the Qwen-style grids, which would send such a
    sliver larger than that, refuse it as a ScreenshotError too."""
    preset = PRESETS[scaling]
    if preset.multiple is None:
        assert preset.frame_for(*size).screen_width == size[0]
        return
    with pytest.raises(ScreenshotError, match="would send it at"):
        preset.frame_for(*size)


# --- image modes on the scaled paths -----------------------------------------------------------

TREE = (
    '<desktop-frame xmlns:st="https://accessibility.ubuntu.example.org/ns/state" '
    'xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">'
    '<push-button name="OK" st:showing="true" st:visible="true" st:enabled="true" '
    'cp:screencoord="(10, 20)" cp:size="(80, 30)"/></desktop-frame>'
)


def grey_with_key(depth: int, key: int) -> bytes:
    """A 200 x 100 grey PNG at `depth` bits: left half `key` (the tRNS colour), right half not."""
    samples = [key] * 100 + [(key + 1) % (1 << depth)] * 100
    bits = "".join(format(v, f"0{depth}b") for v in samples)
    bits += "0" * (-len(bits) % 8)
    row = int(bits, 2).to_bytes(len(bits) // 8, "big")
    return raw_png(200, 100, depth, 0, [row] * 100, png_chunk(b"tRNS", struct.pack(">H", key)))


@pytest.mark.parametrize("depth", [1, 2, 4, 8, 16])
def test_scaled_grey_with_a_transparent_colour_keeps_it_as_alpha(depth: int) -> None:
    """Grey PNGs with tRNS at any depth are scaled to RGBA with the key colour transparent, both
    paths; 1- and 16-bit ones raised a raw ValueError in set-of-marks, and at 2 and 4 bits
    Pillow widens the pixels to 8 bits but not the key (so it matched nothing)."""
    screenshot = grey_with_key(depth, 1)
    tagged = tag_screenshot(screenshot, TREE, size=(100, 50)).tagged_screenshot
    for scaled in (resize_png(screenshot, (100, 50)), tagged):
        image = Image.open(io.BytesIO(scaled))
        assert (image.mode, image.size) == ("RGBA", (100, 50))
        assert image.getpixel((5, 40))[3] == 0
        assert image.getpixel((95, 40))[3] == 255


def test_scaled_palette_with_transparency_does_not_warn() -> None:
    """A palette PNG with tRNS is converted to RGBA, which Pillow does without its UserWarning."""
    screenshot = raw_png(
        40,
        20,
        8,
        3,
        [bytes(range(40))] * 20,
        png_chunk(b"PLTE", bytes(range(256)) * 3) + png_chunk(b"tRNS", bytes(range(0, 256, 4))),
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tagged = tag_screenshot(screenshot, TREE, size=(20, 10)).tagged_screenshot
        assert Image.open(io.BytesIO(tagged)).mode == "RGBA"
        assert Image.open(io.BytesIO(resize_png(screenshot, (20, 10)))).mode == "RGBA"


def test_scaled_16_bit_grey_is_scaled_not_clipped() -> None:
    """A 0-65535 gradient comes out as a 0-255 gradient (it was 99 % white)."""
    row = b"".join(round(x * 65535 / 399).to_bytes(2, "big") for x in range(400))
    screenshot = raw_png(400, 100, 16, 0, [row] * 100)
    tagged = tag_screenshot(screenshot, TREE, size=(200, 50)).tagged_screenshot
    for scaled in (resize_png(screenshot, (200, 50)), tagged):
        image = Image.open(io.BytesIO(scaled)).convert("L")
        values = [image.getpixel((x, 45)) for x in range(image.width)]
        assert values[0] <= 2
        assert values[-1] >= 250
        assert values[100] in range(120, 136)
        assert values == sorted(values)


def test_an_image_pillow_cannot_write_is_a_screenshot_error() -> None:
    """An encoding failure is typed, naming the image's mode and size (it was Pillow's ValueError)."""
    bad = Image.new("RGB", (4, 4))
    bad.info["transparency"] = 5
    with pytest.raises(ScreenshotError, match=r"\(RGB, 4 x 4\) cannot be encoded as PNG"):
        encode_png(bad)
    assert Image.open(io.BytesIO(encode_png(resample_screenshot(bad, (2, 2))))).mode == "RGBA"


@given(png_modes())
def test_every_png_mode_scales_to_a_png_or_a_screenshot_error(
    case: tuple[bytes, int, int, bool],
) -> None:
    """Any colour type, depth and tRNS: both scaled paths give a PNG of the size asked for (RGBA
    when a tRNS chunk was read) or a ScreenshotError, never a raw error or a warning."""
    screenshot, _colour_type, _depth, transparent = case
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        try:
            source = Image.open(io.BytesIO(screenshot))
            source.load()
        except (OSError, ValueError, SyntaxError):
            source = None
        size = (7, 5)
        for produce in (
            lambda: resize_png(screenshot, size),
            lambda: tag_screenshot(screenshot, TREE, size=size).tagged_screenshot,
        ):
            try:
                scaled = produce()
            except ScreenshotError:
                continue
            if scaled == screenshot:  # already the size asked for: resize_png sends it as given
                continue
            image = Image.open(io.BytesIO(scaled))
            assert image.size == size
            assert image.mode in ("L", "RGB", "RGBA")
            if source is not None and source.size == size:
                continue  # marks drawn on the image as it is: its tRNS chunk is kept as given
            if source is not None and "transparency" in source.info:
                assert transparent
                assert image.mode == "RGBA"
