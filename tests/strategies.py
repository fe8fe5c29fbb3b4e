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
