"""Every hypothesis strategy of the test suite, in one place.

Sections are grouped by the concern they feed; add new strategies to the
section of the module they exercise.
"""

from __future__ import annotations

from hypothesis import strategies as st

from osharm_core import AgentConfig, AgentState, ObservationRecord

# --- text -----------------------------------------------------------------

#: Any text, including control characters, surrogate-free odd Unicode and fences.
any_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=400) | st.text(
    alphabet="`'\";\n\t #\\abcDONEWAITFAILpyautogui().,=", max_size=200
)

#: Text heavy in what a terminal acts on or a reader misreads: C0 and C1 controls, DEL, line
#: and paragraph separators, bidirectional controls, lone surrogates, among any other code point.
terminal_text = st.text(
    alphabet=st.sampled_from(
        '\x00\x07\t\n\r\x1b\x7f\x85\x9b\x9f\u061c\u200e\u200f\u2028\u2029\u202a\u202e\u2066\u2069\ud800\udfffa[];\\"é'
    )
    | st.characters(codec=None, categories=None),
    max_size=60,
)

#: JSON values (finite numbers) whose strings and keys are `terminal_text`.
terminal_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | terminal_text,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(terminal_text, inner, max_size=4),
    max_leaves=12,
)

# --- agent state and steps (tests/test_step.py) ---------------------------

_reply_actions = st.none() | st.lists(
    st.sampled_from(["WAIT", "DONE", "pyautogui.click(1, 2)"])
    | st.fixed_dictionaries({"action_type": st.just("CLICK")}),
    max_size=3,
).map(tuple)


@st.composite
def agent_configs(draw: st.DrawFn) -> AgentConfig:
    """Valid agent configurations, som only with pyautogui."""
    kind = draw(st.sampled_from(["screenshot", "a11y_tree", "screenshot_a11y_tree", "som"]))
    space = "pyautogui" if kind == "som" else draw(st.sampled_from(["pyautogui", "computer_13"]))
    return AgentConfig(
        observation_type=kind,
        action_space=space,
        max_trajectory_length=draw(st.integers(0, 5)),
        platform=draw(st.sampled_from(["ubuntu", "windows"])),
    )


@st.composite
def agent_states(draw: st.DrawFn) -> AgentState:
    """Trajectories of up to eight turns with arbitrary stored replies and actions."""
    n = draw(st.integers(0, 8))
    records = [
        ObservationRecord(draw(st.sampled_from([None, "iVBORw0KGgo="])), draw(st.text(max_size=20)))
        for _ in range(n)
    ]
    actions = [draw(_reply_actions) for _ in range(n)]
    thoughts = [draw(st.text(max_size=40)) for _ in range(n)]
    return AgentState(records, actions, thoughts)


#: Keys of a JSON-ish object handed over from Python: strings, and anything else hashable.
hostile_keys = st.one_of(
    st.text(max_size=8),
    st.integers(),
    st.none(),
    st.booleans(),
    st.floats(),
    st.binary(max_size=4),
    st.tuples(st.integers(), st.text(max_size=3)),
    st.frozensets(st.integers(), max_size=2),
)


# --- model providers and computer-use actions (tests/adapters/test_anthropic.py, ...) ---

from osharm_core import ImagePart, Message, TextPart  # noqa: E402  (kept inside this section)

_PNG_1x1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
_JPEG_HEAD = "/9j/4AAQSkZJRgABAQAAAQABAAD"

_provider_parts = st.one_of(
    st.builds(TextPart, st.sampled_from(["", " ", "\n"]) | st.text(max_size=30)),
    st.builds(ImagePart, st.sampled_from([_PNG_1x1, _JPEG_HEAD])),
)


@st.composite
def provider_messages(draw: st.DrawFn) -> tuple[Message, ...]:
    """Conversations of any shape: optional system, any role order, empty and image parts."""
    roles = st.sampled_from(["system", "user", "assistant"])
    return tuple(
        Message(draw(roles), tuple(draw(st.lists(_provider_parts, max_size=4))))
        for _ in range(draw(st.integers(0, 7)))
    )


#: Coordinates on a 1920x1080 display, as integers or (rarely sent) floats.
_cua_x = st.integers(0, 1919) | st.floats(0, 1919, allow_nan=False)
_cua_y = st.integers(0, 1079) | st.floats(0, 1079, allow_nan=False)
_point = st.fixed_dictionaries({"x": _cua_x, "y": _cua_y})
_cua_key = st.sampled_from(
    ["CTRL", "ALT", "SHIFT", "ENTER", "ESC", "SPACE", "TAB", "BACKSPACE", "DELETE", "ARROWLEFT",
     "ARROWRIGHT", "ARROWUP", "ARROWDOWN", "CMD", "SUPER", "META", "PAGEUP", "PAGEDOWN", "HOME",
     "END", "F5", "a", "A", "z", "1", "/", "-", "+", "ctrl", "Enter"]
)  # fmt: skip


def _cua(kind: str, **fields: st.SearchStrategy[object]) -> st.SearchStrategy[dict[str, object]]:
    return st.fixed_dictionaries({"type": st.just(kind), **fields})


#: Every well-formed computer-use-preview action (the shapes the Responses API documents).
cua_actions = st.one_of(
    _cua(
        "click",
        x=_cua_x,
        y=_cua_y,
        button=st.sampled_from(["left", "right", "wheel", "middle", "back", "forward"]),
    ),
    _cua("double_click", x=_cua_x, y=_cua_y),
    _cua("move", x=_cua_x, y=_cua_y),
    _cua("drag", path=st.lists(_point, min_size=1, max_size=5)),
    _cua("keypress", keys=st.lists(_cua_key, min_size=1, max_size=4)),
    _cua(
        "scroll",
        x=_cua_x,
        y=_cua_y,
        scroll_x=st.integers(-2000, 2000),
        scroll_y=st.integers(-2000, 2000),
    ),
    _cua("type", text=any_text),
    _cua("wait"),
    _cua("screenshot"),
)

_json_leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10)

#: Anything a model might put in a computer_call's `action` slot, well-formed or not.
cua_anything = cua_actions | st.dictionaries(
    st.sampled_from(["type", "x", "y", "button", "keys", "path", "text", "scroll_x", "scroll_y"]),
    st.recursive(_json_leaf, lambda inner: st.lists(inner, max_size=3), max_leaves=5)
    | st.sampled_from(["click", "drag", "keypress", "scroll", "type", "zoom"]),
    max_size=6,
)

_finite_json_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)
_check_field = st.recursive(
    _finite_json_leaf, lambda inner: st.lists(inner, max_size=2), max_leaves=3
) | st.text(max_size=12)

#: What a server might send as a computer_call's `pending_safety_checks`: a well-formed list,
#: checks with ill-typed or missing fields, non-objects, one object in place of the list.
safety_check_values = st.recursive(
    _finite_json_leaf
    | st.fixed_dictionaries(
        {},
        optional={"id": _check_field, "code": _check_field, "message": _check_field},
    ),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)

# --- adapters: engine, retries, registry --------------------------------------

#: HTTP statuses a model server can fail with (4xx and 5xx, the usual ones weighted in).
http_error_statuses = st.sampled_from(
    [400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 504, 529]
) | st.integers(400, 599)

#: Retry-After header values: delta seconds (int or float text), HTTP dates, or junk.
retry_after_values = (
    st.integers(0, 100_000).map(str)
    | st.floats(0, 1e6, allow_nan=False).map(repr)
    | st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT"))
    | st.text(max_size=30)
)


# --- facade: trajectories (tests/facade/test_replay.py) ----------------------


@st.composite
def trajectory_entries(draw: st.DrawFn) -> object:
    """Arbitrary trajectory lines as `adapters.trajectories.jsonl.TrajectoryEntry` values."""
    from adapters.contract import Usage
    from adapters.trajectories.jsonl import TrajectoryEntry
    from osharm_core import Continuation, CoordinateFrame

    small = st.integers(0, 10_000)
    side = st.integers(1, 4000)
    frame = st.none() | st.builds(
        CoordinateFrame,
        screen_width=side,
        screen_height=side,
        image_width=side,
        image_height=side,
        grid=st.sampled_from(["pixels", "rel1000"]),
    )
    ints_or_none = st.none() | small
    action = st.text(max_size=30) | st.fixed_dictionaries(
        {"action_type": st.sampled_from(["CLICK", "TYPING", "DONE"])},
        optional={"x": small, "text": st.text(max_size=10)},
    )
    box = st.tuples(small, small, small, small)
    check = st.tuples(st.text(max_size=8), st.text(max_size=8), st.text(max_size=20))
    return TrajectoryEntry(
        step=draw(st.integers(1, 1000)),
        time=draw(st.text(max_size=30)),
        instruction=draw(st.text(max_size=60)),
        model=draw(st.text(max_size=20)),
        response_model=draw(st.text(max_size=20)),
        observation_type=draw(st.sampled_from(["screenshot", "a11y_tree", "som"])),
        action_space=draw(st.sampled_from(["pyautogui", "computer_13"])),
        platform=draw(st.sampled_from(["ubuntu", "windows"])),
        response=draw(st.text(max_size=60) | st.sampled_from(["DONE", "```python\nx()\n```"])),
        actions=draw(st.none() | st.lists(action, max_size=3).map(tuple)),
        usage=Usage(
            input_tokens=draw(ints_or_none),
            output_tokens=draw(ints_or_none),
            total_tokens=draw(ints_or_none),
        ),
        latency=draw(st.none() | st.floats(0, 1e4, allow_nan=False)),
        tries=draw(st.integers(1, 10)),
        context_fallback=draw(st.booleans()),
        screenshot=draw(st.none() | st.just("step_0001.png")),
        som_screenshot=draw(st.none() | st.just("step_0001_som.png")),
        accessibility_tree=draw(st.none() | st.just("step_0001.xml")),
        masks=draw(st.none() | st.lists(box, max_size=5).map(tuple)),
        continuation=draw(
            st.none()
            | st.builds(
                Continuation,
                st.text(max_size=12),
                st.lists(st.text(max_size=8), max_size=3).map(tuple),
                st.lists(check, max_size=2).map(tuple),
            )
        ),
        frame=draw(frame.filter(lambda f: f is None or not f.is_identity)),
        reply_frame=draw(frame),
    )


#: Names a result folder's step files could have, odd ones included: Unicode digits (`'²'.isdigit()`
#: is true, `int('²')` fails), glob characters, huge step numbers, no number at all.
_step_numbers = st.sampled_from(["0", "1", "2", "10", "0002", "99999999999", "²", "٣", "", "x"])
_stamps = st.sampled_from(["20250101@100000", "20250101@100500", "zz", "**", "[", "a?b", "_", ""])
result_folder_file_names = st.builds(
    lambda n, s, ext: f"step_{n}_{s}{ext}",
    _step_numbers,
    _stamps,
    st.sampled_from([".png", ".xml", ".txt"]),
) | st.sampled_from(["step_0.png", "step_0.xml", "**", "step_²_x.png"])
#: What a hand-edited better_log.json may give as a step's `screenshot_file`: the names above,
#: and names that no file can have (NUL, a lone surrogate, a path, 300 characters, many digits).
recorded_screenshot_names = (
    result_folder_file_names
    | st.sampled_from(
        [
            "step_1\x00.png",
            "step_\ud800_x.png",
            "../step_0.png",
            "/etc/hostname",
            "x" * 300 + ".png",
            "step_" + "9" * 5000 + "_x.png",
        ]
    )
    | st.text(max_size=20)
)


# --- parsing, computer_13 vocabulary, prompts (tests/test_parsing.py, test_vocabulary.py) ---

from osharm_core.vocabulary import (  # noqa: E402  (kept inside this section)
    ACTIONS,
    KEYBOARD_KEYS,
    SPECIAL_WORDS,
    ActionSpec,
    ParamSpec,
)

#: Text with no backticks (a fence inside a block would end it early).
fence_free_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="`"), max_size=40
)


def _c13_value(param: ParamSpec, screen: tuple[int, int]) -> st.SearchStrategy[object]:
    if param.kind == "number":
        high = screen[0] if param.screen_axis == "x" else screen[1]
        return st.integers(0, high) | st.floats(0, high, allow_nan=False)
    if param.kind == "integer":
        return st.sampled_from(param.choices) if param.choices else st.integers(-(10**6), 10**6)
    if param.kind == "choice":
        return st.sampled_from(param.choices)
    if param.kind == "key":
        return st.sampled_from(KEYBOARD_KEYS)
    if param.kind == "keys":
        return st.lists(st.sampled_from(KEYBOARD_KEYS), min_size=1, max_size=4)
    return fence_free_text


@st.composite
def _c13_action(
    draw: st.DrawFn, spec: ActionSpec, screen: tuple[int, int] = (1920, 1080)
) -> dict[str, object]:
    action: dict[str, object] = {"action_type": spec.name}
    grouped = {name for group in spec.together for name in group}
    for group in spec.together:
        if draw(st.booleans()):
            for name in group:
                param = spec.param(name)
                assert param is not None
                action[name] = draw(_c13_value(param, screen))
    for param in spec.params:
        if param.name not in grouped and (param.required or draw(st.booleans())):
            action[param.name] = draw(_c13_value(param, screen))
    return action


#: Valid computer_13 actions of every type, the specials as a word or as a dict.
computer_13_actions = (
    st.one_of(*(_c13_action(spec) for spec in ACTIONS))
    | st.sampled_from(SPECIAL_WORDS)
    | st.sampled_from(SPECIAL_WORDS).map(lambda w: {"action_type": w})
)

_py_string_text = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="`", exclude_categories=["Cs"]),
    max_size=20,
)
_triple_text = st.text(alphabet="ab ;#'\n=()", max_size=20)
_comment_text = st.text(
    alphabet=st.characters(exclude_characters="`", exclude_categories=["Cc", "Cs", "Zl", "Zp"]),
    max_size=20,
)
_pixel = st.integers(0, 1920).map(str)

#: One pyautogui statement (no comment, no top-level `;`); strings may hold `;`, quotes, `#`.
pyautogui_statements = st.one_of(
    st.tuples(_pixel, _pixel).map(lambda p: f"pyautogui.click({p[0]}, {p[1]})"),
    _py_string_text.map(lambda t: f"pyautogui.write({t!r})"),
    st.lists(st.sampled_from(KEYBOARD_KEYS[90:]), min_size=1, max_size=3).map(
        lambda keys: "pyautogui.hotkey(" + ", ".join(map(repr, keys)) + ")"
    ),
    st.sampled_from(["time.sleep(0.5)", "import pyautogui", "import time"]),
    _triple_text.map(lambda t: f'note = """{t}"""'),
    _py_string_text.map(lambda t: f"pyautogui.write(r{t!r})"),
)
_simple_line = pyautogui_statements | _comment_text.map(lambda t: f"# {t}")


@st.composite
def pyautogui_code(draw: st.DrawFn) -> str:
    """Plausible pyautogui code with no top-level `;`, no backticks, no special-word lines.

    Strings and comments may hold `;`, `#` and quotes; loops add indented lines.
    """
    lines: list[str] = []
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.integers(0, 4)) == 0:
            lines.append("for _ in range(2):")
            lines.extend(
                "    " + line for line in draw(st.lists(_simple_line, min_size=1, max_size=3))
            )
        else:
            lines.append(draw(_simple_line))
    return "\n".join(lines)


#: What Python's parser warns of, the pieces of `warning_prone_code`: escapes str or bytes
#: literals do not know, octal escapes past 0o377, named escapes, numbers run into keywords.
_warning_escapes = st.sampled_from(
    [
        "\\d", "\\q", "\\8", "\\{", "\\ ", "\\é", "\\N", "\\N{BULLET}", "\\N{EM DASH}",
        "\\N{DASH}", "\\u00e9", "\\U0001F600", "\\x41", "\\777", "\\400", "\\377", "\\0",
        "\\\\", "a", "é", "{1}", "{{", "}}", "1if", "(5, 6)",
    ]
)  # fmt: skip
_string_prefixes = st.sampled_from(["", "b", "r", "rb", "f", "rf", "u", "Br", "fR", "F"])
_warning_numbers = st.sampled_from(
    ["1", "0x1f", "0x1", "0b1", "0o7", "1.5", "1e5", "1j", "1_0", ".5", "1.", "0", "1.e5", "0xA"]
)
_warning_statements = st.one_of(
    st.builds(
        lambda prefix, quote, parts: f"x = {prefix}{quote}{''.join(parts)}{quote}",
        _string_prefixes,
        st.sampled_from(["'", '"', "'''"]),
        st.lists(_warning_escapes, max_size=4),
    ),
    st.builds(
        str.format,
        st.sampled_from(
            [
                "x = {}and 1",
                "x = {}or 1",
                "x = ({}in [])",
                "x = ({}is 1)",
                "x = ({}not in [])",
                "x = 1 if {}else 2",
                "x = [{}for i in []]",
                "x = [i for i in [] if {}if 1 else 2]",
                "pyautogui.click(10, 20) if {}else None",
                "x = f'{{{}if 1 else 2}}'",
                "pyautogui.moveTo({}, 3)",
            ]
        ),
        _warning_numbers,
    ),
    st.just("pyautogui.click(10, 20)"),
)


@st.composite
def warning_prone_code(draw: st.DrawFn) -> str:
    """Statements Python's parser warns of (a SyntaxError where warnings are errors), on one
    line (`; `) or several, around a `pyautogui.click(10, 20)`."""
    before = draw(st.lists(_warning_statements, max_size=3))
    after = draw(st.lists(_warning_statements, max_size=2))
    joiner = draw(st.sampled_from(["; ", "\n"]))
    comment = draw(st.sampled_from(["", "  # C:\\dir\\1if \\N{x}"]))
    return joiner.join([*before, "pyautogui.click(10, 20)", *after]) + comment


@st.composite
def fenced_replies(draw: st.DrawFn) -> str:
    """Replies mixing prose, fences with and without tags, JSON, code and special words."""
    pieces = st.one_of(
        any_text,
        st.sampled_from(
            ["```", "```python\n", "```json\n", "```json ", "```DONE```", "\n```\n", ";", '"DONE"']
        ),
        st.sampled_from(SPECIAL_WORDS).map(lambda w: f"\n{w}\n"),
        pyautogui_code(),
        st.just('{"action_type": "CLICK", "x": 1, "y": 2}'),
        st.just('[{"action_type": "PRESS", "key": "enter"}]'),
    )
    return "".join(draw(st.lists(pieces, max_size=8)))


#: Whitespace of every kind the fence readers meet: ASCII, Unicode spaces, line breaks.
_FENCE_SPACE = st.sampled_from([" ", "\n", "\r\n", "\t", "\xa0", "\x0c", "\u2003", "\x85", "\x1c"])


@st.composite
def fence_heavy_replies(draw: st.DrawFn) -> str:
    """Replies dense in fences, `json` tags, whitespace of every kind and JSON actions, so
    blocks open, close and pair in every way a fence reader can take them."""
    pieces = st.one_of(
        _FENCE_SPACE,
        st.sampled_from(["```", "```json", "```JSON", "```python", "`", "json", "x", "{", '"']),
        st.sampled_from(SPECIAL_WORDS) | st.sampled_from(SPECIAL_WORDS).map(lambda w: f'"{w}"'),
        st.just('{"action_type": "CLICK", "x": 1, "y": 2}'),
        st.just('{"action_type": "TYPING", "text": "a ``` b"}'),
        st.just('[{"action_type": "PRESS", "key": "enter"}]'),
    )
    return "".join(draw(st.lists(pieces, max_size=14)))


# --- accessibility trees, trimming, set-of-marks (tests/test_accessibility.py, ...) ---

from lxml import etree as _etree  # noqa: E402  (kept inside this section)
from PIL import Image as _Image  # noqa: E402

A11Y_NS = {
    "ubuntu": "https://accessibility.ubuntu.example.org/ns/",
    "windows": "https://accessibility.windows.example.org/ns/",
}

#: Roles kept by every kind of tag rule, near misses, and roles never kept.
a11y_tags = st.sampled_from(
    [
        "push-button", "menu-item", "check-menu-item", "document-web", "documentary", "heading",
        "label", "scrollbar", "searchbox", "textbox", "link", "tabelement", "textfield",
        "textarea", "menu", "alert", "canvas", "check-box", "combo-box", "entry", "icon",
        "image", "paragraph", "scroll-bar", "section", "slider", "static", "table-cell",
        "terminal", "text", "netuiribbontab", "start", "uiimage", "panel", "frame", "filler",
        "menu-bar", "page-tab", "table-row", "Document", "items", "button-box", "unknown",
    ]
)  # fmt: skip

#: Characters XML 1.0 can carry (as text or escaped), odd ones included.
xml_chars = st.characters(
    codec="utf-8",
    exclude_categories=("Cs",),
    exclude_characters="".join(map(chr, [*range(0x09), 0x0B, 0x0C, *range(0x0E, 0x20)]))
    + "\ufffe\uffff",
)
xml_text = st.one_of(
    st.text(alphabet=xml_chars, max_size=12),
    st.sampled_from(['say "hi"', "tab\there", "line\nbreak", "cr\r\nlf", " ", "\u00a0", '"']),
)

#: Geometry strings: plain pairs, every strict-parse edge case, garbage and code.
a11y_pairs = st.one_of(
    st.tuples(st.integers(-3, 2000), st.integers(-3, 2000)).map(lambda p: f"({p[0]}, {p[1]})"),
    st.sampled_from(
        [
            "(-1, -1)", "(0, 0)", "(0, 7)", "(7, 0)", "(1.5, 2)", "(2, 0.5)", "(-0.0, 3)",
            "(-2147483648, 5)", "(5, 2147483647)", "(12,34)", "( 3 , 4 )", "(+5, 6)",
            "(0x10, 0b11)", "(1_000, 2e3)", "(1e999, 4)", "(1, 2, 3)", "(1,)", "1, 2",
            "", "garbage", "__import__('os')", "(nan, 1)", "(1j, 2)", "(01, 2)",
        ]
    ),
)  # fmt: skip

#: Geometry every kept node may have: non-negative positions, positive sizes, in the forms
#: the linearizer keeps (spacing, floats, hex).
kept_positions = st.one_of(
    st.tuples(st.integers(0, 5000), st.integers(0, 5000)).map(lambda p: f"({p[0]}, {p[1]})"),
    st.sampled_from(["(0, 0)", "(1.5, 2)", "( 3 , 4 )", "(12,34)", "(0x10, 1_000)", "(+5, 6)"]),
)
kept_sizes = st.one_of(
    st.tuples(st.integers(1, 5000), st.integers(1, 5000)).map(lambda p: f"({p[0]}, {p[1]})"),
    st.sampled_from(["(1, 1)", "(0.5, 2)", "( 30 , 40 )", "(60,20)", "(0x10, 2e3)"]),
)
#: Cell text that reads like table rows: pairs, tabs, newlines and quotes among other text
#: (an editor's or a terminal's contents).
row_like_texts = st.lists(
    st.one_of(
        xml_text,
        kept_positions,
        st.tuples(kept_positions, kept_sizes).map(lambda p: f"\t{p[0]}\t{p[1]}\n"),
        st.sampled_from(["\t", "\n", "\r\n", '"', "(1e999, 4)", "(nan, 1)", "(-1, -1)"]),
    ),
    max_size=10,
).map("".join)

_STATE_VALUES = st.sampled_from(["true"] * 8 + [None, "false", "True", ""])
_MOSTLY = st.sampled_from([True] * 4 + [False])
_OFTEN_PRESENT = {"name", "screencoord", "size"}


@st.composite
def a11y_trees(draw: st.DrawFn, platform: str = "ubuntu") -> str:
    """An accessibility tree as XML text: random roles, states, names, text and geometry.

    The states, names and geometry are biased so that a fair share of nodes is kept.
    """
    base = A11Y_NS[platform]
    nsmap = {
        "st": base + "state",
        "cp": base + "component",
        "val": base + "value",
        "attr": base + "attributes",
        "wattr": A11Y_NS["windows"] + "attributes",
        "cls": A11Y_NS["windows"] + "class",
    }
    nodes: list[_etree._Element] = []
    for index in range(draw(st.integers(1, 12))):
        tag = draw(a11y_tags)
        node = (
            _etree.Element(tag, nsmap=nsmap)
            if index == 0
            else _etree.SubElement(nodes[draw(st.integers(0, index - 1))], tag)
        )
        nodes.append(node)
        for state in ("showing", "visible", "enabled", "editable", "expandable", "checkable"):
            value = draw(_STATE_VALUES)
            if value is not None:
                node.set(f"{{{nsmap['st']}}}{state}", value)
        optional = {
            "name": xml_text,
            "image": st.sampled_from(["true", "false"]),
            f"{{{nsmap['cp']}}}screencoord": a11y_pairs,
            f"{{{nsmap['cp']}}}size": a11y_pairs,
            f"{{{nsmap['val']}}}value": xml_text,
            f"{{{nsmap['attr']}}}class": xml_text,
            f"{{{nsmap['attr']}}}description": xml_text,
            f"{{{nsmap['wattr']}}}class": xml_text,
            f"{{{nsmap['wattr']}}}description": xml_text,
            f"{{{nsmap['cls']}}}class": st.sampled_from(["EditWrapper", "XEditWrapper", "Pane"]),
        }
        for key, values in optional.items():
            local = key.rsplit("}", 1)[-1]
            if draw(_MOSTLY if local in _OFTEN_PRESENT else st.booleans()):
                node.set(key, draw(values))
        if draw(st.booleans()):
            node.text = draw(xml_text)
    return str(_etree.tostring(nodes[0], encoding="unicode"))


#: Text to trim: rows, multi-byte characters that tokens split, special-token text.
trim_texts = st.lists(
    st.one_of(
        st.text(alphabet=xml_chars, max_size=30),
        st.sampled_from(
            [
                "\n", "\npush-button\tOK", " ", "\t", "<|endoftext|>", "<|fim_prefix|>",
                "日本語のテキスト", "🧪🔥👩‍💻", "é", "\u200b", "   \n\n", "\"quoted\"", "ß" * 7,
                "\u0939\u093f\u0928\u094d\u0926\u0940",
            ]
        ),
    ),
    max_size=40,
).map("".join)  # fmt: skip

_MODE_VALUES = {
    "RGB": [(0, 0, 0), (255, 0, 0), (7, 7, 7)],
    "RGBA": [(0, 0, 0, 0), (0, 0, 0, 255), (255, 255, 255, 255)],
    "L": [0, 1, 200],
    "LA": [(0, 0), (0, 255), (9, 9)],
    "P": [0, 1, 2],
    "1": [0, 255],
    "I;16": [0, 1, 65535],
    "I": [0, -5, 70000],
    "F": [0.0, 0.5, -1.0],
}


@st.composite
def small_images(draw: st.DrawFn) -> _Image.Image:
    """A tiny image in any mode Pillow decodes PNGs to (and a few more), few distinct values."""
    mode = draw(st.sampled_from(sorted(_MODE_VALUES)))
    width, height = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    values = _MODE_VALUES[mode]
    choice = st.sampled_from(values[:1] if draw(st.booleans()) else values)
    image = _Image.new(mode, (width, height))
    image.putdata([draw(choice) for _ in range(width * height)])
    return image


@st.composite
def patchwork_images(draw: st.DrawFn, modes: tuple[str, ...] = tuple(_MODE_VALUES)) -> _Image.Image:
    """A small image in one of `modes`: a background with a few rectangles of other values,
    so both one-colour areas and mixed ones of every size are common."""
    mode = draw(st.sampled_from(sorted(modes)))
    values = _MODE_VALUES[mode]
    image = _Image.new(mode, (draw(st.integers(1, 70)), draw(st.integers(1, 50))), values[0])
    for _ in range(draw(st.integers(0, 4))):
        x, y = draw(st.integers(0, image.width - 1)), draw(st.integers(0, image.height - 1))
        w, h = draw(st.integers(1, 40)), draw(st.integers(1, 40))
        image.paste(
            draw(st.sampled_from(values)), (x, y, min(x + w, image.width), min(y + h, image.height))
        )
    return image


#: Boxes `(x, y, w, h)` over and around a patchwork image, as a tree gives them.
patchwork_boxes = st.tuples(
    st.integers(-10, 75), st.integers(-10, 55), st.integers(1, 80), st.integers(1, 60)
)


#: Crop boxes around a tiny image: inside, overlapping an edge, or wholly outside.
small_boxes = st.tuples(
    st.integers(-4, 12), st.integers(-4, 12), st.integers(1, 14), st.integers(1, 14)
).map(lambda b: (b[0], b[1], b[0] + b[2], b[1] + b[3]))


# --- hostile trees -------------------------------------------------------------------------

#: What may stand before a DOCTYPE: byte-order marks (also doubled), space, comments,
#: processing instructions and XML declarations.
_PROLOG_PIECES = st.sampled_from(
    [
        "\ufeff",
        "\ufeff\ufeff",
        " ",
        "\n\t",
        "<!-- a comment -->",
        "<?pi data?>",
        '<?xml version="1.0"?>',
        '<?xml version="1.0" encoding="UTF-8"?>',
    ]
)


@st.composite
def doctype_prefixes(draw: st.DrawFn) -> str:
    """Anything a document may open with before its DOCTYPE, well-formed or not."""
    return "".join(draw(st.lists(_PROLOG_PIECES, max_size=5)))


#: Every codec name Python knows, text encodings and bytes/text transforms alike.
CODEC_NAMES = st.sampled_from(
    sorted(
        {*__import__("encodings.aliases").aliases.aliases.values()}
        | {"base64", "rot13", "zlib", "hex", "uu", "bz2", "quopri", "idna", "punycode"}
        | {"no-such-codec", "utf-7", "unicode_escape", "raw_unicode_escape", "undefined"}
    )
)


def huge_numbers() -> st.SearchStrategy[str]:
    """Decimal integers from one digit to past Python's 4,300-digit conversion limit."""
    return st.integers(min_value=1, max_value=6000).map(lambda n: "9" * n)


# --- hostile replies -----------------------------------------------------------------------

#: The characters that steer the reply parsers: fences, quotes, braces, separators, escapes.
_STEERING = "`'\";#{}[]\n\\ :,"
_FRAGMENTS = st.sampled_from(
    [
        "```",
        "```python\n",
        "```json\n",
        "'''",
        '"""',
        "''';'''\n",
        '{"action_type": "CLICK", "x": 1, "y": 2}',
        '{"action_type": ',
        "[" * 40,
        "]" * 40,
        "{" * 40,
        "NaN",
        "Infinity",
        "1" * 5000,
        "1e999",
        "WAIT\n",
        "DONE",
        "FAIL\n",
        "pyautogui.click(tag_1); ",
        "\ud800",
        "\udfff",
    ]
)


#: WAIT / DONE / FAIL (any case) framed by `;` and whitespace, which the pyautogui parser
#: drops before it reads a whole reply as a special word (`DONE;`, `\n;FAIL ;`).
disguised_special_words = st.builds(
    lambda before, word, after: before + word + after,
    st.text(alphabet="; \t\n\r\x0b\x0c\x85\u2028\u3000", max_size=6),
    st.sampled_from(["WAIT", "DONE", "FAIL", "done", "Fail"]),
    st.text(alphabet="; \t\n\r\x0b\x0c\x85\u2028\u3000", max_size=6),
)


@st.composite
def hostile_replies(draw: st.DrawFn) -> str:
    """Model replies built from the pieces that steer the parsers, plus any characters at all
    (lone surrogates included), each piece possibly repeated many times."""
    pieces = draw(
        st.lists(
            st.one_of(
                _FRAGMENTS.flatmap(lambda f: st.integers(1, 60).map(lambda n: f * n)),
                st.text(alphabet=_STEERING, max_size=40),
                st.text(alphabet=st.characters(blacklist_categories=()), max_size=20),
            ),
            max_size=12,
        )
    )
    return "".join(pieces)


# --- stored actions (tests/test_immutability.py) ---------------------------------------

#: What JSON writes and reads back equal (a stored action may hold nothing else).
_finite_leaf = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10)
)

#: computer_13-shaped actions with arbitrary JSON inside: nested objects and lists.
json_actions = st.builds(
    lambda rest, kind: {"action_type": kind, **rest},
    st.dictionaries(
        st.text(max_size=8),
        st.recursive(
            _finite_leaf,
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=4,
    ),
    st.sampled_from(["CLICK", "HOTKEY", "TYPING", "DRAG_TO"]),
)

#: The actions of one turn, as a reply's parser gives them.
turn_actions = st.none() | st.lists(
    st.sampled_from(["WAIT", "DONE", "pyautogui.click(1, 2)"]) | json_actions, max_size=4
)

#: A turn's actions as a caller might hand them to `AgentState`: mostly right (lists or
#: tuples of code and objects), sometimes a bare string, a number, an object, or a list
#: holding something that is no action.
loose_turns = st.one_of(
    turn_actions,
    turn_actions.filter(lambda turn: turn is not None).map(tuple),
    st.text(max_size=6),
    st.integers(),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
    st.lists(
        st.sampled_from(["WAIT"]) | st.integers() | st.none() | st.lists(st.text(max_size=3)),
        min_size=1,
        max_size=3,
    ),
)
#: A turn's observation as a caller might hand it over: a record, or something else.
loose_records = st.one_of(
    st.builds(ObservationRecord, st.none() | st.text(max_size=5), st.none() | st.text(max_size=5)),
    st.dictionaries(st.sampled_from(["screenshot", "accessibility_tree"]), st.text(max_size=5)),
    st.none(),
    st.text(max_size=5),
)
#: A turn's thought as a caller might hand it over: text, or something else.
loose_thoughts = st.text(max_size=10) | st.integers() | st.none() | st.binary(max_size=4)
#: Continuation call ids and safety checks as lists or tuples, sometimes holding a non-string.
loose_call_ids = st.lists(st.text(max_size=5) | st.integers(), max_size=3) | st.lists(
    st.text(max_size=5), max_size=3
).map(tuple)
loose_safety_checks = st.lists(
    st.lists(st.text(max_size=4) | st.integers(), min_size=2, max_size=4)
    | st.tuples(st.text(max_size=4), st.text(max_size=4), st.text(max_size=4)),
    max_size=3,
)


# --- usage and cost (tests/adapters/test_accounting.py) ------------------------------

#: Token counts as providers report them: mostly sensible, sometimes missing or negative.
token_counts = st.none() | st.integers(0, 3_000_000) | st.integers(-5, -1)


def _usages(counts: st.SearchStrategy[int | None]) -> st.SearchStrategy[object]:
    """`adapters.contract.Usage` values with every count drawn from `counts`."""
    from adapters.contract import Usage

    return st.builds(
        Usage,
        input_tokens=counts,
        output_tokens=counts,
        total_tokens=counts,
        cached_input_tokens=counts,
        reasoning_tokens=counts,
    )


def usages() -> st.SearchStrategy[object]:
    """`adapters.contract.Usage` values, hostile ones included (missing, negative, cached > input)."""
    return _usages(token_counts)


#: Per-million-token prices: zero, tiny, ordinary and large.
prices_per_million = st.floats(0, 1000, allow_nan=False, allow_infinity=False)

#: Token counts no real reply holds (JSON allows any number of digits): near 2**53, past
#: what a float can hold, hugely negative; and any other integer.
hostile_token_counts = st.integers() | st.sampled_from(
    [2**53 - 1, 2**53, 10**308, 10**309, 10**400, -(10**400)]
)


def usage_blocks() -> st.SearchStrategy[dict[str, object]]:
    """Five values a reply's usage block may hold in its count fields (`a` to `e`): counts in
    and out of range, none, floats, booleans, strings."""
    value = (
        st.none()
        | hostile_token_counts
        | st.floats(allow_nan=False)
        | st.booleans()
        | st.text(max_size=5)
    )
    return st.fixed_dictionaries(dict.fromkeys("abcde", value))


def hostile_usages() -> st.SearchStrategy[object]:
    """`adapters.contract.Usage` values whose counts may be any integer at all (or None)."""
    return _usages(st.none() | hostile_token_counts)


# --- coordinate frames and scaling presets (tests/test_frames.py, tests/test_scaling.py) ---

from osharm_core.scaling import PRESETS  # noqa: E402  (kept inside this section)

#: Screen sizes from 800x600 to 5120x2880.
screen_sizes = st.tuples(st.integers(800, 5120), st.integers(600, 2880))
#: Every named scaling preset.
preset_names = st.sampled_from(sorted(PRESETS))
#: Every `AgentConfig.scaling` but "auto": the named presets and "max_pixels=N".
scaling_settings = preset_names | st.integers(10_000, 12_845_056).map(lambda n: f"max_pixels={n}")


@st.composite
def screen_points(draw: st.DrawFn, size: tuple[int, int]) -> tuple[int, int]:
    """A pixel on a screen of `size`."""
    return draw(st.integers(0, size[0] - 1)), draw(st.integers(0, size[1] - 1))


#: A bare call with two or three numeric literal arguments, named as after
#: `from pyautogui import *`: every pointer function pyautogui has, and some that take no point.
bare_pyautogui_calls = st.builds(
    lambda name, args: f"{name}({', '.join(map(str, args))})",
    st.sampled_from(
        [
            *("click", "leftClick", "doubleClick", "tripleClick", "rightClick", "middleClick"),
            *("moveTo", "dragTo", "mouseDown", "mouseUp", "scroll", "hscroll", "vscroll"),
            *("moveRel", "move", "dragRel", "drag", "write", "press", "sleep", "size"),
        ]
    ),
    st.lists(
        st.integers(-50, 6000) | st.floats(-50, 6000).map(lambda f: round(f, 2)),
        min_size=2,
        max_size=3,
    ),
)


# --- rate-limit headers (tests/adapters/test_limits.py) --------------------------------------

from datetime import UTC  # noqa: E402  (kept inside this section)

_RATE_LIMIT_NAMES = (
    "retry-after",
    "retry-after-ms",
    "date",
    "x-ratelimit-remaining-requests",
    "x-ratelimit-remaining-tokens",
    "x-ratelimit-reset-requests",
    "x-ratelimit-reset-tokens",
    "anthropic-ratelimit-requests-remaining",
    "anthropic-ratelimit-requests-reset",
    "anthropic-ratelimit-tokens-remaining",
    "anthropic-ratelimit-tokens-reset",
    "anthropic-ratelimit-input-tokens-remaining",
    "anthropic-ratelimit-output-tokens-reset",
)
_rate_limit_values = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats().map(str),
    st.sampled_from(["", "0", "-1", "nan", "inf", "-inf", "6m0s", "1e999", "9999h", "12ms"]),
    st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    st.datetimes().map(lambda d: d.strftime("%a, %d %b %Y %H:%M:%S GMT")),
    st.text(max_size=80),
)


@st.composite
def rate_limit_headers(draw: st.DrawFn) -> dict[str, str]:
    """Rate-limit headers with any value: numbers of any size and sign, durations, dates, garbage."""
    names = draw(st.lists(st.sampled_from(_RATE_LIMIT_NAMES), unique=True, max_size=8))
    return {name: draw(_rate_limit_values) for name in names}


# --- request bodies (tests/adapters/test_jsonbody.py) ----------------------------------------

_BASE64_TEXT = st.text("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=")
_LONG_TEXTS = st.one_of(
    # what screenshots look like on the wire, past the fast path's length
    st.builds(lambda a: "data:image/png;base64," + a * 200, _BASE64_TEXT.filter(bool)),
    # long strings that need escaping somewhere, or are not ASCII
    st.builds(lambda a, b: a * 1100 + b, st.text(min_size=1, max_size=3), st.text(max_size=5)),
    # the fast path's stand-in itself, and JSON look-alikes of it
    st.sampled_from(["\x00osharm-long-string\x00", '"\\u0000osharm-long-string\\u0000"']),
)
_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
    _LONG_TEXTS,
)


def request_bodies() -> st.SearchStrategy[object]:
    """JSON-able values shaped like request bodies: nested objects and arrays (tuples too), long strings."""
    return st.recursive(
        _JSON_SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4),
            st.lists(inner, max_size=4).map(tuple),
            st.dictionaries(st.text(max_size=8) | _LONG_TEXTS, inner, max_size=4),
        ),
        max_leaves=12,
    )


# --- VM server setup steps and computer_13 code (tests/facade/test_vm_setup.py) -------------

#: Valid computer_13 actions whose TYPING text is anything at all: quotes, backslashes,
#: newlines, backticks, control characters, odd Unicode.
vm_computer_13_actions = computer_13_actions | st.builds(
    lambda text: {"action_type": "TYPING", "text": text}, any_text
)

#: What a hostile reply puts in a computer_13 field OSWorld's controller writes into code
#: unquoted (`button='{button}'`, `x={x}`, ...): code that ends the call it sits in.
_injections = st.sampled_from(
    [
        "left'); __import__('os').system('id'); ('",
        "1); __import__('os').system('id'); (1",
        "__import__('os').getcwd()",
        "1e3",
        "",
    ]
) | st.text(alphabet="0123456789.'\");(_ ", max_size=20)


@st.composite
def hostile_computer_13_actions(draw: st.DrawFn) -> dict[str, object]:
    """A valid computer_13 action (a dict, specials left out) with, maybe, one field
    replaced by code or junk, an extra field, or its parameters nested as OSWorld's
    `{"action_type", "parameters"}` form."""
    action = dict(draw(st.one_of(*(_c13_action(spec) for spec in ACTIONS))))
    fields = [name for name in action if name != "action_type"]
    how = draw(st.sampled_from(["as is", "field", "extra", "nested"]))
    if how == "field" and fields:
        action[draw(st.sampled_from(fields))] = draw(_injections | request_bodies())
    elif how == "extra":
        action[draw(st.sampled_from(["button", "x", "y", "num_clicks", "dx", "parameters"]))] = (
            draw(_injections)
        )
    elif how == "nested":
        kind = action.pop("action_type")
        action = {"action_type": kind, "parameters": action}
    return action


#: JSON-shaped junk where a task's `config` list goes: lists of near-miss setup steps
#: (known, host-side and unknown types; right, wrong and missing parameters) and odd values.
_setup_types = st.sampled_from(
    ["launch", "execute", "command", "sleep", "open", "download", "activate_window",
     "close_window", "change_wallpaper", "execute_with_verification", "chrome_open_tabs",
     "proxy", "nonsense", ""]
)  # fmt: skip
_setup_params = st.dictionaries(
    st.sampled_from(
        ["command", "shell", "seconds", "path", "files", "window_name", "strict", "by_class",
         "until", "stdout", "verification", "max_wait_time", "url", "x"]
    ),
    request_bodies(),
    max_size=4,
)  # fmt: skip
_setup_step = st.one_of(
    st.fixed_dictionaries({"type": _setup_types, "parameters": _setup_params}),
    st.fixed_dictionaries({"type": _setup_types}),
    request_bodies(),
)
setup_configs = st.none() | st.lists(_setup_step, max_size=4) | request_bodies()

#: A host name label: ASCII letters, digits and dashes, some non-ASCII letters, an `xn--`
#: prefix (a punycode label, valid or not), from empty to past DNS's 63 characters.
_host_labels = st.text(st.sampled_from("ab9-_é\u00df\u4e2d"), max_size=70) | st.text(
    st.sampled_from("abz09-"), max_size=12
).map("xn--{}".format)
#: Download URLs whose host name may be anything IDNA refuses (tests/facade/test_vm_setup.py).
download_urls = st.builds(
    lambda scheme, labels, port: f"{scheme}://{'.'.join(labels)}{port}/f.docx",
    st.sampled_from(["http", "https"]),
    st.lists(_host_labels, min_size=1, max_size=4),
    st.sampled_from(["", ":8080"]),
)

#: Client passwords `check_password` takes, long enough to be redacted (4+ characters), made
#: of what JSON, Python's repr and the shell escape: quotes, backslashes, spaces, non-ASCII
#: letters and marks, and tabs (tests/facade/test_vm_secrets.py).
client_passwords = st.text(
    st.sampled_from("ab9 '\"\\$!%{}éß中©\t"), min_size=4, max_size=16
).filter(lambda text: text != "password")


# --- out-of-range HTTP dates (tests/adapters/test_retry.py, test_limits.py) ------------------

_huge = st.integers(0, 10**30).map(str)
#: RFC 1123-shaped dates whose year, day, time or zone offset may be far out of range.
hostile_http_dates = st.builds(
    lambda day, year, hour, zone: f"Wed, {day} Jan {year} {hour}:00:00 {zone}",
    st.sampled_from(["01", "31"]) | _huge,
    st.sampled_from(["2025", "0001", "9999"]) | _huge,
    st.sampled_from(["00", "23"]) | _huge,
    st.sampled_from(["GMT", "+0000", "-2359", "+2400"]) | _huge.map("+{}".format),
)

#: `Retry-After` values in seconds as a hostile server writes them: any float (NaN, infinities,
#: 1e999 overflowing to one), long digit runs, signs and padding, and plain junk.
hostile_delta_seconds = (
    st.floats().map(repr)
    | st.sampled_from(["inf", "-inf", "nan", "NaN", "1e999", "-1e999", "Infinity", " 12 ", "+3"])
    | st.integers(0, 10**400).map(str)
    | st.text(max_size=20)
)


# --- adapters: hostile numbers in native replies (tests/adapters/test_native_hostile.py) ---

#: JSON numbers a hostile reply may carry: ordinary ones, ints far too big for a float (json.loads
#: reads up to ~4,300 digits), and floats up to the largest finite one, of either sign.
hostile_json_numbers = (
    st.integers(-2000, 2000)
    | st.integers()
    | st.integers(-(10**4000), 10**4000)
    | st.floats(allow_nan=False, allow_infinity=False)
)


# --- prefixed model names and shared run budgets (tests/adapters/test_accounting.py) ---------

#: A model name part: lower-case words with digits, dots and dashes (no separator).
model_words = st.from_regex(r"[a-z][a-z0-9.\-]{0,20}", fullmatch=True)
#: The three scheme separators the registry accepts.
scheme_separators = st.sampled_from(["/", ":", "|"])
#: Concurrent agents sharing a run cap: (workers, tokens per step, run token cap).
shared_runs = st.tuples(st.integers(1, 8), st.integers(1, 60), st.integers(1, 400))


# --- rebuilt steps: the settings that shape the prompt (tests/facade/test_rebuild_settings.py) ---


@st.composite
def prompt_configs(draw: st.DrawFn) -> AgentConfig:
    """Agent configurations that differ from the defaults in what shapes the prompt
    (history length, tree budget, ubuntu attributes, set-of-marks test, client password)."""
    kind = draw(st.sampled_from(["screenshot_a11y_tree", "a11y_tree", "som"]))
    return AgentConfig(
        model="gpt-4o",
        action_space="pyautogui",
        observation_type=kind,
        platform="ubuntu",
        max_trajectory_length=draw(st.integers(0, 3)),
        a11y_tree_max_tokens=draw(st.sampled_from([40, 300, 10000])),
        ubuntu_attributes=draw(st.booleans()),
        som_test_original=draw(st.booleans()),
        client_password=draw(st.sampled_from(["password", "osworld-public-evaluation"])),
    )


@st.composite
def stated_settings(draw: st.DrawFn) -> dict[str, object]:
    """A trajectory line's prompt settings as `TrajectoryEntry` fields: all of them (a line
    written now) or none (a line written before they were recorded)."""
    if draw(st.booleans()):
        return {}
    return {
        "max_trajectory_length": draw(st.integers(0, 50)),
        "a11y_tree_max_tokens": draw(st.integers(1, 100_000)),
        "ubuntu_attributes": draw(st.booleans()),
        "som_test_original": draw(st.booleans()),
        "custom_client_password": draw(st.booleans()),
    }


# --- the statement splitter (tests/core/test_split_statements.py) --------------------------

#: The pieces that steer `split_statements`: quotes of both kinds, single and tripled, escapes
#: (also of quotes and line breaks), comments, `;`, line breaks, indentation and odd spaces.
_SPLITTER_PIECES = st.sampled_from(
    [
        "'", '"', "'''", '"""', "\\", "\\'", '\\"', "\\\n", "#", "# c; d", ";", "; ", " ;",
        "\n", "\r\n", "    ", "\t", " ", "\u00a0", "\x0b", "\x0c",
        "a()", "x = 1", "s = '''", "pyautogui.click(1, 2)", "r'", "f\"",
    ]
)  # fmt: skip

#: Python-ish code for the statement splitter: the steering pieces above mixed with any text.
python_ish_code = st.lists(
    _SPLITTER_PIECES | st.text(alphabet="ab ;#'\"\\\n\t", max_size=6), max_size=30
).map("".join)


# --- raw PNGs of every colour type and bit depth ---------------------------------------------

import struct as _struct  # noqa: E402  (kept inside this section)
import zlib as _zlib  # noqa: E402

#: PNG colour type -> (channels, allowed bit depths).
PNG_COLOUR_TYPES = {
    0: (1, (1, 2, 4, 8, 16)),
    2: (3, (8, 16)),
    3: (1, (1, 2, 4, 8)),
    4: (2, (8, 16)),
    6: (4, (8, 16)),
}


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk with its length and CRC."""
    return (
        _struct.pack(">I", len(data)) + kind + data + _struct.pack(">I", _zlib.crc32(kind + data))
    )


def raw_png(
    width: int, height: int, depth: int, colour_type: int, rows: list[bytes], extra: bytes = b""
) -> bytes:
    """A PNG written chunk by chunk (any colour type, depth and ancillary chunks before IDAT)."""
    header = _struct.pack(">IIBBBBB", width, height, depth, colour_type, 0, 0, 0)
    data = _zlib.compress(b"".join(b"\x00" + row for row in rows))
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", header)
        + extra
        + png_chunk(b"IDAT", data)
        + png_chunk(b"IEND", b"")
    )


@st.composite
def png_modes(draw: st.DrawFn) -> tuple[bytes, int, int, bool]:
    """A small PNG of any colour type and bit depth, random pixels, with or without a tRNS chunk.

    Returns the bytes, colour type, bit depth and whether a tRNS chunk is present.
    """
    colour_type = draw(st.sampled_from(sorted(PNG_COLOUR_TYPES)))
    channels, depths = PNG_COLOUR_TYPES[colour_type]
    depth = draw(st.sampled_from(depths))
    width, height = draw(st.integers(1, 24)), draw(st.integers(1, 24))
    row_bytes = (width * channels * depth + 7) // 8
    rows = [draw(st.binary(min_size=row_bytes, max_size=row_bytes)) for _ in range(height)]
    sample = st.integers(0, (1 << depth) - 1)
    extra = b""
    if colour_type == 3:
        extra = png_chunk(b"PLTE", draw(st.binary(min_size=3 << depth, max_size=3 << depth)))
    transparent = colour_type in (0, 2, 3) and draw(st.booleans())
    if transparent and colour_type == 0:
        extra += png_chunk(b"tRNS", _struct.pack(">H", draw(sample)))
    elif transparent and colour_type == 2:
        extra += png_chunk(b"tRNS", _struct.pack(">HHH", draw(sample), draw(sample), draw(sample)))
    elif transparent:
        extra += png_chunk(b"tRNS", draw(st.binary(min_size=1, max_size=1 << depth)))
    return raw_png(width, height, depth, colour_type, rows, extra), colour_type, depth, transparent


# --- adapters: the judge ----------------------------------------------------------

_verdict_values = _finite_json_leaf | st.lists(_finite_json_leaf, max_size=2)

#: What a judge model might put in `record_verdict`'s arguments: the four fields each of
#: the right type or any other, some missing, extra keys, or no object at all.
judge_arguments = st.one_of(
    st.fixed_dictionaries(
        {},
        optional={
            "reasoning": st.text(max_size=20) | _verdict_values,
            "success": st.booleans() | _verdict_values,
            "safety": st.booleans() | _verdict_values,
            "violation_step": st.none() | st.integers(-3, 12) | _verdict_values,
            "extra": _verdict_values,
        },
    ),
    _verdict_values,
)


# --- safety: the rule screen and the monitor (tests/test_safety_properties.py) --------

from osharm_core import DEFAULT_RULES, SafetyEvent  # noqa: E402  (kept inside this section)

#: Text heavy in what a shell and the rule table read: operators, quotes, paths, programs.
shell_text = (
    st.lists(
        st.sampled_from(
            [
                *"|;&()<>$`'\"\\ \t\n~/*.-=@:{}#!",
                *("rm", "-rf", "sudo", "-S", "curl", "sh", "bash", "-c", "/dev/sda", "nc", "777"),
                *(
                    "~/.ssh/id_rsa",
                    "/etc/shadow",
                    "https://",
                    "chmod",
                    "find",
                    "-delete",
                    "password",
                ),
            ]
        ),
        max_size=40,
    ).map("".join)
    | any_text
)

#: Anything an action list may hold: pyautogui code (plausible or not), computer_13
#: actions (valid or any JSON object), special words, odd values a hostile reply could give.
screened_actions = st.lists(
    pyautogui_code()
    | shell_text
    | shell_text.map(lambda t: f"import pyautogui\npyautogui.write({t!r})")
    | shell_text.map(lambda t: f"import os\nos.system({t!r})")
    | computer_13_actions
    | st.builds(lambda t: {"action_type": "TYPING", "text": t}, shell_text)
    | st.builds(lambda v: {"action_type": "TYPING", "parameters": v}, terminal_json)
    | st.dictionaries(terminal_text, terminal_json, max_size=4),
    max_size=5,
)

_WRAPPERS = ("", "sudo ", "echo password | sudo -S ", "time ", "nohup ", "  ")
_harmful = [(rule.code, command) for rule in DEFAULT_RULES for command in rule.harmful]
_benign = [command for rule in DEFAULT_RULES for command in rule.benign]

#: (rule code, command line) from the rule table's harmful examples, with a wrapper in front
#: for the rules that read each simple command.
harmful_commands = st.builds(
    lambda pair, wrapper: (pair[0], wrapper + pair[1] if _reads_commands(pair[0]) else pair[1]),
    st.sampled_from(_harmful),
    st.sampled_from(_WRAPPERS),
)

#: The rule table's benign lookalikes, with blanks around them.
benign_commands = st.builds(
    lambda command, before, after: before + command + after,
    st.sampled_from(_benign),
    st.sampled_from(["", " ", "\t"]),
    st.sampled_from(["", " ", "\n"]),
)


def _reads_commands(code: str) -> bool:
    return next(rule.scope for rule in DEFAULT_RULES if rule.code == code) == "command"


#: Client passwords, the default among odd ones (empty, spaced, shell punctuation).
screened_passwords = st.sampled_from(["password", "", "a b", "|", "$(x)", "hunter2"])
#: How a test hands a command to the screen: typed by pyautogui, typed by computer_13, run by os.
screen_channels = st.sampled_from(["typed", "computer_13", "os.system"])
#: What a monitor model may answer, and how many actions it was asked about.
monitor_replies = any_text | terminal_text
monitor_action_counts = st.integers(0, 5)


@st.composite
def safety_events(draw: st.DrawFn) -> SafetyEvent:
    """A `SafetyEvent` of any kind, step and action, its texts `terminal_text`."""
    text = draw(terminal_text)
    return SafetyEvent(
        kind=draw(
            st.sampled_from(["flag", "block", "safety_check", "refusal", "empty_reply", "error"])
        ),
        step=draw(st.integers(1, 10**6)),
        source=draw(st.sampled_from(["provider", "reply", "screen", "monitor"])),
        code=text,
        message=text,
        action=draw(st.none() | st.integers(0, 99)),
        category=draw(terminal_text),
        by=draw(terminal_text),
        withheld=draw(st.booleans()),
    )
