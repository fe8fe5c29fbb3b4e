"""Every hypothesis strategy of the test suite, in one place.

Sections are grouped by the concern they feed; add new strategies to the
section of the module they exercise.
"""

from __future__ import annotations

from hypothesis import strategies as st

# --- text -----------------------------------------------------------------

#: Any text, including control characters, surrogate-free odd Unicode and fences.
any_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=400) | st.text(
    alphabet="`'\";\n\t #\\abcDONEWAITFAILpyautogui().,=", max_size=200
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
_cua_x = st.integers(0, 1920) | st.floats(0, 1920, allow_nan=False)
_cua_y = st.integers(0, 1080) | st.floats(0, 1080, allow_nan=False)
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
    """Arbitrary trajectory lines as `adapters.recording.TrajectoryEntry` values."""
    from adapters.base import Usage
    from adapters.recording import TrajectoryEntry
    from osharm_core import Continuation

    small = st.integers(0, 10_000)
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


@st.composite
def fenced_replies(draw: st.DrawFn) -> str:
    """Replies mixing prose, fences with and without tags, JSON, code and special words."""
    pieces = st.one_of(
        any_text,
        st.sampled_from(["```", "```python\n", "```json\n", "```DONE```", "\n```\n", ";"]),
        st.sampled_from(SPECIAL_WORDS).map(lambda w: f"\n{w}\n"),
        pyautogui_code(),
        st.just('{"action_type": "CLICK", "x": 1, "y": 2}'),
        st.just('[{"action_type": "PRESS", "key": "enter"}]'),
    )
    return "".join(draw(st.lists(pieces, max_size=8)))
