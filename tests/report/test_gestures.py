"""A step's actions as marks on its screenshot: clicks, drags, scrolls, typing, keys and tags."""

from __future__ import annotations

import pytest

from adapters.report.gestures import MAX_CODE_CHARS, MAX_MARKS, Mark, step_marks, used_tags


def _shown(marks: tuple[Mark, ...]) -> list[tuple[str, object, object]]:
    return [(m.kind, m.at, m.number) for m in marks]


def test_several_clicks_are_numbered_in_order() -> None:
    """Each click of a reply is a mark at its point, numbered when there are several."""
    code = "import pyautogui\npyautogui.click(10, 20)\npyautogui.doubleClick(x=30, y=40)"
    assert _shown(step_marks([code])) == [
        ("click", (10.0, 20.0), 1),
        ("double", (30.0, 40.0), 2),
    ]


def test_a_single_click_has_no_number() -> None:
    """One mark with a point is not numbered."""
    assert _shown(step_marks(["pyautogui.rightClick(5, 6)"])) == [("right", (5.0, 6.0), None)]


def test_buttons_and_click_counts_name_the_kind() -> None:
    """`button=` and `clicks=` make a right, middle, double or triple click."""
    code = (
        "pyautogui.click(1, 1, button='right')\npyautogui.click(2, 2, button='middle')\n"
        "pyautogui.click(3, 3, clicks=2)\npyautogui.tripleClick(4, 4)"
    )
    assert [m.kind for m in step_marks([code])] == ["right", "middle", "double", "triple"]


def test_drags_draw_an_arrow_from_where_the_pointer_was() -> None:
    """dragTo starts where the pointer was; mouseDown, moveTo, mouseUp is a drag too."""
    code = (
        "pyautogui.moveTo(100, 100)\npyautogui.dragTo(300, 200)\n"
        "pyautogui.mouseDown(400, 400)\npyautogui.moveTo(500, 450)\npyautogui.mouseUp()\n"
        "pyautogui.dragRel(10, -10)"
    )
    marks = step_marks([code])
    drags = [(m.start, m.at) for m in marks if m.kind == "drag"]
    assert drags == [
        ((100.0, 100.0), (300.0, 200.0)),
        ((400.0, 400.0), (500.0, 450.0)),
        ((500.0, 450.0), (510.0, 440.0)),
    ]


def test_scrolls_say_their_direction_and_amount() -> None:
    """scroll's sign is its direction (up when positive), hscroll's right or left."""
    code = "pyautogui.scroll(-5, x=50, y=60)\npyautogui.hscroll(3)\npyautogui.scroll(2)"
    marks = step_marks([code])
    assert [m.label for m in marks] == ["scroll down 5", "scroll right 3", "scroll up 2"]
    assert marks[0].at == (50.0, 60.0)


def test_typing_and_keys_are_labels() -> None:
    """Typed text and key presses are labels, without a point."""
    code = (
        "pyautogui.typewrite('hello')\npyautogui.write(message='x' * 3)\n"
        "pyautogui.hotkey('ctrl', 'shift', 't')\npyautogui.press(['tab', 'enter'])\n"
        "pyautogui.keyDown('shift')\npyautogui.keyUp('shift')"
    )
    assert [(m.kind, m.label, m.at) for m in step_marks([code])] == [
        ("type", 'type "hello"', None),
        ("type", "type (text not known)", None),
        ("key", "keys ctrl+shift+t", None),
        ("key", "press tab, enter", None),
        ("key", "hold shift", None),
        ("key", "release shift", None),
    ]


def test_set_of_marks_tags_come_from_the_code_or_the_masks() -> None:
    """A `tag_N` the code assigns, or box N's centre, is the point; the tag is kept."""
    code = (
        "tag_2 = (15, 25)\npyautogui.click(tag_2)\npyautogui.click(tag_3)\npyautogui.click(tag_9)"
    )
    marks = step_marks([code], masks=[(0, 0, 10, 10), (10, 20, 10, 10), (100, 200, 40, 20)])
    assert [(m.at, m.tag) for m in marks] == [((15.0, 25.0), 2), ((120.0, 210.0), 3), (None, None)]
    assert used_tags(marks) == {2, 3}
    assert marks[2].label == "click (point not known here)"


def test_computed_coordinates_are_listed_without_a_point() -> None:
    """A coordinate that is an expression cannot be known before the code runs."""
    (mark,) = step_marks(["pyautogui.click(x + 10, 20)"])
    assert (mark.kind, mark.at) == ("click", None)


def test_computer_13_actions() -> None:
    """computer_13 objects (flat or OSWorld's nested form) are read as the code is."""
    actions = [
        {"action_type": "MOVE_TO", "x": 10, "y": 10},
        {"action_type": "CLICK", "x": 20, "y": 30, "button": "right"},
        {"action_type": "DRAG_TO", "parameters": {"x": 50, "y": 60}},
        {"action_type": "SCROLL", "dx": 0, "dy": -3},
        {"action_type": "TYPING", "text": "abc"},
        {"action_type": "HOTKEY", "keys": ["ctrl", "s"]},
        {"action_type": "CLICK", "x": 1, "y": 1, "num_clicks": 2},
        {"action_type": "WAIT"},
        {"action_type": "TELEPORT"},
    ]
    marks = step_marks(actions)
    assert [m.label for m in marks] == [
        "move",
        "right-click",
        "drag",
        "scroll down 3",
        'type "abc"',
        "keys ctrl+s",
        "double-click",
        "WAIT",
        "unknown action 'TELEPORT'",
    ]
    assert marks[2].start == (20.0, 30.0)


@pytest.mark.parametrize(
    ("action", "label"),
    [
        ("pyautogui.click(", "code that does not parse as Python: not drawn"),
        ("(" * 500 + ")" * 500, "code that does not parse as Python: not drawn"),
        ("x" * (MAX_CODE_CHARS + 1), f"code of {MAX_CODE_CHARS + 1:,} characters: not drawn"),
        (42, "an action of type int"),
        ("pyautogui.click(1e400, 5)", "click (point not known here)"),
    ],
)
def test_hostile_actions_give_a_note_not_an_error(action: object, label: str) -> None:
    """Code that does not parse, a huge reply, a non-action or an infinite coordinate is noted."""
    assert [m.label for m in step_marks([action])] == [label]


def test_a_reply_of_many_clicks_draws_the_first_ones() -> None:
    """At most `MAX_MARKS` marks are drawn for a step."""
    code = "\n".join(f"pyautogui.click({n}, {n})" for n in range(MAX_MARKS * 3))
    marks = step_marks([code])
    assert len(marks) == MAX_MARKS
    assert marks[-1].number == MAX_MARKS


def test_special_words_and_no_actions() -> None:
    """WAIT, DONE and FAIL are labels; no actions (or unparsable ones) are no marks."""
    assert [m.label for m in step_marks(["DONE", " FAIL "])] == ["DONE", "FAIL"]
    assert step_marks(None) == step_marks([]) == ()
