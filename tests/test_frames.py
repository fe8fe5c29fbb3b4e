"""Coordinate frames: the round trip screen -> model -> screen, and actions mapped through them."""

from __future__ import annotations

import ast
import contextlib
import json
import math
import warnings
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from lxml import etree

from adapters.contract import ModelResponse
from adapters.errors import TrajectoryError
from adapters.runs.computer_13 import _flatten, computer_13_code
from adapters.trajectories.jsonl import TrajectoryRecorder, read_trajectory
from osharm_core import (
    AgentConfig,
    AgentState,
    ConfigError,
    CoordinateFrame,
    ObservationRecord,
    StateError,
)
from osharm_core.accessibility import linearize_accessibility_tree, linearize_table
from osharm_core.errors import ActionParseError
from osharm_core.reframe import (
    _neutralised,
    reframe_code,
    reframe_computer_13,
    reframe_linearized,
    reframe_table,
)
from osharm_core.scaling import PRESETS
from osharm_core.step import LinearizedTree, complete_step, parse_reply, prepare_step
from tests.conftest import fixture_observation, step_record
from tests.strategies import (
    A11Y_NS,
    any_text,
    bare_pyautogui_calls,
    hostile_computer_13_actions,
    kept_positions,
    kept_sizes,
    preset_names,
    row_like_texts,
    screen_points,
    screen_sizes,
    warning_prone_code,
)

HALF = CoordinateFrame(screen_width=2000, screen_height=1000, image_width=1000, image_height=500)


@given(preset_names, screen_sizes, st.data())
def test_every_preset_round_trips_any_point_within_a_pixel(
    name: str, size: tuple[int, int], data: st.DataObject
) -> None:
    """screen -> model -> screen lands within 1 px for every preset and screen size."""
    frame = PRESETS[name].frame_for(*size)
    x, y = data.draw(screen_points(size))
    back = frame.to_screen(*frame.to_model(x, y))
    assert abs(back[0] - x) <= 1
    assert abs(back[1] - y) <= 1


@given(preset_names, screen_sizes, st.data())
def test_a_point_as_the_model_writes_it_lands_within_half_a_grid_cell(
    name: str, size: tuple[int, int], data: st.DataObject
) -> None:
    """Rounded to the model's grid (whole units), a point comes back within half a cell and 1 px,
    on the grid the model is told about and on the screen."""
    frame = PRESETS[name].frame_for(*size)
    x, y = data.draw(screen_points(size))
    point = frame.model_point(x, y)
    back = frame.to_screen(*point)
    sx, sy = frame.scale
    assert abs(back[0] - x) <= math.ceil(sx / 2) + 1
    assert abs(back[1] - y) <= math.ceil(sy / 2) + 1
    assert all(0 <= p <= e for p, e in zip(point, frame.grid_extent, strict=True))
    assert 0 <= back[0] < size[0]
    assert 0 <= back[1] < size[1]


def test_the_last_pixel_of_a_large_screen_stays_on_the_0_to_999_grid() -> None:
    """It rounded to 1000, off the grid, and 1000 read back landed one pixel past the screen."""
    frame = PRESETS["gemini"].frame_for(3840, 2160)
    assert frame.model_point(3839, 2159) == (999, 999)
    assert frame.to_screen(999, 999) < (3840, 2160)
    assert PRESETS["gemini"].frame_for(800, 2000).model_point(0, 1999) == (0, 999)


def test_identity_frame_maps_nothing() -> None:
    """An unscaled pixel frame is the identity: points stay, code and actions are untouched."""
    frame = CoordinateFrame.identity(1920, 1080)
    assert frame.is_identity
    assert frame.to_screen(10.4, 20.6) == (10, 21)
    code = "pyautogui.click(10, 20)"
    assert reframe_code(code, frame) is code
    action = {"action_type": "CLICK", "x": 1, "y": 2}
    assert reframe_computer_13(action, frame) is action


def test_relative_grids_map_to_the_whole_screen() -> None:
    """0-1, 0-1000 and Gemini's 0-999 grids span the screen, with each family's rounding."""
    common = {"screen_width": 1920, "screen_height": 1080, "image_width": 1000, "image_height": 563}
    assert CoordinateFrame(**common, grid="relative").to_screen(0.5, 0.25) == (960, 270)
    assert CoordinateFrame(**common, grid="rel1000").to_screen(1000, 1000) == (1920, 1080)
    gemini = CoordinateFrame(**common, grid="rel999", rounding="floor")
    assert gemini.to_screen(999, 999) == (1918, 1078)


def test_bad_frames_and_points_are_typed_errors() -> None:
    """Sizes must be positive ints, grids known; NaN points raise ValueError."""
    with pytest.raises(ConfigError, match="screen_width"):
        CoordinateFrame(screen_width=0, screen_height=1, image_width=1, image_height=1)
    with pytest.raises(ConfigError, match="grid must be one of"):
        CoordinateFrame(screen_width=1, screen_height=1, image_width=1, image_height=1, grid="x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="finite"):
        HALF.to_screen(float("nan"), 1)
    with pytest.raises(ConfigError, match="unknown field"):
        CoordinateFrame.from_json({**HALF.to_json(), "dpi": 2})
    assert CoordinateFrame.from_json(HALF.to_json()) == HALF
    with pytest.raises(
        ConfigError, match=r"screen_width must be an int from 1 to 1048576; .*401 char"
    ):
        CoordinateFrame.from_json({**HALF.to_json(), "screen_width": 10**400})


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("pyautogui.click(100, 50)", "pyautogui.click(200, 100)"),
        (
            "pyautogui.doubleClick(x=10, y=20, interval=0.5)",
            "pyautogui.doubleClick(x=20, y=40, interval=0.5)",
        ),
        ("pyautogui.moveTo((10, 20), duration=1)", "pyautogui.moveTo((20, 40), duration=1)"),
        ("pyautogui.scroll(-5, 10, 20)", "pyautogui.scroll(-5, 20, 40)"),
        ("pyautogui.dragRel(-10, 5)", "pyautogui.dragRel(-20, 10)"),
        ("pyautogui.rightClick(12.5, 7)", "pyautogui.rightClick(25, 14)"),
        ("pyautogui.click(tag_3)", "pyautogui.click(tag_3)"),
        ("pyautogui.click(x + 10, 20)", "pyautogui.click(x + 10, 40)"),
        ("pyautogui.typewrite('click(1, 2)')", "pyautogui.typewrite('click(1, 2)')"),
        ("pyautogui.click(1, 2", "pyautogui.click(1, 2"),
        (
            "# ünïcode\npyautogui.click(1, 2); pyautogui.mouseUp(3, 4)",
            "# ünïcode\npyautogui.click(2, 4); pyautogui.mouseUp(6, 8)",
        ),
        # pyautogui takes any pair in x's place, positional or x=, as the point
        ("pyautogui.click([10, 20])", "pyautogui.click([20, 40])"),
        ("pyautogui.moveTo(x=(10, 20), duration=1)", "pyautogui.moveTo(x=(20, 40), duration=1)"),
        ("pyautogui.moveRel(xOffset=[-3, 4])", "pyautogui.moveRel(xOffset=[-6, 8])"),
        ("pyautogui.click([1, 2, 3])", "pyautogui.click([1, 2, 3])"),
        # pyautogui under another name
        (
            "import pyautogui as pag\npag.click(10, 20)",
            "import pyautogui as pag\npag.click(20, 40)",
        ),
        (
            "from pyautogui import click, moveTo as go\nclick(1, 2)\ngo(x=3, y=4)\nclick2(5, 6)",
            "from pyautogui import click, moveTo as go\nclick(2, 4)\ngo(x=6, y=8)\nclick2(5, 6)",
        ),
        (
            "import os as pyautogui2\npyautogui2.click(1, 2)",
            "import os as pyautogui2\npyautogui2.click(1, 2)",
        ),
    ],
)
def test_literal_coordinates_are_mapped_and_everything_else_kept(code: str, expected: str) -> None:
    """Numeric literal x/y of pointer calls are rewritten; expressions, text and bad code are not."""
    assert reframe_code(code, HALF) == expected


@given(st.lists(bare_pyautogui_calls, min_size=1, max_size=4), preset_names)
def test_functions_taken_by_a_star_import_are_mapped_as_the_module_calls_are(
    calls: list[str], preset: str
) -> None:
    """After `from pyautogui import *`, `click(x, y)` maps as `pyautogui.click(x, y)` does."""
    frame = PRESETS[preset].frame_for(1920, 1080)
    star = reframe_code("from pyautogui import *\n" + "\n".join(calls), frame)
    module = reframe_code("import pyautogui\n" + "\n".join("pyautogui." + c for c in calls), frame)
    assert star.split("\n")[1:] == [
        line.removeprefix("pyautogui.") for line in module.split("\n")[1:]
    ]


def test_a_star_import_maps_the_reviewed_click() -> None:
    """With claude scaling on 1920x1080, the model's (714, 402) is the screen's (959, 540)."""
    frame = PRESETS["claude"].frame_for(1920, 1080)
    assert reframe_code("from pyautogui import *\nclick(714, 402)", frame).endswith(
        "click(959, 540)"
    )
    # a name bound explicitly keeps its own meaning beside the star import
    aliased = "from pyautogui import *\nfrom pyautogui import write as click\nclick(10, 20)"
    assert reframe_code(aliased, HALF) == aliased


def test_computer_13_actions_are_mapped() -> None:
    """A computer_13 action's x and y come back in screen pixels; other actions are untouched."""
    assert reframe_computer_13({"action_type": "MOVE_TO", "x": 5, "y": 6}, HALF) == {
        "action_type": "MOVE_TO",
        "x": 10,
        "y": 12,
    }
    typing = {"action_type": "TYPING", "text": "x"}
    assert reframe_computer_13(typing, HALF) is typing


def test_computer_13_actions_in_osworlds_parameters_form_are_mapped() -> None:
    """OSWorld's `{"action_type", "parameters"}` form, which the env adapters run, has the x and
    y inside `parameters` mapped too (they once reached the screen in the model's grid)."""
    click = {"action_type": "CLICK", "parameters": {"x": 5, "y": 6, "button": "left"}}
    assert reframe_computer_13(click, HALF) == {
        "action_type": "CLICK",
        "parameters": {"x": 10, "y": 12, "button": "left"},
    }
    assert click["parameters"] == {"x": 5, "y": 6, "button": "left"}  # the caller's is kept
    drag = {"action_type": "DRAG_TO", "parameters": {"x": 5, "y": 6}}
    assert reframe_computer_13(drag, HALF)["parameters"] == {"x": 10, "y": 12}
    # only that exact shape: with another key beside it, `parameters` is not the action's
    other = {"action_type": "CLICK", "parameters": {"x": 5, "y": 6}, "button": "left"}
    assert reframe_computer_13(other, HALF) is other
    # a lone coordinate is mapped on its own axis (the vocabulary refuses it later)
    assert reframe_computer_13({"action_type": "CLICK", "y": 6}, HALF)["y"] == 12


def test_a_parameters_form_reply_clicks_where_the_model_pointed() -> None:
    """With `claude` scaling of a 1920x1080 screen, the model's (714, 402) in the nested form
    runs as a click at the screen's (959, 540), like the flat form."""
    config = AgentConfig(
        observation_type="screenshot", action_space="computer_13", scaling="claude"
    )
    request = prepare_step(config, AgentState(), "task", fixture_observation("mousepad_notes"))
    for reply in (
        '{"action_type": "CLICK", "x": 714, "y": 402, "button": "left"}',
        '{"action_type": "CLICK", "parameters": {"x": 714, "y": 402, "button": "left"}}',
    ):
        _, actions = complete_step(config, AgentState(), request, f"```json\n{reply}\n```")
        assert actions is not None
        assert computer_13_code(actions[0]) == "pyautogui.click(button='left', x=959, y=540)"


@pytest.mark.parametrize("nested", [False, True])
@pytest.mark.parametrize(
    "bad",
    ["714", True, None, [714], {"v": 1}, 10**400],
    ids=["string", "bool", "null", "list", "object", "past-a-float"],
)
def test_a_coordinate_the_frame_cannot_map_makes_the_reply_unparsable(
    bad: object, nested: bool
) -> None:
    """Under a frame, an x or y that is no number (or none a float holds) is refused, as the
    parser refuses NaN: passed on, a string would be written onto the VM in the model's grid.
    Without a frame nothing is mapped and the vocabulary judges it, as before."""
    params = {"x": bad, "y": 402}
    action = (
        {"action_type": "CLICK", "parameters": params}
        if nested
        else {"action_type": "CLICK", **params}
    )
    where = "parameters.x" if nested else "x"
    with pytest.raises(ActionParseError, match=rf"^CLICK\.{where}: "):
        reframe_computer_13(action, HALF)
    config = AgentConfig(observation_type="screenshot", action_space="computer_13")
    reply = f"```json\n{json.dumps(action)}\n```"
    assert parse_reply(config, reply, frame=HALF) is None
    assert parse_reply(config, reply, frame=None) == [action]
    assert parse_reply(config, reply, frame=CoordinateFrame.identity(1000, 500)) == [action]


@given(hostile_computer_13_actions())
def test_no_coordinate_leaves_a_frame_unmapped(action: dict[str, object]) -> None:
    """Whatever an action holds, mapping it either refuses it or gives every x and y (flat or
    nested) as a whole screen pixel, the same as mapping its flat form."""
    try:
        mapped = reframe_computer_13(action, HALF)
    except ActionParseError:
        with pytest.raises(ActionParseError):
            reframe_computer_13(_flatten(action), HALF)
        return
    flat = _flatten(mapped)
    for key in ("x", "y"):
        if key in flat:
            assert isinstance(flat[key], int)
            assert not isinstance(flat[key], bool)
    assert flat == reframe_computer_13(_flatten(action), HALF)


def test_tree_positions_are_shown_in_the_model_grid() -> None:
    """Tree rows show positions and sizes on the sent image; other lines stay."""
    table = "tag\tname\tposition\tsize\nbutton\tOK\t(100, 40)\t(60, 20)\nmultiline text"
    assert reframe_table(table, HALF).splitlines()[1:] == [
        "button\tOK\t(50, 20)\t(30, 10)",
        "multiline text",
    ]


@pytest.mark.parametrize("position", ["(100.0, 40)", "( 100, 40 )", "(0x64, 4_0)", "(100,40)"])
def test_tree_positions_in_any_form_the_linearizer_keeps_are_mapped(position: str) -> None:
    """A position the linearizer keeps (floats, spacing, hex: `parse_pair`) is on the grid too."""
    row = f"button\tOK\t{position}\t(60.0, 20)"
    assert reframe_table(row, HALF) == "button\tOK\t(50, 20)\t(30, 10)"


_UBUNTU = A11Y_NS["ubuntu"]
_DOCUMENT = "Measured box:\t(100, 200)\t(30, 40)\nend of note"


def _text_tree(nodes: list[tuple[str, str, str, str]]) -> str:
    """A tree of kept `text` nodes, each `(name, text, position, size)`."""
    nsmap = {"st": _UBUNTU + "state", "cp": _UBUNTU + "component"}
    root = etree.Element("desktop-frame", nsmap=nsmap)
    for name, text, position, size in nodes:
        node = etree.SubElement(root, "text")
        for state in ("showing", "visible", "editable"):
            node.set(f"{{{nsmap['st']}}}{state}", "true")
        node.set(f"{{{nsmap['cp']}}}screencoord", position)
        node.set(f"{{{nsmap['cp']}}}size", size)
        node.set("name", name)
        node.text = text or None
    return etree.tostring(root, encoding="unicode")


def test_a_documents_own_text_is_never_rescaled() -> None:
    """A text line ending in two pairs is the document's, not a row: only the node's columns map.

    The scaled table was the unscaled one re-split on newlines, so that line's numbers were
    shown rescaled (`(74, 149)\t(23, 30)` under `claude`).
    """
    png = fixture_observation("libreoffice_calc_sales")["screenshot"]
    xml = _text_tree([("", _DOCUMENT, "(0, 0)", "(1920, 1000)")])
    observation = {"screenshot": png, "accessibility_tree": xml}
    trees = {}
    for scaling in ("native", "claude"):
        config = AgentConfig(
            observation_type="screenshot_a11y_tree", action_space="pyautogui", scaling=scaling
        )
        request = prepare_step(config, AgentState(), "x", observation)
        trees[scaling] = request.observation.accessibility_tree
        assert request.linearized is not None
        assert request.linearized.table == linearize_accessibility_tree(xml)
    assert trees["native"] == linearize_accessibility_tree(xml)
    frame = PRESETS["claude"].frame_for(1920, 1080)
    width, height = frame.model_point(1920, 1000)
    assert trees["claude"] == (
        f"{linearize_accessibility_tree(xml).splitlines()[0]}\n"
        f"text\t\t{_DOCUMENT}\t\t\t(0, 0)\t({width}, {height})"
    )


@given(
    st.lists(st.tuples(row_like_texts, row_like_texts, kept_positions, kept_sizes), max_size=6),
    preset_names,
    screen_sizes,
)
def test_scaling_changes_only_the_rows_coordinate_columns(
    nodes: list[tuple[str, str, str, str]], preset: str, screen: tuple[int, int]
) -> None:
    """Whatever tabs, newlines and pairs the cells hold, each row's prefix and the header stay
    byte for byte; each row's position and size are what a plain twin row maps them to."""
    frame = PRESETS[preset].frame_for(*screen)
    named = [("n" + name, text, position, size) for name, text, position, size in nodes]
    xml = _text_tree(named)
    table = linearize_table(xml)
    assert table.text == linearize_accessibility_tree(xml)
    # The twin has plain cells, where reading the text line by line is exact (and was before).
    twin_xml = _text_tree([("n", "t", position, size) for _, _, position, size in named])
    twin = reframe_table(linearize_accessibility_tree(twin_xml), frame)
    assert reframe_linearized(linearize_table(twin_xml), frame) == twin
    twin_rows = twin.split("\n")[1:]
    expected = [table.text.split("\n", 1)[0]]
    for (name, text, _, _), twin_row in zip(named, twin_rows, strict=True):
        cell = '"' + text.replace('"', '""') + '"' if '"' in text else text or '""'
        coordinates = twin_row.split("\t", 5)[5]
        expected.append(f"text\t{name}\t{cell}\t\t\t{coordinates}")
    assert reframe_linearized(table, frame) == "\n".join(expected)


def test_a_pair_written_across_lines_is_still_the_nodes_geometry() -> None:
    """A position or size with a newline or tab inside (kept: `parse_pair` allows the spacing)
    is mapped too; read line by line it was left in screen pixels."""
    xml = _text_tree([("n", "t", "(100,\n40)", "(60,\t20)")])
    assert reframe_linearized(linearize_table(xml), HALF).split("\n")[1:] == [
        "text\tn\tt\t\t\t(50, 20)\t(30, 10)"
    ]


def test_a_linearized_tree_built_without_its_geometry_finds_it_again() -> None:
    """`LinearizedTree.in_frame` maps per node whether or not the geometry came along."""
    xml = _text_tree([("", _DOCUMENT, "(100, 40)", "(60, 20)")])
    whole = LinearizedTree.of(xml, "ubuntu", ubuntu_attributes=False)
    by_hand = LinearizedTree(xml, "ubuntu", False, whole.table)
    assert whole.geometry is not None
    assert by_hand.in_frame(HALF) == whole.in_frame(HALF)
    assert whole.in_frame(HALF).endswith(f"{_DOCUMENT}\t\t\t(50, 20)\t(30, 10)")
    assert whole.in_frame(None) is whole.table


def test_every_literal_of_a_long_reply_is_mapped() -> None:
    """All 40,000 literals are replaced, in one pass over the code (it once rebuilt the text per edit)."""
    code = "pyautogui.click(100, 200)\n" * 20_000
    assert reframe_code(code, HALF) == "pyautogui.click(200, 400)\n" * 20_000


def test_set_of_marks_tags_are_screen_pixels_and_not_mapped_twice() -> None:
    """With a scaled som screenshot, literals are mapped once and tag_N centres keep screen pixels."""
    obs = fixture_observation("chromium_settings_form")
    config = AgentConfig(observation_type="som", action_space="pyautogui", scaling="claude")
    native = AgentConfig(observation_type="som", action_space="pyautogui")
    request = prepare_step(config, AgentState(), "task", obs)
    assert request.frame is not None
    reply = "```python\npyautogui.click(tag_1)\npyautogui.click(714, 402)\n```"
    _, actions = complete_step(config, AgentState(), request, reply)
    _, native_actions = complete_step(
        native, AgentState(), prepare_step(native, AgentState(), "task", obs), reply
    )
    assert actions is not None
    assert native_actions is not None
    prefix = actions[0].split("pyautogui")[0]
    assert native_actions[0].startswith(prefix)
    assert actions[0].endswith(
        f"pyautogui.click(tag_1)\npyautogui.click({request.frame.to_screen(714, 402)[0]}, {request.frame.to_screen(714, 402)[1]})"
    )


def test_a_reply_frame_overrides_the_requests_for_parsing_only() -> None:
    """`complete_step(..., reply_frame=...)` reads the reply in that frame (an identity frame:
    screen pixels) and still stores the request's observation and its frame."""
    obs = fixture_observation("mousepad_notes")
    reply = "```python\npyautogui.click(100, 50)\n```"
    scaled = AgentConfig(observation_type="screenshot", action_space="pyautogui", scaling="claude")
    request = prepare_step(scaled, AgentState(), "task", obs)
    assert request.frame is not None
    unscaled = CoordinateFrame.identity(1920, 1080)
    state, actions = complete_step(scaled, AgentState(), request, reply, reply_frame=unscaled)
    assert actions == ["pyautogui.click(100, 50)"]
    assert state.observations[0].frame == request.frame
    native = AgentConfig(observation_type="screenshot", action_space="pyautogui")
    request = prepare_step(native, AgentState(), "task", obs)
    _, actions = complete_step(native, AgentState(), request, reply, reply_frame=HALF)
    assert actions == ["pyautogui.click(200, 100)"]


def test_the_frame_round_trips_through_the_state_and_only_when_scaled() -> None:
    """AgentState JSON carries a turn's frame only when it is set, and reads it back equal."""
    plain = AgentState([ObservationRecord(None, "t")], [None], [""])
    assert "frame" not in plain.to_json()["observations"][0]
    scaled = AgentState([ObservationRecord("AAAA", None, HALF)], [None], [""])
    assert AgentState.from_json(scaled.to_json()) == scaled


def test_the_trajectory_entry_carries_the_frame_only_when_not_identity(tmp_path: Path) -> None:
    """A scaled step's line holds its frame; an unscaled one's line has no frame key."""
    recorder = TrajectoryRecorder(tmp_path)
    response = ModelResponse(text="DONE", model="m")
    for frame in (None, CoordinateFrame.identity(10, 10), HALF):
        recorder.record(
            step_record(
                instruction="i",
                config=AgentConfig(),
                response=response,
                actions=("DONE",),
                latency=0.0,
                frame=frame,
            )
        )
    lines = (tmp_path / "trajectory.jsonl").read_text(encoding="utf-8").splitlines()
    assert ['"frame"' in line for line in lines] == [False, False, True]
    assert [e.frame for e in read_trajectory(tmp_path)] == [None, None, HALF]


@given(any_text)
def test_reframing_any_reply_never_raises(text: str) -> None:
    """Whatever the reply holds, mapping its code gives a string and raises nothing."""
    assert isinstance(reframe_code(text, HALF), str)
    assert isinstance(reframe_code(f"pyautogui.click({text})", HALF), str)


def test_numbers_past_any_pixel_are_left_as_written() -> None:
    """Literals too large for a float, or overflowing once scaled, stay as the model wrote them."""
    huge = "9" * 400
    code = f"pyautogui.click({huge}, 5)\npyautogui.moveTo(1e308, 2)"
    assert reframe_code(code, HALF) == f"pyautogui.click({huge}, 10)\npyautogui.moveTo(1e308, 4)"
    row = f"a\t({huge}, 1)\t(1, 1)"
    assert reframe_table(row, HALF) == row


@pytest.mark.parametrize(
    "bad",
    [
        {"screen_width": "wide"},
        {"grid": "hex"},
        [1, 2],
        {**HALF.to_json(), "image_width": -3},
    ],
)
def test_a_malformed_frame_in_saved_state_or_trajectory_is_a_typed_error(
    bad: object, tmp_path: Path
) -> None:
    """A bad frame reads as a StateError (state) or TrajectoryError naming the line, never a crash."""
    state = AgentState([ObservationRecord("AAAA", None, HALF)], [None], [""]).to_json()
    state["observations"][0]["frame"] = bad
    with pytest.raises(StateError, match="frame"):
        AgentState.from_json(state)
    (tmp_path / "trajectory.jsonl").write_text(
        json.dumps({"response": "DONE", "frame": bad}) + "\n", encoding="utf-8"
    )
    with pytest.raises(TrajectoryError, match="frame"):
        read_trajectory(tmp_path)


@pytest.mark.parametrize(
    "code",
    [
        "pyautogui.typewrite('C:\\dir\\d'); pyautogui.click(10, 20)",
        "pyautogui.typewrite(r'\\d+'); pyautogui.click(10, 20)",
        "pyautogui.typewrite('a\\\\d\\q\\8'); pyautogui.click(10, 20)",
        "x = b'\\u00e9'; pyautogui.click(10, 20)",
        "x = b'\\N{DASH}'; pyautogui.click(10, 20)",
        "x = f'\\N{EM DASH}'; pyautogui.click(10, 20)",
        "x = '\\777'; pyautogui.click(10, 20)",
        "pyautogui.click(10, 20) if 1else None",
        "x = [0x1for i in range(1)]; pyautogui.click(10, 20)",
        "x = 1.5or 1.e5if 1else 1jand 2; pyautogui.click(10, 20)",
        "x = 'é'; y = 1if 1else 2; pyautogui.click(10, 20); z = 0b1in []; pyautogui.click(10, 20)",
    ],
)
def test_mapping_does_not_depend_on_the_warning_filters(code: str) -> None:
    """What Python's parser warns of (escapes a str or bytes literal does not know, an octal
    escape past 0o377, a number run into a keyword) leaves the mapping as it is where
    warnings are errors (`python -W error`): once, those replies were left unmapped there."""
    expected = code.replace("click(10, 20)", "click(20, 40)")
    assert reframe_code(code, HALF) == expected
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reframe_code(code, HALF) == expected


@given(warning_prone_code())
def test_no_warning_filter_changes_the_mapping(code: str) -> None:
    """Under any filters the output is the same, and the click is mapped wherever the code
    parses at all (code Python refuses may be mapped too: it never runs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quiet = reframe_code(code, HALF)
        try:
            ast.parse(code)
        except (SyntaxError, ValueError):
            parses = False
        else:
            parses = True
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert reframe_code(code, HALF) == quiet
    assert "pyautogui.click(20, 40)" in quiet or not parses


@given(any_text | warning_prone_code())
def test_what_the_parser_reads_warns_of_nothing_and_keeps_every_offset(text: str) -> None:
    """The code parsed is the text with escapes made plain in place and a space before each
    keyword a number ran into: every other character stands where it stood, and the parser
    warns of none of it."""
    plain, spaces = _neutralised(text)
    assert len(plain) == len(text) + len(spaces)
    added = [at + index for index, at in enumerate(spaces)]
    assert all(plain[at] == " " for at in added)
    kept = "".join(c for i, c in enumerate(plain) if i not in set(added))
    for a, b in zip(text, kept, strict=True):
        assert a == b or b == "_"
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with contextlib.suppress(SyntaxError, ValueError):
            ast.parse(plain)
    assert not seen, [str(w.message) for w in seen]
