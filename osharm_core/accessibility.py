"""Accessibility trees: safe parsing, the reference's node filter, and the linearized table.

The filter and the text column are written once here and shared with set-of-marks
tagging (`osharm_core.marks`).

Parsing refuses what accessibility trees never contain and what attacks parsers use:
any DOCTYPE (so no entity can be declared, expanded or fetched), text or attribute
values over libxml2's 10 MB limit, and nesting deeper than `MAX_TREE_DEPTH` (2,048)
levels. Documents of any total size are parsed (a 50 MB tree takes about a second).
"""

from __future__ import annotations

import codecs
import re
from types import MappingProxyType
from typing import Any, Final, cast

import attrs
from lxml import etree

from osharm_core.config import Platform
from osharm_core.errors import AccessibilityTreeError, ConfigError, check_flag, excerpt

__all__ = [
    "LINEARIZED_HEADER",
    "PlatformKeys",
    "filter_nodes",
    "linearize_accessibility_tree",
    "parse_accessibility_tree",
    "parse_pair",
    "platform_keys",
    "text_cell",
]

#: The first line of every linearized tree.
LINEARIZED_HEADER: Final = (
    "tag\tname\ttext\tclass\tdescription\tposition (top-left x&y)\tsize (w&h)"
)

_UBUNTU: Final = "https://accessibility.ubuntu.example.org/ns/"
_WINDOWS: Final = "https://accessibility.windows.example.org/ns/"

_WINDOWS_CLASS_KEY: Final = f"{{{_WINDOWS}class}}class"

_ROLE_PREFIX: Final = "document"
_ROLE_SUFFIXES: Final = (
    "item",
    "button",
    "heading",
    "label",
    "scrollbar",
    "searchbox",
    "textbox",
    "link",
    "tabelement",
    "textfield",
    "textarea",
    "menu",
)
_ROLES: Final = frozenset(
    {
        "alert",
        "canvas",
        "check-box",
        "combo-box",
        "entry",
        "icon",
        "image",
        "paragraph",
        "scroll-bar",
        "section",
        "slider",
        "static",
        "table-cell",
        "terminal",
        "text",
        "netuiribbontab",
        "start",
        "trayclockwclass",
        "traydummysearchcontrol",
        "uiimage",
        "uiproperty",
        "uiribboncommandbar",
    }
)


@attrs.frozen
class PlatformKeys:
    """The attribute names one platform's trees are read with (Clark notation, `{uri}local`).

    `showing` is `None` on windows, whose filter does not consult it; `state_ns`
    is the state namespace URI; `class_` and `description` feed the table's class
    and description columns.
    """

    state_ns: str
    showing: str | None
    visible: str
    usable: tuple[str, ...]
    screencoord: str
    size: str
    value: str
    class_: str
    description: str


_USABLE_STATES: Final = ("enabled", "editable", "expandable", "checkable")


def _keys(platform: str, attributes_base: str) -> PlatformKeys:
    """`platform`'s keys; ubuntu's class and every description come from `attributes_base`."""
    base = _UBUNTU if platform == "ubuntu" else _WINDOWS
    state = f"{{{base}state}}"
    component = f"{{{base}component}}"
    attributes = f"{{{attributes_base}attributes}}"
    return PlatformKeys(
        state_ns=base + "state",
        showing=state + "showing" if platform == "ubuntu" else None,
        visible=state + "visible",
        usable=tuple(state + name for name in _USABLE_STATES),
        screencoord=component + "screencoord",
        size=component + "size",
        value=f"{{{base}value}}value",
        class_=attributes + "class" if platform == "ubuntu" else _WINDOWS_CLASS_KEY,
        description=attributes + "description",
    )


# The reference reads ubuntu's class and description through the windows
# attributes namespace, so by default those columns stay empty on ubuntu trees.
_PLATFORM_KEYS: Final = MappingProxyType(
    {
        ("ubuntu", False): _keys("ubuntu", _WINDOWS),
        ("ubuntu", True): _keys("ubuntu", _UBUNTU),
        ("windows", False): _keys("windows", _WINDOWS),
        ("windows", True): _keys("windows", _WINDOWS),
    }
)


def platform_keys(platform: str, *, ubuntu_attributes: bool = False) -> PlatformKeys:
    """The attribute names for `platform` ("ubuntu" or "windows"); `ConfigError` otherwise.

    >>> platform_keys("windows").size
    '{https://accessibility.windows.example.org/ns/component}size'
    """
    attributes = check_flag("ubuntu_attributes", ubuntu_attributes)
    try:
        return _PLATFORM_KEYS[(platform, attributes)]
    except (KeyError, TypeError):
        raise ConfigError(
            f"platform must be 'ubuntu' or 'windows'; got {excerpt(platform)}"
        ) from None


# --- parsing ---------------------------------------------------------------

# How a document announces an encoding that is not ASCII-compatible (XML 1.0, appendix F):
# a byte-order mark, or the first characters "<?" in a wide encoding or in EBCDIC.
_SIGNATURES: Final = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
    (b"<\0\0\0", "utf-32-le"),
    (b"\0\0\0<", "utf-32-be"),
    (b"<\0?\0", "utf-16-le"),
    (b"\0<\0?", "utf-16-be"),
    (b"\x4c\x6f\xa7\x94", "cp037"),
)
_DECLARED: Final = re.compile(
    r"""<\?xml[ \t\r\n][^>]*?encoding[ \t\r\n]*=[ \t\r\n]*["']([A-Za-z][A-Za-z0-9._-]*)["']"""
)


class _RefusingResolver(etree.Resolver):
    """Answers every request libxml2 makes for an outside document with nothing, and notes it.

    With this on the parser, no DTD, external subset or entity is ever read from a
    file or URL, wherever in the document it is declared: libxml2 asks the
    resolver first and gets an empty document back.
    """

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def resolve(self, system_url: str | None, public_id: str | None, context: object, /) -> Any:
        self.asked.append(system_url or public_id or "")
        return self.resolve_string("", context)


def _utf8_from_bytes(data: bytes) -> bytes:
    """Re-encode a document to UTF-8 as its BOM, width or declaration says it is encoded."""
    if data.startswith(codecs.BOM_UTF8):
        return data[len(codecs.BOM_UTF8) :]
    name = next((codec for signature, codec in _SIGNATURES if data.startswith(signature)), None)
    if name is None or name == "cp037":
        declared = _DECLARED.match(data[:1024].decode(name or "latin-1"))
        name = declared.group(1) if declared else name or "utf-8"
    try:
        codec = codecs.lookup(name)
    except LookupError:
        raise AccessibilityTreeError(
            f"accessibility tree declares an unknown encoding {name!r}"
        ) from None
    if codec.name == "utf-8":
        return data
    try:
        return data.decode(codec.name).encode("utf-8")
    except LookupError:  # a bytes-to-bytes or text-to-text codec such as base64, zlib or rot13
        raise AccessibilityTreeError(
            f"accessibility tree declares {name!r}, which is not a text encoding"
        ) from None
    except (UnicodeError, ValueError, TypeError) as exc:
        raise AccessibilityTreeError(
            f"accessibility tree is not valid {codec.name}: {exc}"
        ) from None


def tree_text(data: bytes | bytearray | memoryview) -> str:
    """A tree given as bytes, as text: decoded as its BOM, width or XML declaration says
    (UTF-8 when none does), the rule `parse_accessibility_tree` reads bytes by.

    >>> tree_text('<?xml version="1.0" encoding="UTF-16"?><a/>'.encode("utf-16"))[-4:]
    '<a/>'
    """
    try:
        return _utf8_from_bytes(bytes(data)).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AccessibilityTreeError(f"accessibility tree is not valid utf-8: {exc}") from None


def _as_utf8(xml: str | bytes) -> bytes:
    """The tree as UTF-8 bytes, so every check below reads the characters as the parser will."""
    if isinstance(xml, bytes | bytearray | memoryview):
        return _utf8_from_bytes(bytes(xml))
    if not isinstance(xml, str):
        raise AccessibilityTreeError(
            f"accessibility tree must be str or bytes, not {type(xml).__name__}"
        )
    try:
        return xml.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise AccessibilityTreeError(
            f"accessibility tree holds text that cannot be encoded: {exc}"
        ) from None


def _refuse_doctype() -> AccessibilityTreeError:
    return AccessibilityTreeError(
        "accessibility tree has a DOCTYPE declaration; DTDs are refused because they can "
        "declare entities that expand without bound or fetch files and URLs"
    )


def parse_accessibility_tree(xml: str | bytes) -> etree._Element:
    """Parse a tree safely and return its root element; `AccessibilityTreeError` if refused.

    Accepts `str` (any encoding declaration is ignored) or `bytes` (UTF-8, or what a BOM
    or the XML declaration says; re-encoded to UTF-8 first, so the DOCTYPE check reads the
    real characters). Any DOCTYPE is refused: a document containing `<!DOCTYPE` is refused
    before parsing; the parser itself loads no DTD, expands no entity and answers every
    request for an outside document (external subset, parameter or general entity) with
    nothing through a resolver; and a parsed document that still carries a DTD is refused.
    Comments and processing instructions are dropped (their surrounding text is joined,
    as the reference's ElementTree does).

    >>> parse_accessibility_tree('<desktop-frame><a name="x"/></desktop-frame>')[0].get("name")
    'x'
    """
    data = _as_utf8(xml)
    if b"<!DOCTYPE" in data:  # fast path; parse_without_dtd holds on its own
        raise _refuse_doctype()
    return parse_without_dtd(data)


#: The deepest nesting a tree may have. The reference's ElementTree has no bound;
#: libxml2 refuses more than 256 levels unless told a document is huge, and then 2,048.
MAX_TREE_DEPTH: Final = 2048
#: The longest text or attribute value, libxml2's limit for documents not told huge.
MAX_VALUE_CHARS: Final = 10_000_000
_LIMITS: Final = (
    f"accepted: text and attribute values up to 10 MB, nesting up to {MAX_TREE_DEPTH:,} levels"
)


class _TooDeep(Exception):
    """A tree nests past libxml2's default 256 levels: parse it again, as a huge document."""


def _parse(data: bytes, resolver: _RefusingResolver, *, huge: bool) -> etree._Element:
    parser = etree.XMLParser(
        encoding="utf-8",
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        dtd_validation=False,
        huge_tree=huge,
        remove_comments=True,
        remove_pis=True,
        collect_ids=False,
    )
    parser.resolvers.add(resolver)
    try:
        return etree.fromstring(data, parser)
    except etree.XMLSyntaxError as exc:
        line, column = exc.position
        # The parser's own log holds this run's errors only (the exception's may be older).
        errors = parser.error_log
        message = (errors[0].message if len(errors) else exc.msg).split(", use XML_PARSE")[0]
        deep = "Excessive depth" in message
        if deep and not huge:
            raise _TooDeep from None
        if deep or "limit exceeded" in message:
            raise AccessibilityTreeError(
                f"accessibility tree exceeds the parser's limits (line {line}, column {column}): "
                f"{message} ({_LIMITS})"
            ) from None
        raise AccessibilityTreeError(
            f"accessibility tree is not well-formed XML (line {line}, column {column}): {message}"
        ) from None
    except ValueError as exc:
        raise AccessibilityTreeError(f"accessibility tree cannot be parsed: {exc}") from None


def _within_limits(root: etree._Element) -> etree._Element:
    """`root`, parsed as a huge document, when it keeps the limits a document not told huge
    keeps (`MAX_VALUE_CHARS`) and nests at most `MAX_TREE_DEPTH` levels (walked without
    recursion; libxml2 before 2.12 sets no depth bound on huge documents)."""
    stack = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        values = [node.text or "", node.tail or "", *node.attrib.values()]
        if depth > MAX_TREE_DEPTH or max(map(len, values)) > MAX_VALUE_CHARS:
            problem = "nests too deeply" if depth > MAX_TREE_DEPTH else "holds a value too long"
            raise AccessibilityTreeError(
                f"accessibility tree exceeds the parser's limits: it {problem} ({_LIMITS})"
            )
        stack.extend((child, depth + 1) for child in node)
    return root


def parse_without_dtd(data: bytes) -> etree._Element:
    """Parse UTF-8 bytes with a parser that loads, expands and fetches nothing; refuse any DTD.

    The guard that does not depend on where a DOCTYPE starts (after a BOM, in any
    encoding): `parse_accessibility_tree` calls it after its fast string check. A
    tree nesting past libxml2's default 256 levels is parsed again as a huge
    document, then held to the same limits, and to `MAX_TREE_DEPTH` levels.
    """
    resolver = _RefusingResolver()
    try:
        root = _parse(data, resolver, huge=False)
    except _TooDeep:
        root = _within_limits(_parse(data, resolver, huge=True))
    docinfo = root.getroottree().docinfo
    if (
        resolver.asked
        or docinfo.doctype
        or docinfo.internalDTD is not None
        or docinfo.externalDTD is not None
        or docinfo.system_url
        or docinfo.public_id
    ):
        raise _refuse_doctype()
    return root


# --- the node filter ---------------------------------------------------------

_WS: Final = r"[ \t\f\r\n]*"
_DIGITS: Final = r"[0-9](?:_?[0-9])*"
_EXPONENT: Final = rf"[eE][+-]?{_DIGITS}"
_INT: Final = (
    r"0[xX](?:_?[0-9a-fA-F])+|0[oO](?:_?[0-7])+|0[bB](?:_?[01])+|[1-9](?:_?[0-9])*|0(?:_?0)*"
)
_FLOAT: Final = (
    rf"(?:{_DIGITS})?\.{_DIGITS}(?:{_EXPONENT})?|{_DIGITS}\.(?:{_EXPONENT})?|{_DIGITS}{_EXPONENT}"
)


def _number(group: str) -> str:
    return rf"(?P<{group}>[+-]?(?:(?P<{group}f>{_FLOAT})|(?P<{group}i>{_INT})))"


_PAIR: Final = re.compile(rf"{_WS}\({_WS}{_number('a')}{_WS},{_WS}{_number('b')}{_WS}\){_WS}")

# What the desktop servers write; read without the general pattern's backtracking.
_SIMPLE_PAIR: Final = re.compile(r"\((-?(?:0|[1-9][0-9]*)), (-?(?:0|[1-9][0-9]*))\)")


#: The longest number literal read as a coordinate; longer ones make the pair unreadable
#: (no screen needs them, and Python refuses to convert integers past 4,300 digits).
MAX_NUMBER_CHARS: Final = 32
#: The longest pair text read at all: two such numbers, their signs, the parentheses and the
#: comma, and room for spaces. Longer text is refused before any pattern looks at it (a
#: pattern over megabytes of digits took seconds and gigabytes per node).
MAX_PAIR_CHARS: Final = 2 * MAX_NUMBER_CHARS + 64


def parse_pair(text: str) -> tuple[int | float, int | float] | None:
    """Read `"(x, y)"` strictly: two Python int or float literals, each with an optional sign.

    Returns `None` for anything else (never evaluates the text), including numbers
    written with more than `MAX_NUMBER_CHARS` characters and text longer than
    `MAX_PAIR_CHARS`.

    >>> parse_pair("(12, -3.5)"), parse_pair("(0x10, 1_000)"), parse_pair("__import__('os')")
    ((12, -3.5), (16, 1000), None)
    """
    if len(text) > MAX_PAIR_CHARS:
        return None
    simple = _SIMPLE_PAIR.fullmatch(text)
    if simple is not None:
        if max(len(simple.group(1)), len(simple.group(2))) > MAX_NUMBER_CHARS:
            return None
        return int(simple.group(1)), int(simple.group(2))
    match = _PAIR.fullmatch(text)
    if match is None:
        return None
    values: list[int | float] = []
    for name in "ab":
        number = match.group(name)
        if len(number) > MAX_NUMBER_CHARS:
            return None
        values.append(float(number) if match.group(name + "f") else int(number, 0))
    return values[0], values[1]


def _role_kept(tag: str) -> bool:
    return tag.startswith(_ROLE_PREFIX) or tag.endswith(_ROLE_SUFFIXES) or tag in _ROLES


def _geometry_kept(position: str, size: str) -> bool:
    xy, wh = parse_pair(position), parse_pair(size)
    return (
        xy is not None and wh is not None and xy[0] >= 0 and xy[1] >= 0 and wh[0] > 0 and wh[1] > 0
    )


def filter_nodes(
    root: etree._Element, platform: str = "ubuntu", *, check_image: bool = False
) -> tuple[etree._Element, ...]:
    """The elements the reference keeps, in document order, the root included.

    A node is kept when its role is on the reference's list, it is visible (and
    showing, on ubuntu), enabled/editable/expandable/checkable, has a name or text
    (or, with `check_image`, `image="true"`), and has a non-negative position and a
    positive size.
    """
    keys = platform_keys(platform)
    # libxml2 narrows the walk to elements that carry the required state at all
    # (few, on large trees; XPath keeps document order), then Python applies
    # every rule exactly.
    required = "showing" if keys.showing is not None else "visible"
    candidates = etree.XPath(
        f"descendant-or-self::*[@s:{required}]", namespaces={"s": keys.state_ns}
    )
    showing, visible = keys.showing, keys.visible
    enabled, editable, expandable, checkable = keys.usable
    position_key, size_key = keys.screencoord, keys.size
    roles: dict[str, bool] = {}
    kept: list[etree._Element] = []
    for node in cast(list[etree._Element], candidates(root)):
        tag = cast(str, node.tag)
        role_kept = roles.get(tag)
        if role_kept is None:
            role_kept = roles[tag] = _role_kept(tag)
        if not role_kept:
            continue
        get = node.get
        if get(visible) != "true" or (showing is not None and get(showing) != "true"):
            continue
        if not (
            get(enabled) == "true"
            or get(editable) == "true"
            or get(expandable) == "true"
            or get(checkable) == "true"
        ):
            continue
        if not (get("name") or node.text or (check_image and get("image") == "true")):
            continue
        if _geometry_kept(get(position_key, "(-1, -1)"), get(size_key, "(-1, -1)")):
            kept.append(node)
    return tuple(kept)


# --- the table ---------------------------------------------------------------


def _quoted(text: str) -> str:
    return '"' + text.replace('"', '""') + '"' if '"' in text else text


def text_cell(node: etree._Element, keys: PlatformKeys) -> str:
    """The text column: the element text, else an EditWrapper's value, else `""`.

    Text holding `"` is wrapped in quotes with every inner `"` doubled.
    """
    text = node.text
    if text:
        return _quoted(text)
    if node.get(_WINDOWS_CLASS_KEY, "").endswith("EditWrapper"):
        value = node.get(keys.value)
        if value:
            return _quoted(value)
    return '""'


@attrs.frozen
class LinearizedTable:
    """A linearized table and where each kept node's position and size stand in it.

    `geometry` has one `(position, size, end)` triple of offsets into `text` per row:
    the row's position column is `text[position:size - 1]`, its size column
    `text[size:end]`. Cell text may hold tabs, newlines and pairs of its own; only
    these spans are a node's geometry.
    """

    text: str = attrs.field(repr=False)
    geometry: tuple[tuple[int, int, int], ...] = attrs.field(repr=False)


def linearize_table(
    xml: str | bytes, platform: Platform = "ubuntu", *, ubuntu_attributes: bool = False
) -> LinearizedTable:
    """`linearize_accessibility_tree`'s table, with where each row's position and size are.

    >>> table = linearize_table(
    ...     '<r xmlns:st="https://accessibility.ubuntu.example.org/ns/state"'
    ...     ' xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">'
    ...     '<push-button name="OK" st:showing="true" st:visible="true" st:enabled="true"'
    ...     ' cp:screencoord="(10, 20)" cp:size="(80, 30)"/></r>'
    ... )
    >>> [(table.text[p : s - 1], table.text[s:e]) for p, s, e in table.geometry]
    [('(10, 20)', '(80, 30)')]
    """
    keys = platform_keys(platform, ubuntu_attributes=ubuntu_attributes)
    nodes = filter_nodes(parse_accessibility_tree(xml), platform)
    rows = [LINEARIZED_HEADER]
    geometry: list[tuple[int, int, int]] = []
    end = len(LINEARIZED_HEADER)
    position_key, size_key = keys.screencoord, keys.size
    class_key, description_key = keys.class_, keys.description
    for node in nodes:
        get = node.get
        head = "\t".join(
            (
                cast(str, node.tag),
                get("name", ""),
                text_cell(node, keys),
                get(class_key, ""),
                get(description_key, ""),
            )
        )
        position, size = get(position_key, ""), get(size_key, "")
        rows.append(f"{head}\t{position}\t{size}")
        position_at = end + 1 + len(head) + 1
        size_at = position_at + len(position) + 1
        end = size_at + len(size)
        geometry.append((position_at, size_at, end))
    return LinearizedTable("\n".join(rows), tuple(geometry))


def linearize_accessibility_tree(
    xml: str | bytes, platform: Platform = "ubuntu", *, ubuntu_attributes: bool = False
) -> str:
    """The tab-separated table of the kept nodes, byte-identical to the reference's.

    One header line, then one row per kept node: tag, name, text, class,
    description, position and size. With `ubuntu_attributes=True` the class and
    description columns of ubuntu trees come from the real ubuntu attributes
    namespace instead of the (empty) windows one the reference reads.

    >>> print(linearize_accessibility_tree(
    ...     '<r xmlns:st="https://accessibility.ubuntu.example.org/ns/state"'
    ...     ' xmlns:cp="https://accessibility.ubuntu.example.org/ns/component">'
    ...     '<push-button name="OK" st:showing="true" st:visible="true" st:enabled="true"'
    ...     ' cp:screencoord="(10, 20)" cp:size="(80, 30)"/></r>'
    ... ).replace("\\t", "|"))
    tag|name|text|class|description|position (top-left x&y)|size (w&h)
    push-button|OK|""|||(10, 20)|(80, 30)
    """
    return linearize_table(xml, platform, ubuntu_attributes=ubuntu_attributes).text
