"""Reply parsing: pyautogui code blocks, set-of-marks code and computer_13 JSON actions."""

from __future__ import annotations

import json
import numbers
import re
from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from returns.result import Failure, Result, Success

from osharm_core.errors import ActionParseError, ConfigError
from osharm_core.parsing import (
    code_actions,
    parse_actions_from_string,
    parse_code_from_som_string,
    parse_code_from_string,
    som_prefix,
    split_fences,
    split_statements,
)
from osharm_core.vocabulary import SPECIAL_WORDS, validate_computer_13
from tests.strategies import (
    any_text,
    computer_13_actions,
    fence_free_text,
    fenced_replies,
    pyautogui_code,
    pyautogui_statements,
)


def fence(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}\n```"


def actions_of(reply: str) -> list[Any]:
    result = parse_actions_from_string(reply)
    assert isinstance(result, Success), result
    return result.unwrap()


def error_of(reply: str) -> str:
    result = parse_actions_from_string(reply)
    assert isinstance(result, Failure), result
    error = result.failure()
    assert isinstance(error, ActionParseError)
    return str(error)


# --- parse_code_from_string: whole reply and blocks ----------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("DONE", ["DONE"]),
        ("  WAIT \n", ["WAIT"]),
        ("FAIL;", ["FAIL"]),
        (";DONE;;", ["DONE"]),
        ("done", []),
        ("DONE DONE", []),
        ("", []),
        ("I clicked the button and nothing happened yet.", []),
        ("pyautogui.click(1, 2)", []),
    ],
)
def test_whole_reply(reply: str, expected: list[str]) -> None:
    """A reply that is only WAIT/DONE/FAIL (after the `;` clean-up) is that word; prose alone is []."""
    assert parse_code_from_string(reply) == expected


def test_semicolon_inside_a_string_stays_in_the_string() -> None:
    """Reference fault 1: `typewrite('a; b')` is kept as written, not split into two lines."""
    reply = "Typing.\n" + fence("import pyautogui; pyautogui.typewrite('a; b')")
    assert parse_code_from_string(reply) == ["import pyautogui\npyautogui.typewrite('a; b')"]


def test_code_on_the_fence_line_is_kept() -> None:
    """Reference fault 2: code on the opening fence line is code, not a language tag."""
    reply = "```import pyautogui\npyautogui.click(10, 20)\n```"
    assert parse_code_from_string(reply) == ["import pyautogui\npyautogui.click(10, 20)"]
    assert parse_code_from_string("```x = 1\nprint(x)\n```") == ["x = 1\nprint(x)"]


@pytest.mark.parametrize(
    "tag",
    [
        "python",
        "py",
        "Python3",
        "bash",
        "json",
        " python  ",
        "\tpy",
        "python\xa0",
        "py\x0c",
        "python\u2003",
        "python \r",
        "sh\x1c",
    ],
)
def test_single_word_on_the_fence_line_is_a_language_tag(tag: str) -> None:
    """One word, optionally padded with spaces, alone on the opening line is dropped as a tag;
    any whitespace may follow it (a non-breaking space, a form feed), as the reference strips."""
    assert parse_code_from_string(f"```{tag}\npyautogui.press('a')\n```") == [
        "pyautogui.press('a')"
    ]
    assert split_fences(f"```{tag}\nx\n```").blocks[0].tag == tag.strip()


@pytest.mark.parametrize("tag", ["c++", "python-repl", "#", "objective-c", "c#"])
def test_a_tag_is_letters_digits_and_underscores_as_the_reference_reads_it(tag: str) -> None:
    """A fence line with other characters (`c++`, `python-repl`, `#`) is code, kept as the
    reference keeps it (a `#` line is a comment, so that code runs the same)."""
    assert parse_code_from_string(f"```{tag}\npyautogui.press('a')\n```") == [
        f"{tag}\npyautogui.press('a')"
    ]
    assert parse_code_from_string(f"```{tag}\n```") == [tag]


@pytest.mark.parametrize("reply", ["```py ```", "```python\xa0```", "```bash\t \x0c```"])
def test_a_one_line_block_of_a_word_and_whitespace_is_an_empty_tagged_block(reply: str) -> None:
    """```` ```py ``` ```` is a tag and nothing else, as the reference reads it: no action."""
    assert parse_code_from_string(reply) == []
    assert split_fences(reply).blocks[0].tag == reply[3:].split()[0].rstrip("`")


def test_crlf_fence_line_is_a_language_tag() -> None:
    """A Windows line ending after the tag does not turn the tag into code."""
    assert parse_code_from_string("```python\r\npyautogui.click(1, 2)\r\n```") == [
        "pyautogui.click(1, 2)"
    ]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("```DONE```", ["DONE"]),
        ("```WAIT\n```", ["WAIT"]),
        ("``` FAIL ```", ["FAIL"]),
        ("```python```", ["python"]),
        ("```pyautogui.click(1, 2)```", ["pyautogui.click(1, 2)"]),
        ("```\n```", []),
        ("``````", []),
        ("```python\n```", []),
        ("```python\n   \n```", []),
    ],
)
def test_one_line_and_empty_blocks(reply: str, expected: list[str]) -> None:
    """A block on one line is all content; special words are never tags; empty blocks give nothing."""
    assert parse_code_from_string(reply) == expected


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("```python pyautogui.click(1, 2)```", ["pyautogui.click(1, 2)"]),
        ("```Python\tpyautogui.press('a')\n```", ["pyautogui.press('a')"]),
        ("```py x = 1\ny = 2\n```", ["x = 1\ny = 2"]),
        ("```python3 pyautogui.click(1, 2)\nDONE\n```", ["pyautogui.click(1, 2)", "DONE"]),
        ("```pythonic x```", ["pythonic x"]),
        (
            "```import pyautogui\npyautogui.click(1, 2)```",
            ["import pyautogui\npyautogui.click(1, 2)"],
        ),
    ],
)
def test_python_opening_a_fence_line_with_code_after_it_is_its_tag(
    reply: str, expected: list[str]
) -> None:
    """`python` (`python3`, `py`) and code on the fence line: the code alone is the action, as
    the reference reads it (kept with the tag, it could never run); other words stay code."""
    assert parse_code_from_string(reply) == expected


def test_blocks_come_in_order_and_pair_non_greedily() -> None:
    """Each fence is closed by the next one; blocks give actions in order; an unclosed fence is text."""
    reply = "First:\n```python\na()\n```\nthen\n```\nb()\n```\nand ```python\nc()"
    assert parse_code_from_string(reply) == ["a()", "b()"]
    assert parse_code_from_string("```python\npyautogui.click(1, 2)") == []


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("DONE", ["DONE"]),
        ("  WAIT  ", ["WAIT"]),
        ("pyautogui.press('enter')\nDONE", ["pyautogui.press('enter')", "DONE"]),
        ("a()\nb()\n\nFAIL", ["a()\nb()\n", "FAIL"]),
        ("a()  \nDONE", ["a()  ", "DONE"]),
        ("a()\n    WAIT", ["a()", "WAIT"]),
        ("\n\nDONE\n", ["DONE"]),
        ("DONE\na()", ["DONE\na()"]),
        ("a(); DONE", ["a()", "DONE"]),
        ("print('DONE')", ["print('DONE')"]),
    ],
)
def test_special_words_inside_blocks(content: str, expected: list[str]) -> None:
    """A block that is a special word gives it; one ending with it gives the code, then the word."""
    assert parse_code_from_string(fence(content)) == expected


def test_code_before_a_final_special_word_keeps_its_line_ends() -> None:
    """The code before a block's last-line special word is its lines as written, as the
    reference gives them: a CRLF reply's code keeps its `\r`, blank lines stay."""
    crlf = "```python\r\npyautogui.click(1, 2)\r\nDONE\r\n```"
    assert parse_code_from_string(crlf) == ["pyautogui.click(1, 2)\r", "DONE"]
    blank = "```\npyautogui.click(1, 2)\n\nDONE\n```"
    assert parse_code_from_string(blank) == ["pyautogui.click(1, 2)\n", "DONE"]


@given(
    pyautogui_code(),
    st.text(alphabet=" \t\r\n", max_size=6),
    st.sampled_from(["", "  ", "\t"]),
    st.sampled_from(SPECIAL_WORDS),
)
def test_code_before_a_final_special_word_is_its_lines_as_written(
    code: str, trailing: str, indent: str, word: str
) -> None:
    """Whatever whitespace ends the code's lines, the code action is the block's lines before
    the word's line exactly (the block's leading whitespace aside)."""
    reply = f"```python\n{code}{trailing}\n{indent}{word}\n```"
    assert parse_code_from_string(reply) == [(code + trailing).lstrip(), word]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (fence("a()") + "\nDONE", ["a()", "DONE"]),
        ("WAIT\n" + fence("a()") + "\nDONE\n", ["a()", "WAIT", "DONE"]),
        ("Done:\n  FAIL  \n" + fence("a()") + "\n" + fence("b()"), ["a()", "b()", "FAIL"]),
        (fence("a()") + "DONE", ["a()"]),
        ("DONE " + fence("a()"), ["a()"]),
        ("The task is DONE.\n" + fence("a()"), ["a()"]),
        ("Thinking...\nDONE\nreally", ["DONE"]),
        ("```python\nx()\nWAIT", ["WAIT"]),
        (fence("a()\nDONE") + "\nDONE", ["a()", "DONE", "DONE"]),
    ],
)
def test_special_words_outside_blocks(reply: str, expected: list[str]) -> None:
    """Special words on a line of their own outside the blocks follow the block actions, in order."""
    assert parse_code_from_string(reply) == expected


# --- the statement splitter -----------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("a(); b()", "a()\nb()"),
        ("a();b();", "a()\nb()"),
        (";;a();;  ;b()", "a()\nb()"),
        ("    a(); b()", "    a()\n    b()"),
        ("for i in range(2):\n    a(); b()\nc()", "for i in range(2):\n    a()\n    b()\nc()"),
        ("\tif x:\n\t\ty();z()", "\tif x:\n\t\ty()\n\t\tz()"),
        ("a()  # b; c", "a()  # b; c"),
        ("a(); # b; c", "a()\n# b; c"),
        ("# only; a comment\nb(); c()", "# only; a comment\nb()\nc()"),
        ("w('a; b'); w(\"c; d\")", "w('a; b')\nw(\"c; d\")"),
        ("w('it\\'s; here'); x()", "w('it\\'s; here')\nx()"),
        ('w("say \\"hi; there\\""); x()', 'w("say \\"hi; there\\"")\nx()'),
        ("w('a\\\\'); x()", "w('a\\\\')\nx()"),
        ("w('''a; 'b'; c'''); x()", "w('''a; 'b'; c''')\nx()"),
        ('s = """one;\ntwo; "three";\n"""; t()', 's = """one;\ntwo; "three";\n"""\nt()'),
        ("    s = '''\n  in; string'''; t()", "    s = '''\n  in; string'''\n    t()"),
        ("w(r'C:\\dir;x'); y()", "w(r'C:\\dir;x')\ny()"),
        ("w(r'\\'; still'); y()", "w(r'\\'; still')\ny()"),
        ("w(rb'a;b', Rb\"c;d\", f'{x};', BR'e;f', u'g;h'); z()", None),
        ("w(f'{\"a;b\"}'); z()", "w(f'{\"a;b\"}')\nz()"),
        ("'open; string\na(); b()", "'open; string\na()\nb()"),
        ('"""never closed; a(); b()', '"""never closed; a(); b()'),
        ("w('x'); '", "w('x')\n'"),
        ("x = 1\r\ny = 2; z = 3\r", "x = 1\r\ny = 2\nz = 3"),
        ("no semicolons at all  ", "no semicolons at all  "),
    ],
)
def test_split_statements(code: str, expected: str | None) -> None:
    """Only `;` outside strings and comments split; pieces keep the line's indentation."""
    if expected is None:
        expected = code.replace("); z()", ")\nz()")
    assert split_statements(code) == expected


def test_split_inside_blocks_keeps_indentation() -> None:
    """A block's `a(); b()` inside a loop becomes two lines with the loop body's indentation."""
    code = "for _ in range(3):\n    pyautogui.press('down'); time.sleep(0.2)\nDONE"
    assert parse_code_from_string(fence(code)) == [
        "for _ in range(3):\n    pyautogui.press('down')\n    time.sleep(0.2)",
        "DONE",
    ]


# --- set-of-marks ---------------------------------------------------------------------


def test_som_prefix_format() -> None:
    """Each mark becomes `tag_N=(cx, cy)` with integer centres, numbered from 1, one per line."""
    masks = [(10, 20, 30, 40), (0, 0, 5, 5), (1, 1, 3, 3)]
    assert som_prefix(masks) == "tag_1=(25, 40)\ntag_2=(2, 2)\ntag_3=(2, 2)\n"
    assert som_prefix([]) == ""


def test_som_code_gets_the_prefix_and_specials_do_not() -> None:
    """Every code action starts with the tag definitions; WAIT/DONE/FAIL stay bare."""
    reply = fence("pyautogui.click(tag_1)\nDONE") + "\n" + fence("pyautogui.click(tag_2)")
    masks = [(100, 200, 50, 20), (0, 0, 10, 10)]
    prefix = "tag_1=(125, 210)\ntag_2=(5, 5)\n"
    assert parse_code_from_som_string(reply, masks) == [
        prefix + "pyautogui.click(tag_1)",
        "DONE",
        prefix + "pyautogui.click(tag_2)",
    ]
    assert parse_code_from_som_string("WAIT", masks) == ["WAIT"]
    assert parse_code_from_som_string(fence("x()"), []) == ["x()"]


@pytest.mark.parametrize("word", SPECIAL_WORDS)
def test_a_special_word_before_crlf_gets_no_som_prefix(word: str) -> None:
    """A block's `DONE\r` (a CRLF reply ending two special words) stays bare, as the reference
    leaves every action that is a special word once stripped."""
    reply = f"```\r\n{word}\r\n{word}\r\n```"
    assert parse_code_from_string(reply) == [f"{word}\r", word]
    assert parse_code_from_som_string(reply, [(0, 0, 4, 4)]) == [f"{word}\r", word]


@pytest.mark.parametrize(
    "masks",
    [
        [(1, 2)],
        [(1, 2, 3, 4, 5)],
        [("1", "2", "3", "4")],
        [(float("nan"), 2, 3, 4)],
        [(True, 2, 3, 4)],
        [{"x": 1, "y": 2, "w": 3, "h": 4}],
        [None],
        "abcd",
        5,
    ],
)
def test_som_masks_of_the_wrong_shape_are_refused(masks: Any) -> None:
    """Masks that are not (x, y, w, h) boxes of finite numbers are a ConfigError naming them,
    not an unpacking error from inside the parser."""
    with pytest.raises(ConfigError, match=r"masks(\[0\])? must be"):
        parse_code_from_som_string(fence("pyautogui.click(tag_1)"), masks)
    with pytest.raises(ConfigError, match=r"masks(\[0\])? must be"):
        som_prefix(masks)


@pytest.mark.parametrize("reply", [None, b"DONE", 5, ["DONE"]])
def test_parsers_need_a_str(reply: Any) -> None:
    """The parsers are total over strings; anything else is a TypeError saying a str is needed."""
    for parse in (parse_code_from_string, code_actions, parse_actions_from_string):
        with pytest.raises(TypeError, match="a model reply must be a str; got"):
            parse(reply)
    with pytest.raises(TypeError, match="a model reply must be a str"):
        parse_code_from_som_string(reply, [(0, 0, 4, 4)])


@given(
    fenced_replies(),
    st.lists(st.tuples(*[st.integers(0, 3000)] * 4), max_size=6),
)
def test_som_prefix_on_every_code_action(
    reply: str, masks: list[tuple[int, int, int, int]]
) -> None:
    """The som parser is the plain parser with the exact prefix on each non-special action."""
    plain = parse_code_from_string(reply)
    tagged = parse_code_from_som_string(reply, masks)
    prefix = som_prefix(masks)
    assert len(prefix.splitlines()) == len(masks)
    assert all(re.fullmatch(r"tag_\d+=\(\d+, \d+\)", line) for line in prefix.splitlines())
    assert tagged == [a if a.strip() in SPECIAL_WORDS else prefix + a for a in plain]


# --- parse_actions_from_string ------------------------------------------------------------


CLICK = {"action_type": "CLICK", "x": 10, "y": 20}
PRESS = {"action_type": "PRESS", "key": "enter"}


@pytest.mark.parametrize("word", SPECIAL_WORDS)
def test_actions_special_reply(word: str) -> None:
    """A reply that is only a special word is that word."""
    assert actions_of(f"  {word}\n") == [word]


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (fence(json.dumps(CLICK), "json"), [CLICK]),
        (fence(json.dumps([CLICK, PRESS]), "json"), [CLICK, PRESS]),
        (
            "a\n" + fence(json.dumps(CLICK), "json") + "\nb\n" + fence(json.dumps(PRESS), "json"),
            [CLICK, PRESS],
        ),
        (fence(json.dumps(CLICK), "JSON"), [CLICK]),
        (fence(json.dumps(CLICK), ""), [CLICK]),
        (fence("pyautogui.click()", "python") + fence(json.dumps(PRESS), "json"), [PRESS]),
        (fence(json.dumps(CLICK), "text") + fence(json.dumps(PRESS), ""), [CLICK, PRESS]),
        (fence("DONE", "json"), ["DONE"]),
        (fence('{"action_type": "DONE"}', "json"), [{"action_type": "DONE"}]),
        (fence(json.dumps(CLICK), "json") + "\nDONE", [CLICK, "DONE"]),
        ("```json\n```\n" + fence(json.dumps(PRESS), "json"), [PRESS]),
        (f"```{json.dumps(CLICK)}```", [CLICK]),
        ('```json\n{"action_type": "FLY", "speed": 9}\n```', [{"action_type": "FLY", "speed": 9}]),
    ],
)
def test_actions_from_blocks(reply: str, expected: list[Any]) -> None:
    """JSON blocks give their objects in order; json-tagged blocks win over the others."""
    assert actions_of(reply) == expected


@pytest.mark.parametrize(
    ("reply", "needles"),
    [
        (
            '```json\n{"action_type": "CLICK",\n "x": }\n```',
            ["block 1", "line 2 column 7", "Expecting value"],
        ),
        (
            fence(json.dumps(CLICK), "json") + fence("{oops}", "json"),
            ["block 2", "line 1 column 2"],
        ),
        (
            fence("[1, 2]", "json"),
            ["block 1", "expected a JSON object, WAIT, DONE or FAIL, or a list of these", "list"],
        ),
        (fence("[]", "json"), ["block 1", "list"]),
        (fence("[{}, 3]", "json"), ["block 1", "list"]),
        (fence('"done"', "json"), ["block 1", "str"]),
        (fence('"DONE "', "json"), ["block 1", "str"]),
        (fence('[{"action_type": "WAIT"}, "DONE", 3]', "json"), ["block 1", "list"]),
        (fence('["DONE", ["WAIT"]]', "json"), ["block 1", "list"]),
        (fence("42", "json"), ["block 1", "int"]),
        (fence("pyautogui.click(1, 2)", "python"), ["block 1", "invalid JSON"]),
        ("``````\n" + fence("nope", ""), ["block 2"]),
        (fence("1" * 5000, "json"), ["block 1", "invalid JSON"]),
        (fence("[" * 100_000, "json"), ["block 1", "invalid JSON"]),
        (fence("```", "json") + "\n", ["no computer_13 action found"]),
    ],
)
def test_block_errors_are_failures(reply: str, needles: list[str]) -> None:
    """A bad block is a Failure naming the block and what is wrong, never a string in the list."""
    message = error_of(reply)
    for needle in needles:
        assert needle in message


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (f"```json {json.dumps(CLICK)} ```", [CLICK]),
        (f"```json\t{json.dumps(CLICK)}```", [CLICK]),
        (f"```JSON {json.dumps(CLICK)}\n```", [CLICK]),
        (f"```json {json.dumps(CLICK, indent=2)}\n```", [CLICK]),
        (f"```json {json.dumps(CLICK)} ```\n```\n{json.dumps(PRESS)}\n```", [CLICK]),
        (f"```json {json.dumps(CLICK)} ```\nDONE", [CLICK, "DONE"]),
    ],
)
def test_one_line_json_fence(reply: str, expected: list[Any]) -> None:
    """`json`, whitespace and JSON on the opening fence line: a json-tagged block holding that
    JSON (as the reference reads it), which wins over untagged blocks like any json block."""
    assert actions_of(reply) == expected


@pytest.mark.parametrize(
    ("reply", "needles"),
    [
        (f"```jsonc {json.dumps(CLICK)} ```", ["block 1", "invalid JSON"]),
        (f"``` json {json.dumps(CLICK)} ```", ["block 1", "invalid JSON"]),
        (f"```python {json.dumps(CLICK)} ```", ["block 1", "invalid JSON"]),
    ],
)
def test_only_json_opening_the_fence_line_is_an_inline_tag(reply: str, needles: list[str]) -> None:
    """Another word, or `json` after a space, before JSON on the fence line stays content."""
    message = error_of(reply)
    for needle in needles:
        assert needle in message


def test_one_line_json_fence_leaves_pyautogui_alone() -> None:
    """The one-line json tag is computer_13's: code after `json ` on a fence line stays code."""
    assert parse_code_from_string("```json x = 1```") == ["json x = 1"]
    assert split_fences(f"```json {json.dumps(CLICK)} ```").blocks[0].tag == ""


@pytest.mark.parametrize("word", SPECIAL_WORDS)
def test_special_word_as_a_json_string(word: str) -> None:
    """A JSON string that is WAIT, DONE or FAIL is that special word, bare or in a block."""
    assert actions_of(f'"{word}"') == [word]
    assert actions_of(f' "{word}"\n') == [word]
    assert actions_of(fence(f'"{word}"', "json")) == [word]
    assert actions_of(fence(f'"{word}"', "")) == [word]
    assert actions_of(f'```json "{word}" ```') == [word]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([CLICK, "DONE"], [CLICK, "DONE"]),
        (["WAIT", CLICK, "FAIL", PRESS], ["WAIT", CLICK, "FAIL", PRESS]),
        (["DONE"], ["DONE"]),
    ],
)
def test_special_words_in_a_list_keep_their_place(value: list[Any], expected: list[Any]) -> None:
    """A list of objects and special-word strings gives its items in order, fenced or bare."""
    assert actions_of(json.dumps(value)) == expected
    assert actions_of(fence(json.dumps(value), "json")) == expected
    assert actions_of(fence(json.dumps(value), "json") + "\nWAIT") == [*expected, "WAIT"]


def test_a_bare_list_with_another_value_goes_to_the_prose_search() -> None:
    """Without blocks, a list holding anything but objects and special words is not read as
    actions; the objects with an `action_type` in it are found as in prose."""
    assert actions_of(json.dumps([CLICK, 3, "DONE"])) == [CLICK]
    assert actions_of(json.dumps([CLICK, "done"])) == [CLICK]


TYPING_MARKDOWN = {"action_type": "TYPING", "text": "```python\nprint(1)\n```"}


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (
            fence(json.dumps(CLICK), "") + "\n" + fence("pyautogui.click(10, 20)", "python"),
            [CLICK],
        ),
        (fence(json.dumps(TYPING_MARKDOWN), "json"), [TYPING_MARKDOWN]),
        (fence(json.dumps(TYPING_MARKDOWN), ""), [TYPING_MARKDOWN]),
        (json.dumps({"action_type": "TYPING", "text": "```x```"}), None),
        ("Use ``` to fence code.\n" + fence(json.dumps(CLICK), "json") + "\nDONE", [CLICK, "DONE"]),
        ("WAIT\n```\n" + fence('"FAIL"', "json"), ["FAIL", "WAIT"]),
    ],
)
def test_replies_the_reference_reads_are_read(reply: str, expected: list[Any] | None) -> None:
    """Where our blocks give no action, the reference's reading is used: a JSON block then
    the action repeated as code, backticks inside a JSON string, a stray fence."""
    assert actions_of(reply) == (expected or [json.loads(reply)])


@pytest.mark.parametrize("reply", ["5", "null", "true", '"hello"', "[1, 2]", "[]", "[[{}]]"])
def test_bare_json_that_is_no_action_is_a_failure(reply: str) -> None:
    """Deliberate: bare JSON that is not an object, a special word or a list of them is a
    Failure; the reference returns it as the one action, which the environment cannot run."""
    assert "no computer_13 action found" in error_of(reply)


def test_one_bad_block_fails_the_whole_reply() -> None:
    """Reference fault: a JSON error no longer hides inside the list next to good actions."""
    reply = fence(json.dumps(CLICK), "json") + "\n" + fence("{bad json", "json")
    result = parse_actions_from_string(reply)
    assert isinstance(result, Failure)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        (json.dumps(CLICK), [CLICK]),
        ("  " + json.dumps([CLICK, PRESS]) + "\n", [CLICK, PRESS]),
        (f"I will click. {json.dumps(CLICK)} Then press {json.dumps(PRESS)}.", [CLICK, PRESS]),
        (f"Plan:\n{json.dumps(CLICK, indent=2)}\nDONE", [CLICK, "DONE"]),
        ('Plan: {"plan": {"action_type": "DONE"}, "n": 1}', [{"action_type": "DONE"}]),
        ('{"plan": {"action_type": "DONE"}}', [{"plan": {"action_type": "DONE"}}]),
        ('{"x": 1}', [{"x": 1}]),
        (
            '{"action_type": "TYPING", "text": "}{\\"x\\": {"}',
            [{"action_type": "TYPING", "text": '}{"x": {'}],
        ),
        (
            'He said "look {here" {"action_type": "PRESS", "key": "a"}',
            [{"action_type": "PRESS", "key": "a"}],
        ),
        ('{not json} {"x": 1} {"action_type": "WAIT"}', [{"action_type": "WAIT"}]),
        ('{"action_type": "HOTKEY", "keys": ["ctrl", "c"], "more": {"a": {}}}', None),
        ("Nothing to do yet.\nWAIT\n", ["WAIT"]),
        ("[1, 2, 3]\nFAIL", ["FAIL"]),
    ],
)
def test_actions_without_blocks(reply: str, expected: list[Any] | None) -> None:
    """A reply without fences is read as JSON, else searched for objects with an action_type."""
    if expected is None:
        expected = [json.loads(reply)]
    assert actions_of(reply) == expected


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "   ",
        "I am not sure what to do.",
        'Here: {"x": 1}',
        "[1, 2]",
        '"done"',
        '["DONE", "x"]',
        "The task is DONE.",
        "{" * 1000,
        '{"action_type": ' * 2000,
        '{"action_type": "SCROLL", "dx": ' + "9" * 5000 + ', "dy": 0}',
        "[" * 100_000,
    ],
)
def test_replies_without_actions_fail(reply: str) -> None:
    """A reply with no action gives a Failure whose message quotes the reply's start, shortened."""
    message = error_of(reply)
    assert message.startswith("no computer_13 action found in reply ")
    assert len(message) < 140


def test_failure_message_shows_the_start_of_the_reply() -> None:
    """The quoted excerpt is the beginning of the stripped reply, cut with an ellipsis."""
    message = error_of("   Let me think about this very carefully. " * 10)
    assert "'Let me think about this very carefully." in message
    assert message.endswith("...'")


def test_results_are_fresh_lists() -> None:
    """Mutating a returned list or action never changes what the next parse returns."""
    reply = fence(json.dumps([CLICK, PRESS]), "json")
    first = actions_of(reply)
    first[0]["x"] = 999
    first.append("DONE")
    assert actions_of(reply) == [CLICK, PRESS]
    code = parse_code_from_string("DONE")
    code.append("x")
    assert parse_code_from_string("DONE") == ["DONE"]


# --- properties -----------------------------------------------------------------------------


@given(any_text | fenced_replies())
def test_code_parser_is_total(reply: str) -> None:
    """Any text gives a list of non-empty strings, and the som variant agrees with it."""
    actions = parse_code_from_string(reply)
    assert isinstance(actions, list)
    assert all(isinstance(a, str) and a.strip() for a in actions)
    assert len(parse_code_from_som_string(reply, [(1, 2, 3, 4)])) == len(actions)


@given(any_text | fenced_replies())
def test_action_parser_is_total(reply: str) -> None:
    """Any text gives a Success of a non-empty list of dicts and words, or a Failure with a message."""
    result: Result[list[Any], ActionParseError] = parse_actions_from_string(reply)
    if isinstance(result, Success):
        actions = result.unwrap()
        assert isinstance(actions, list)
        assert actions
        assert all(isinstance(a, dict) or a in SPECIAL_WORDS for a in actions)
    else:
        assert isinstance(result.failure(), ActionParseError)
        assert str(result.failure())


@given(any_text)
def test_split_statements_is_total(code: str) -> None:
    """Splitting never raises and never loses a non-space, non-`;` character."""
    out = split_statements(code)
    squeeze = re.compile(r"[\s;]")
    assert squeeze.sub("", out) == squeeze.sub("", code)


def _prose_ok(prose: str) -> bool:
    return all(line.strip() not in SPECIAL_WORDS for line in prose.split("\n"))


@given(pyautogui_code(), fence_free_text, fence_free_text)
def test_code_round_trip(code: str, before: str, after: str) -> None:
    """Code without top-level `;`, fenced as python between any prose, parses back unchanged."""
    assume(_prose_ok(before) and _prose_ok(after))
    reply = f"{before}\n```python\n{code}\n```\n{after}"
    assert parse_code_from_string(reply) == [code.strip()]


@given(st.lists(pyautogui_statements, min_size=1, max_size=5), st.sampled_from(["", "    ", "\t"]))
def test_semicolon_joined_statements_split_back(statements: list[str], indent: str) -> None:
    """Statements joined with `;` on one line come back one per line, with the line's indentation."""
    assume(indent == "" or not any("\n" in s for s in statements))
    joined = indent + "; ".join(statements)
    assert split_statements(joined) == "\n".join(indent + s for s in statements)


def _render(action: Any) -> str:
    return action if isinstance(action, str) else json.dumps(action)


@given(st.lists(computer_13_actions, min_size=1, max_size=5), st.lists(fence_free_text, max_size=5))
def test_computer_13_round_trip_one_block_each(actions: list[Any], prose: list[str]) -> None:
    """Valid actions, one per json block between prose, parse back equal and validate."""
    assume(all(_prose_ok(p) for p in prose))
    parts = []
    for i, action in enumerate(actions):
        parts.append(prose[i] if i < len(prose) else "")
        parts.append(fence(_render(action), "json"))
    parsed = actions_of("\n".join(parts))
    assert parsed == actions
    assert all(isinstance(validate_computer_13(a), Success) for a in parsed)


@given(st.lists(computer_13_actions, min_size=1, max_size=5))
def test_computer_13_round_trip_as_one_list(actions: list[Any]) -> None:
    """Valid actions (special words as JSON strings) as one JSON list, fenced or bare, or on the
    opening fence line, parse back equal, in order."""
    assert actions_of(fence(json.dumps(actions), "json")) == actions
    assert actions_of(json.dumps(actions)) == actions
    assert actions_of(f"```json {json.dumps(actions)} ```") == actions


@given(computer_13_actions.filter(lambda a: isinstance(a, dict)), fence_free_text)
def test_computer_13_embedded_in_prose(action: dict[str, Any], prose: str) -> None:
    """One valid action written inline after prose with no braces is found again."""
    assume("{" not in prose and "}" not in prose and _prose_ok(prose))
    assert actions_of(f"{prose} {json.dumps(action)}") == [action]


@given(
    computer_13_actions.filter(lambda a: isinstance(a, dict)),
    st.lists(st.sampled_from(["{}", "{x}", '{"a": 1}', "{{}}", "{ 'q': [1] }"]), max_size=6),
)
def test_objects_without_an_action_type_around_an_embedded_action_are_passed_over(
    action: dict[str, Any], others: list[str]
) -> None:
    """Braces in the prose that hold no `"action_type"` are not decoded, wherever they sit."""
    half = len(others) // 2
    text = " ".join(["Here:", *others[:half], json.dumps(action), *others[half:], "done."])
    assert actions_of(text) == [action]


# --- adversarial input: each of these must simply finish (see the module docstring) ------------


@pytest.mark.parametrize(
    "reply",
    [
        "`" * 1_000_000,
        '"' * 1_000_000,
        "'" * 1_000_000,
        "```python\n" + "'" * 1_000_000 + ";\n```",
        "```\n" + "'\";#\\\n" * 160_000 + "```",
        "```\n" + "a();" * 250_000 + "\n```",
        "{" * 1_000_000,
        '{"x":' * 200_000,
        '{"a":' * 100_000 + "1" + "}" * 100_000,
        '{"action_type":"' * 60_000,
        '{"' * 500_000,
        "DONE\n" * 200_000,
    ],
    ids=[
        "backticks",
        "double-quotes",
        "single-quotes",
        "block-of-quotes",
        "block-of-mixed",
        "block-of-semicolons",
        "open-braces",
        "open-objects",
        "deep-object",
        "open-action-strings",
        "brace-quote",
        "special-lines",
    ],
)
def test_megabyte_adversarial_replies_finish(reply: str) -> None:
    """A 1 MB hostile reply goes through both parsers without raising (the scans are linear)."""
    assert isinstance(parse_code_from_string(reply), list)
    assert isinstance(parse_actions_from_string(reply), Success | Failure)


@pytest.mark.parametrize(
    "reply",
    [
        "\ud800",
        "```\n'\udfff; x'; y()\n```",
        '{"action_type": "TYPING", "text": "\ud83d"}',
        "\x00DONE\x00",
    ],
)
def test_lone_surrogates_and_nul_do_not_break_parsing(reply: str) -> None:
    """Python strings that are not valid UTF-8 still parse without raising."""
    assert isinstance(parse_code_from_string(reply), list)
    assert isinstance(parse_actions_from_string(reply), Success | Failure)


@pytest.mark.parametrize("stray", ["{" * 17, "{ " * 40, "Template {{name}} then " * 9 + "{ " * 17])
def test_braces_never_closed_do_not_bury_an_action(stray: str) -> None:
    """Only balanced objects count as nesting: prose with `{` left open (a template, LaTeX)
    before an action leaves it found (17 open braces used to hide it)."""
    action = '{"action_type": "CLICK", "x": 5, "y": 5}'
    reply = f"The editor shows {stray} in the status bar, so I click it: {action}"
    assert parse_actions_from_string(reply) == Success([json.loads(action)])


def test_an_action_inside_too_many_objects_is_not_searched() -> None:
    """The depth limit still holds for objects really nested inside 17 others."""
    action = '{"action_type": "CLICK", "x": 5, "y": 5}'
    buried = '{"a": ' * 17 + action + "}" * 17
    assert isinstance(parse_actions_from_string(f"Look: {buried}"), Failure)
    shallow = '{"a": ' * 16 + action + "}" * 16
    assert isinstance(parse_actions_from_string(f"Look: {shallow}"), Success)


def test_an_integer_too_large_to_store_makes_the_reply_unparsable() -> None:
    """An integer of ~4,250 digits is JSON Python reads, but no state can hold it (it could not
    be written back): the reply parsed, then the step raised after the model call was paid."""
    from osharm_core import AgentConfig, AgentState, complete_step, prepare_step
    from osharm_core.state import MAX_INT_BITS

    largest = str(2**MAX_INT_BITS - 1)
    kept = parse_actions_from_string(f'{{"action_type": "TYPING", "text": "hi", "n": {largest}}}')
    assert isinstance(kept, Success)
    for reply in (
        '```json\n{"action_type": "TYPING", "text": "hi", "n": 1' + "0" * 4250 + "}\n```",
        '{"": ' + "9" * 4250 + "}",
        'Typing. {"action_type": "TYPING", "text": "hi", "n": -' + "9" * 4250 + "} done",
    ):
        parsed = parse_actions_from_string(reply)
        assert isinstance(parsed, Failure), reply[:40]
        config = AgentConfig(observation_type="a11y_tree", action_space="computer_13")
        step = prepare_step(config, AgentState(), "Type.", {"accessibility_tree": "<root/>"})
        state, actions = complete_step(config, AgentState(), step, reply)
        assert actions is None
        assert len(state) == 1


class _Int64:
    """An integer that is not an `int`, as numpy's are (registered as `numbers.Integral`)."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __int__(self) -> int:
        return self.value

    __index__ = __int__

    def __float__(self) -> float:
        return float(self.value)

    def __add__(self, other: object) -> _Int64:
        return _Int64(self.value + int(other))  # type: ignore[call-overload]

    def __floordiv__(self, other: object) -> _Int64:
        return _Int64(self.value // int(other))  # type: ignore[call-overload]


numbers.Integral.register(_Int64)


class _Rows:
    """Boxes as an array gives them: iterable, not a `Sequence`."""

    def __init__(self, *rows: object) -> None:
        self.rows = rows

    def __iter__(self) -> Any:
        return iter(self.rows)


def test_boxes_and_sizes_of_numpy_style_numbers_are_taken() -> None:
    """Boxes and screen sizes computed with numpy (integers that are not ints, arrays that are
    not sequences) worked before the masks and sizes were checked, and work again."""
    from osharm_core.errors import check_size
    from osharm_core.parsing import som_prefix

    boxes = _Rows(_Rows(*map(_Int64, (10, 20, 5, 7))), (0.0, 0.0, 4.5, 4.5))
    assert som_prefix(boxes) == "tag_1=(12, 23)\ntag_2=(2, 2)\n"  # type: ignore[arg-type]
    assert check_size("screen_size", (_Int64(1920), _Int64(1080))) == (1920, 1080)
    assert check_size("screen_size", _Rows(1920, 1080)) == (1920, 1080)  # an array of a size

    class Scalar:  # an array of no dimension: iterable by type, not by value
        def __iter__(self) -> Any:
            raise TypeError("iteration over a 0-d array")

    with pytest.raises(ConfigError, match="masks must be a sequence"):
        som_prefix(Scalar())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"masks\[0\] must be"):
        som_prefix([Scalar()])
    with pytest.raises(ConfigError, match="screen_size must be"):
        check_size("screen_size", Scalar())
    with pytest.raises(ConfigError, match=r"masks\[0\] must be"):
        som_prefix([(True, 0, 1, 1)])
    with pytest.raises(ConfigError, match="masks must be a sequence"):
        som_prefix({"a": (0, 0, 1, 1)})  # type: ignore[arg-type]
