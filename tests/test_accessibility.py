"""Accessibility trees: parsing, the reference's node filter, and byte-identical linearization.

The golden expectations come from `reference_linearize`, a small independent
re-implementation of the reference algorithm on `xml.etree.ElementTree` (as the
reference uses), with a strict literal reading of positions instead of `eval`.
"""

from __future__ import annotations

import ast
import xml.etree.ElementTree as ET
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from osharm_core.accessibility import (
    LINEARIZED_HEADER,
    filter_nodes,
    linearize_accessibility_tree,
    parse_accessibility_tree,
    parse_pair,
)
from osharm_core.errors import AccessibilityTreeError, ConfigError
from tests import strategies as s
from tests.conftest import FIXTURE_NAMES, OBSERVATIONS

UBUNTU = "https://accessibility.ubuntu.example.org/ns/"
WINDOWS = "https://accessibility.windows.example.org/ns/"

# --- the independent reference ----------------------------------------------------

_SUFFIXES = (
    "item button heading label scrollbar searchbox textbox link tabelement textfield textarea menu"
)
_EXACT = (
    "alert canvas check-box combo-box entry icon image paragraph scroll-bar section slider static "
    "table-cell terminal text netuiribbontab start trayclockwclass traydummysearchcontrol uiimage "
    "uiproperty uiribboncommandbar"
)


def literal_pair(text: str) -> tuple[Any, ...] | None:
    """Two signed int/float literals in parentheses, read through `ast` without evaluating anything."""
    stripped = text.strip()
    if not (stripped.startswith("(") and stripped.endswith(")")):
        return None
    try:
        body = ast.parse(stripped, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(body, ast.Tuple) or len(body.elts) != 2:
        return None
    values = []
    for element in body.elts:
        sign = 1
        if isinstance(element, ast.UnaryOp) and isinstance(element.op, ast.UAdd | ast.USub):
            sign = -1 if isinstance(element.op, ast.USub) else 1
            element = element.operand
        if not isinstance(element, ast.Constant) or type(element.value) not in (int, float):
            return None
        values.append(sign * element.value)
    return tuple(values)


def reference_keeps(node: ET.Element, platform: str, check_image: bool) -> bool:
    """The reference's judgement of one node, rule by rule."""
    base = UBUNTU if platform == "ubuntu" else WINDOWS
    state, component = f"{{{base}state}}", f"{{{base}component}}"
    tag = node.tag
    role = (
        tag.startswith("document")
        or any(tag.endswith(suffix) for suffix in _SUFFIXES.split())
        or tag in _EXACT.split()
    )
    shown = node.get(state + "visible", "false") == "true" and (
        platform == "windows" or node.get(state + "showing", "false") == "true"
    )
    usable = any(
        node.get(state + name, "false") == "true"
        for name in ("enabled", "editable", "expandable", "checkable")
    )
    named = (
        node.get("name", "") != ""
        or (node.text is not None and len(node.text) > 0)
        or (check_image and node.get("image", "false") == "true")
    )
    xy = literal_pair(node.get(component + "screencoord", "(-1, -1)"))
    wh = literal_pair(node.get(component + "size", "(-1, -1)"))
    placed = (
        xy is not None and wh is not None and xy[0] >= 0 and xy[1] >= 0 and wh[0] > 0 and wh[1] > 0
    )
    return role and shown and usable and named and placed


def reference_nodes(
    xml: str, platform: str = "ubuntu", check_image: bool = False
) -> list[ET.Element]:
    """Every kept node in document order, root included, as the reference walks them."""
    return [n for n in ET.fromstring(xml).iter() if reference_keeps(n, platform, check_image)]


def _quote(text: str) -> str:
    return '"{}"'.format(text.replace('"', '""')) if '"' in text else text


def reference_text(node: ET.Element, platform: str) -> str:
    """The reference's text column."""
    base = UBUNTU if platform == "ubuntu" else WINDOWS
    if node.text:
        return _quote(node.text)
    value = node.get(f"{{{base}value}}value")
    if node.get(f"{{{WINDOWS}class}}class", "").endswith("EditWrapper") and value:
        return _quote(value)
    return '""'


def reference_rows(
    xml: str, platform: str = "ubuntu", ubuntu_attributes: bool = False
) -> list[str]:
    """One row per kept node; ubuntu class/description read from the windows namespace by default."""
    base = UBUNTU if platform == "ubuntu" else WINDOWS
    attributes = (
        f"{{{UBUNTU if platform == 'ubuntu' and ubuntu_attributes else WINDOWS}attributes}}"
    )
    component = f"{{{base}component}}"
    lines = []
    for node in reference_nodes(xml, platform):
        klass = (
            node.get(attributes + "class", "")
            if platform == "ubuntu"
            else node.get(f"{{{WINDOWS}class}}class", "")
        )
        cells = [
            node.tag,
            node.get("name", ""),
            reference_text(node, platform),
            klass,
            node.get(attributes + "description", ""),
            node.get(component + "screencoord", ""),
            node.get(component + "size", ""),
        ]
        lines.append("\t".join(cells))
    return lines


def reference_linearize(xml: str, platform: str = "ubuntu", ubuntu_attributes: bool = False) -> str:
    """The reference's whole table: the header line, then the rows."""
    header = "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)"
    return "\n".join([header, *reference_rows(xml, platform, ubuntu_attributes)])


# --- hand-built trees ---------------------------------------------------------------

SHOWN = 'st:showing="true" st:visible="true" st:enabled="true"'
PLACED = 'cp:screencoord="(10, 20)" cp:size="(30, 40)"'


def tree(body: str, platform: str = "ubuntu") -> str:
    """A root holding `body`, with the platform's prefixes bound."""
    base = UBUNTU if platform == "ubuntu" else WINDOWS
    return (
        f'<desktop-frame xmlns:st="{base}state" xmlns:cp="{base}component" '
        f'xmlns:val="{base}value" xmlns:attr="{base}attributes" '
        f'xmlns:wattr="{WINDOWS}attributes" xmlns:cls="{WINDOWS}class">{body}</desktop-frame>'
    )


def rows(xml: str, platform: str = "ubuntu", **options: bool) -> list[list[str]]:
    """The linearized rows below the header, split into cells."""
    text = linearize_accessibility_tree(xml, platform, **options)  # type: ignore[arg-type]
    header, *body = text.split("\n")
    assert header == LINEARIZED_HEADER
    return [line.split("\t") for line in body]


def kept(element: str, platform: str = "ubuntu") -> bool:
    """Whether the single element is kept; checked against the reference as well."""
    xml = tree(element, platform)
    ours = len(filter_nodes(parse_accessibility_tree(xml), platform)) == 1
    assert ours == (len(reference_nodes(xml, platform)) == 1)
    return ours


# --- fixtures -----------------------------------------------------------------------


@pytest.mark.parametrize("name", FIXTURE_NAMES)
@pytest.mark.parametrize("ubuntu_attributes", [False, True])
def test_fixture_matches_reference(name: str, ubuntu_attributes: bool) -> None:
    """Every real tree linearizes byte-identically to the reference, with and without the option."""
    xml = (OBSERVATIONS / f"{name}.xml").read_text(encoding="utf-8")
    ours = linearize_accessibility_tree(xml, ubuntu_attributes=ubuntu_attributes)
    assert ours == reference_linearize(xml, ubuntu_attributes=ubuntu_attributes)
    assert ours.count("\n") >= 1


def test_fixture_bytes_and_str_agree() -> None:
    """A tree given as UTF-8 bytes linearizes exactly like the same tree as str."""
    raw = (OBSERVATIONS / "chromium_settings_form.xml").read_bytes()
    assert linearize_accessibility_tree(raw) == linearize_accessibility_tree(raw.decode())


def test_ubuntu_class_columns_empty_by_default_and_filled_with_option() -> None:
    """The reference's namespace quirk leaves ubuntu class/description empty; the option reads them."""
    xml = tree(f'<push-button name="OK" {SHOWN} {PLACED} attr:class="btn" attr:description="d"/>')
    assert rows(xml) == [["push-button", "OK", '""', "", "", "(10, 20)", "(30, 40)"]]
    assert rows(xml, ubuntu_attributes=True)[0][3:5] == ["btn", "d"]


@pytest.mark.parametrize("value", ["false", "no", 0, 1, None])
def test_ubuntu_attributes_takes_only_booleans(value: object) -> None:
    """`ubuntu_attributes="false"` does not turn the option on: only a bool is taken."""
    xml = tree(f'<push-button name="OK" {SHOWN} {PLACED} attr:class="btn"/>')
    with pytest.raises(ConfigError, match=r"ubuntu_attributes must be true or false; got"):
        linearize_accessibility_tree(xml, ubuntu_attributes=value)  # type: ignore[arg-type]


def test_windows_columns_use_windows_namespaces() -> None:
    """Windows rows take class from the class namespace and description from attributes."""
    xml = tree(
        '<push-button name="OK" st:visible="true" st:enabled="true" '
        f'{PLACED} cls:class="Button" attr:description="desc"/>',
        "windows",
    )
    assert rows(xml, "windows") == [
        ["push-button", "OK", '""', "Button", "desc", "(10, 20)", "(30, 40)"]
    ]


# --- the filter, rule by rule ----------------------------------------------------------


@pytest.mark.parametrize(
    ("tag", "expected"),
    [
        ("document-web", True),
        ("documentary", True),
        ("menu-item", True),
        ("push-button", True),
        ("heading", True),
        ("label", True),
        ("scrollbar", True),
        ("searchbox", True),
        ("textbox", True),
        ("link", True),
        ("tabelement", True),
        ("textfield", True),
        ("textarea", True),
        ("menu", True),
        *((role, True) for role in _EXACT.split()),
        ("panel", False),
        ("frame", False),
        ("menu-bar", False),
        ("page-tab", False),
        ("Document-web", False),
        ("items", False),
        ("text-block", False),
    ],
)
def test_role_rule(tag: str, expected: bool) -> None:
    """Roles are kept by prefix "document", by the listed suffixes, or by exact name only."""
    assert kept(f'<{tag} name="n" {SHOWN} {PLACED}/>') is expected


@pytest.mark.parametrize(
    ("states", "ubuntu", "windows"),
    [
        ('st:showing="true" st:visible="true" st:enabled="true"', True, True),
        ('st:visible="true" st:enabled="true"', False, True),
        ('st:showing="true" st:enabled="true"', False, False),
        ('st:showing="true" st:visible="True" st:enabled="true"', False, False),
        ('st:showing="true" st:visible="true"', False, False),
        ('st:showing="true" st:visible="true" st:enabled="false"', False, False),
        ('st:showing="true" st:visible="true" st:editable="true"', True, True),
        ('st:showing="true" st:visible="true" st:expandable="true"', True, True),
        ('st:showing="true" st:visible="true" st:checkable="true"', True, True),
        ('st:showing="true" st:visible="true" st:sensitive="true"', False, False),
        ('showing="true" visible="true" enabled="true"', False, False),
    ],
)
def test_state_rules(states: str, ubuntu: bool, windows: bool) -> None:
    """Ubuntu needs showing and visible, windows only visible; then one of four usable states."""
    element = f'<push-button name="n" {states} {PLACED}/>'
    assert kept(element, "ubuntu") is ubuntu
    assert kept(element, "windows") is windows


@pytest.mark.parametrize(
    ("content", "expected", "expected_with_image"),
    [
        ('name="OK"/>', True, True),
        ('name=""/>', False, False),
        ("/>", False, False),
        ('name="">text</push-button>', True, True),
        ('name=" "/>', True, True),
        ('name="" image="true"/>', False, True),
        ('name="" image="True"/>', False, False),
    ],
)
def test_name_text_image_rule(content: str, expected: bool, expected_with_image: bool) -> None:
    """A name or text is needed; `image="true"` counts only when tagging for set-of-marks."""
    xml = tree(f"<push-button {SHOWN} {PLACED} {content}")
    root = parse_accessibility_tree(xml)
    assert (len(filter_nodes(root)) == 1) is expected
    assert (len(filter_nodes(root, check_image=True)) == 1) is expected_with_image
    assert len(reference_nodes(xml, check_image=True)) == expected_with_image


@pytest.mark.parametrize(
    ("position", "size", "expected"),
    [
        ("(10, 20)", "(30, 40)", True),
        ("(0, 0)", "(1, 1)", True),
        (None, "(30, 40)", False),
        ("(10, 20)", None, False),
        ("(-1, -1)", "(-1, -1)", False),
        ("(0, 0)", "(0, 0)", False),
        ("(0, 0)", "(0, 5)", False),
        ("(0, 0)", "(5, 0)", False),
        ("(-2147483648, 0)", "(5, 5)", False),
        ("(0, -1)", "(5, 5)", False),
        ("(1.5, 2.5)", "(3.25, 0.5)", True),
        ("(1, 2)", "(0.0, 1)", False),
        ("(1e3, 2E-3)", "(1_000, 0x10)", True),
        ("(+1, 2)", "(3, 4)", True),
        ("( 1 ,2 )", "(3,4)", True),
        ("(-0, 0)", "(1, 1)", True),
        ("(01, 2)", "(3, 4)", False),
        ("(1, 2, 3)", "(3, 4)", False),
        ("(1,)", "(3, 4)", False),
        ("1, 2", "(3, 4)", False),
        ("garbage", "(3, 4)", False),
        ("", "(3, 4)", False),
        ("__import__('os').system('true')", "(3, 4)", False),
        ("(__import__('os'), 1)", "(3, 4)", False),
        ("(1j, 2)", "(3, 4)", False),
        ("(nan, 2)", "(3, 4)", False),
        ("(inf, 2)", "(3, 4)", False),
        ("(１, 2)", "(3, 4)", False),
    ],
)
def test_geometry_rule(position: str | None, size: str | None, expected: bool) -> None:
    """Position must be non-negative and size positive, read strictly; anything else drops the node."""
    attributes = "".join(
        f' cp:{key}="{value}"'
        for key, value in (("screencoord", position), ("size", size))
        if value is not None
    )
    assert kept(f'<push-button name="n" {SHOWN}{attributes}/>') is expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("(12, 34)", (12, 34)),
        ("(1.5, -2)", (1.5, -2)),
        ("(0x1F, 0o17)", (31, 15)),
        ("(0b101, 1_000)", (5, 1000)),
        ("(.5, 5.)", (0.5, 5.0)),
        ("(1e2, -3E-1)", (100.0, -0.3)),
        ("\t( 7 ,\n8 ) ", (7, 8)),
        ("(00, 0_0)", (0, 0)),
        ("(1__0, 2)", None),
        ("(1_, 2)", None),
        ("(012, 3)", None),
        ("(--1, 2)", None),
        ("(1, 2", None),
        ("[1, 2]", None),
        ("(True, 2)", None),
        ("(\u00a01, 2)", None),
        ("(\u0661, 2)", None),
    ],
)
def test_parse_pair(text: str, expected: tuple[float, float] | None) -> None:
    """Pairs follow Python's int/float literal grammar with one optional sign, nothing more."""
    assert parse_pair(text) == expected


def test_geometry_text_is_never_executed(monkeypatch: pytest.MonkeyPatch) -> None:
    """Code in a geometry attribute is treated as garbage: nothing is imported or called."""
    import builtins

    calls: list[str] = []
    original = builtins.__import__

    def spy(name: str, *args: Any, **kwargs: Any) -> Any:
        calls.append(name)
        return original(name, *args, **kwargs)

    xml = tree(
        f'<push-button name="n" {SHOWN} cp:screencoord="__import__(\'shutil\')" cp:size="(1, 1)"/>'
    )
    monkeypatch.setattr(builtins, "__import__", spy)
    result = linearize_accessibility_tree(xml)
    monkeypatch.undo()
    assert result == LINEARIZED_HEADER
    assert "shutil" not in calls


def test_root_is_judged_too() -> None:
    """The root element itself is kept when it passes the rules."""
    xml = (
        f'<document-frame xmlns:st="{UBUNTU}state" xmlns:cp="{UBUNTU}component" '
        f'name="root" {SHOWN} {PLACED}><label name="child" {SHOWN} {PLACED}/></document-frame>'
    )
    assert [row[:2] for row in rows(xml)] == [["document-frame", "root"], ["label", "child"]]


def test_document_order_and_nesting() -> None:
    """Rows follow document order: a parent before its children, children before later siblings."""
    body = (
        f'<panel name="p"><label name="a" {SHOWN} {PLACED}><label name="b" {SHOWN} {PLACED}/>'
        f'</label></panel><label name="c" {SHOWN} {PLACED}/>'
    )
    assert [row[1] for row in rows(tree(body))] == ["a", "b", "c"]


def test_namespaces_matched_by_uri_not_prefix() -> None:
    """Any prefix bound to the right URI works; the right prefix bound to another URI does not."""
    good = (
        f'<r xmlns:zz="{UBUNTU}state" xmlns:qq="{UBUNTU}component"><label name="x" '
        'zz:showing="true" zz:visible="true" zz:enabled="true" '
        'qq:screencoord="(1, 1)" qq:size="(1, 1)"/></r>'
    )
    bad = good.replace(f'xmlns:zz="{UBUNTU}state"', 'xmlns:zz="urn:other"')
    assert len(rows(good)) == 1
    assert rows(bad) == []


# --- the text column --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cell"),
    [
        ("plain", "plain"),
        ('say "hi"', '"say ""hi"""'),
        ('"', '""""'),
        ("tab\tand\nnewline", "tab\tand\nnewline"),
        (" ", " "),
    ],
)
def test_text_quoting(text: str, cell: str) -> None:
    """Text with a double quote is wrapped in quotes with inner quotes doubled; the rest stays raw."""
    element = ET.Element("label", {"name": "n"})
    element.text = text
    body = ET.tostring(element, encoding="unicode").replace("<label", f"<label {SHOWN} {PLACED}")
    expected = f"{LINEARIZED_HEADER}\nlabel\tn\t{cell}\t\t\t(10, 20)\t(30, 40)"
    assert linearize_accessibility_tree(tree(body)) == expected


@pytest.mark.parametrize("platform", ["ubuntu", "windows"])
@pytest.mark.parametrize(
    ("attributes", "cell"),
    [
        ('cls:class="EditWrapper" val:value="typed"', "typed"),
        ('cls:class="RichEditWrapper" val:value="a &quot;b&quot;"', '"a ""b"""'),
        ('cls:class="EditWrapper" val:value=""', '""'),
        ('cls:class="EditWrapperX" val:value="typed"', '""'),
        ('val:value="typed"', '""'),
        ('cls:class="EditWrapper"', '""'),
    ],
)
def test_edit_wrapper_value_rule(platform: str, attributes: str, cell: str) -> None:
    """Without text, an EditWrapper's value (platform value namespace) fills the text column."""
    shown = 'st:showing="true" st:visible="true" st:enabled="true"'
    xml = tree(f'<entry name="e" {shown} {PLACED} {attributes}/>', platform)
    assert rows(xml, platform)[0][2] == cell
    assert linearize_accessibility_tree(xml, platform) == reference_linearize(xml, platform)  # type: ignore[arg-type]


def test_edit_wrapper_ignores_other_platform_value() -> None:
    """The value is read from the platform's own value namespace only."""
    xml = tree(
        f'<entry name="e" {SHOWN} {PLACED} cls:class="EditWrapper" '
        f'xmlns:wval="{WINDOWS}value" wval:value="windows value"/>'
    )
    assert rows(xml)[0][2] == '""'


@pytest.mark.parametrize(
    "name",
    [
        "trailing spaces      ",
        "\u00a0",
        "en – dash “curly”",
        "\u202eright-to-left\u202c",
        "zero\u200bwidth",
        "emoji 🧪 and 👩\u200d💻",
        "C1 \u0085 and \u009f controls",
        "line\nbreak and\ttab and\rreturn",
        "\U0010fffd private use",
    ],
)
def test_odd_names_stay_raw(name: str) -> None:
    """Names with control characters and odd Unicode come out exactly as written, unescaped."""
    element = ET.Element("label", {"name": name})
    body = ET.tostring(element, encoding="unicode").replace("<label", f"<label {SHOWN} {PLACED}")
    xml = tree(body)
    text = linearize_accessibility_tree(xml)
    assert text == reference_linearize(xml)
    assert text.split("\n", 1)[1].startswith(f"label\t{name}\t")


# --- parsing ---------------------------------------------------------------------------


def test_unknown_platform_is_refused() -> None:
    """A platform other than ubuntu or windows is a ConfigError (a ValueError) naming it."""
    with pytest.raises(ConfigError, match="'macos'"):
        linearize_accessibility_tree(tree(""), "macos")  # type: ignore[arg-type]
    assert issubclass(ConfigError, ValueError)


@pytest.mark.parametrize("encoding", ["ISO-8859-1", "UTF-16", "ascii"])
def test_str_with_encoding_declaration(encoding: str) -> None:
    """A str whose XML declaration names an encoding parses as the text it is."""
    xml = f'<?xml version="1.0" encoding="{encoding}"?>' + tree(
        f'<label name="é€😀" {SHOWN} {PLACED}/>'
    )
    assert rows(xml)[0][1] == "é€😀"


@pytest.mark.parametrize(
    ("codec", "bom", "declared"),
    [
        ("utf-8", b"\xef\xbb\xbf", None),
        ("utf-16-le", b"\xff\xfe", None),
        ("utf-16-be", b"\xfe\xff", "UTF-16"),
        ("utf-32-le", b"\xff\xfe\x00\x00", None),
        ("iso-8859-1", b"", "ISO-8859-1"),
        ("cp1252", b"", "windows-1252"),
    ],
)
def test_bytes_in_other_encodings(codec: str, bom: bytes, declared: str | None) -> None:
    """Bytes with a BOM or an encoding declaration are decoded as they say."""
    prolog = f'<?xml version="1.0" encoding="{declared}"?>' if declared else ""
    xml = prolog + tree(f'<label name="é" {SHOWN} {PLACED}/>')
    assert rows(bom + xml.encode(codec))[0][1] == "é"


def test_comments_and_processing_instructions_are_skipped() -> None:
    """Comments and PIs never become rows, and text around them joins as in ElementTree."""
    xml = tree(
        f"<!-- a comment --><?pi data?><label name='n' {SHOWN} {PLACED}>be<!-- c -->fore<?x y?>!"
        "</label>"
    )
    assert rows(xml) == [["label", "n", "before!", "", "", "(10, 20)", "(30, 40)"]]
    assert linearize_accessibility_tree(xml) == reference_linearize(xml)


def test_cdata_is_text() -> None:
    """CDATA sections are ordinary text, as for the reference."""
    xml = tree(f"<label name='n' {SHOWN} {PLACED}><![CDATA[a <b> & \"c\"]]></label>")
    assert rows(xml)[0][2] == '"a <b> & ""c"""'


@pytest.mark.parametrize(
    ("xml", "where"),
    [
        ("<a>", "line 1, column 4"),
        ("<a></b>", "line 1, column 8"),
        ("<a>\n<b name='x></b></a>", "line 2"),
        ("", "line 1"),
        ("not xml at all", "line 1, column 1"),
        ("<a>&undefined;</a>", "line 1"),
        ("<a>&#1;</a>", "line 1"),
        ("<a/><b/>", "line 1"),
    ],
)
def test_malformed_xml_names_the_place(xml: str, where: str) -> None:
    """Malformed trees raise AccessibilityTreeError with lxml's line and column."""
    with pytest.raises(AccessibilityTreeError, match="not well-formed XML") as info:
        linearize_accessibility_tree(xml)
    assert where in str(info.value)


@pytest.mark.parametrize("value", [None, 42, ["<a/>"]])
def test_non_text_input_is_refused(value: object) -> None:
    """Anything but str or bytes is refused with a typed error."""
    with pytest.raises(AccessibilityTreeError, match="str or bytes"):
        parse_accessibility_tree(value)  # type: ignore[arg-type]


def test_lone_surrogate_is_refused() -> None:
    """A str holding a lone surrogate cannot be XML and is refused with a typed error."""
    with pytest.raises(AccessibilityTreeError):
        parse_accessibility_tree("<a name='\ud800'/>")


# --- properties ------------------------------------------------------------------------


@given(
    st.sampled_from(["ubuntu", "windows"]).flatmap(lambda p: st.tuples(st.just(p), s.a11y_trees(p)))
)
def test_generated_trees_match_reference(case: tuple[str, str]) -> None:
    """On generated trees the table is deterministic, equals the reference, one row per kept node."""
    platform, xml = case
    first = linearize_accessibility_tree(xml, platform)  # type: ignore[arg-type]
    assert first == linearize_accessibility_tree(xml.encode(), platform)  # type: ignore[arg-type]
    assert first == reference_linearize(xml, platform)
    kept_rows = reference_rows(xml, platform)
    assert len(filter_nodes(parse_accessibility_tree(xml), platform)) == len(kept_rows)
    assert first == "\n".join([LINEARIZED_HEADER, *kept_rows])
    with_option = linearize_accessibility_tree(xml, platform, ubuntu_attributes=True)  # type: ignore[arg-type]
    assert with_option == reference_linearize(xml, platform, ubuntu_attributes=True)


@given(s.a11y_pairs)
def test_parse_pair_agrees_with_literal_reading(text: str) -> None:
    """The strict pair reader agrees with an `ast` literal reading on every generated string."""
    assert parse_pair(text) == literal_pair(text)
