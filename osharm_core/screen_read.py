"""What a step's actions would do, read without running them: the lines they type and the
commands they run.

pyautogui code is read through its syntax tree (`ast.parse`, never executed):
`pyautogui.write` / `typewrite` / `press` / `hotkey` feed a keyboard, and calls that reach
the system (`os.system`, `subprocess.*`, `shutil.rmtree`, `open`, `requests.post`, a
socket's `connect`, ...) become the shell command line that would do the same, so one
table of shell rules reads both (`adapters`-free: see `osharm_core.screen_rules`).
computer_13 actions feed the same keyboard (`TYPING`, `PRESS`, `HOTKEY`). The keyboard
is shared by a step's actions, so a command typed in two pieces is read whole, once it is
finished (Enter) or the step ends, and each line is charged to the last action that typed
into it.

>>> [r.typed for r in read_actions(["pyautogui.write('ls -la ~')\\npyautogui.press('enter')"])]
[('ls -la ~',)]
>>> read_actions(["import shutil; shutil.rmtree('/home/user')"])[0].runs
('rm -r -f /home/user',)
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, TypeVar

import attrs

from osharm_core.state import Action, StoredAction

_Node = TypeVar("_Node", ast.Assign, ast.Call)

#: The most characters of one action that are read (a reply is bounded far below this).
MAX_ACTION_CHARS: Final = 200_000
#: How deep a string expression is folded (`"a" + ("b" + ...)`); deeper parts read as `_`.
MAX_FOLD_DEPTH: Final = 24
#: The most key presses one `press(..., presses=N)` is read as.
MAX_PRESSES: Final = 64
#: The file name the code of a screened action is parsed under: what Python warns about it
#: (an odd escape, `1st`) names this file, so the edge can silence it (the code never runs).
SCREENED_CODE: Final = "<screened action>"
#: What an expression whose value cannot be known reads as inside a string.
UNKNOWN: Final = "_"


@attrs.frozen
class ActionReading:
    """What one action would do: the lines of text it types (each as it stands once the
    action has typed into it) and the shell command lines it would run itself."""

    typed: tuple[str, ...] = ()
    runs: tuple[str, ...] = ()

    @property
    def lines(self) -> tuple[str, ...]:
        """Every command line to screen: typed, then run."""
        return self.typed + self.runs


# --- the keyboard ------------------------------------------------------------------

_NAMED_TEXT: Final = {"space": " ", "tab": "\t", "enter": "\n", "return": "\n"}
#: Key combinations that throw the line being typed away (interrupt, kill line, EOF).
_CLEARS: Final = frozenset({("ctrl", "c"), ("ctrl", "u"), ("ctrl", "d")})
#: The characters a terminal line reacts to: line ends and backspace.
_CONTROLS: Final = re.compile(r"([\r\n]|\x08+)")
_SHIFTED: Final = dict(zip("1234567890-=[]\\;',./`", '!@#$%^&*()_+{}|:"<>?~', strict=True))


class _Keyboard:
    """The line a terminal would hold as keys arrive. A line is read once it is finished (Enter)
    or the step ends with it unfinished, and is charged to the last action that typed into
    it: that action is the one to withhold for the line not to be run as typed."""

    def __init__(self) -> None:
        self.chars: list[str] = []  # the line so far
        self.action = 0  # the action the keys come from
        self.typer: int | None = None  # the last action that typed into the line
        self.lines: list[tuple[int, str]] = []

    def text(self, text: str) -> None:
        for piece in _CONTROLS.split(text[:MAX_ACTION_CHARS]):
            if piece in ("\r", "\n"):
                self._enter()
            elif piece.startswith("\b"):
                del self.chars[-len(piece) :]
            elif piece:
                self.chars.extend(piece)
                self.typer = self.action

    def key(self, name: str) -> None:
        key = name.lower()
        if key in _NAMED_TEXT:
            self.text(_NAMED_TEXT[key])
        elif key == "backspace":
            self.text("\b")
        elif len(name) == 1:
            self.text(name)

    def combo(self, keys: Sequence[str]) -> None:
        lowered = tuple(k.lower() for k in keys)
        if lowered in _CLEARS or lowered[-2:] in _CLEARS:
            self.chars, self.typer = [], None
        elif len(lowered) == 2 and lowered[0] == "shift" and len(keys[1]) == 1:
            self.text(_SHIFTED.get(keys[1], keys[1].upper()))
        elif len(lowered) == 1:
            self.key(keys[0])

    def _enter(self) -> None:
        if self.typer is not None:
            self.lines.append((self.typer, "".join(self.chars)))
        self.chars, self.typer = [], None

    def typed_by(self, count: int) -> list[tuple[str, ...]]:
        """The lines each of `count` actions is charged with, the unfinished one included."""
        self._enter()
        charged: list[list[str]] = [[] for _ in range(count)]
        for action, line in self.lines:
            charged[action].append(line)
        return [tuple(lines) for lines in charged]


# --- computer_13 -------------------------------------------------------------------


def _param(action: Mapping[str, Any], name: str) -> object:
    nested = action.get("parameters")
    match nested:
        case Mapping() if name in nested:
            return nested[name]
    return action.get(name)


def _strings(value: object) -> list[str]:
    match value:
        case str():
            return [value]
        case list() | tuple():
            return [v for v in value if type(v) is str]
    return []


def _computer_13(action: Mapping[str, Any], keyboard: _Keyboard) -> None:
    match action.get("action_type"):
        case "TYPING":
            keyboard.text("".join(_strings(_param(action, "text"))))
        case "PRESS":
            for key in _strings(_param(action, "key")):
                keyboard.key(key)
        case "HOTKEY":
            keyboard.combo(_strings(_param(action, "keys")))


# --- pyautogui code ----------------------------------------------------------------


class _Code:
    """One code action's syntax tree, read call by call in source order."""

    def __init__(self, tree: ast.Module) -> None:
        self.aliases: dict[str, str] = {}
        self.names: dict[str, str] = {}
        assigns: list[ast.Assign] = []
        calls: list[ast.Call] = []
        for node in _walk(tree):
            match node:
                case ast.Import(names=names):
                    for alias in names:
                        self.aliases[alias.asname or alias.name] = alias.name
                case ast.ImportFrom(module=str(module), names=names):
                    for alias in names:
                        self.aliases[alias.asname or alias.name] = f"{module}.{alias.name}"
                case ast.Assign(targets=[ast.Name()]):
                    assigns.append(node)
                case ast.Call():
                    calls.append(node)
        for assign in _in_order(assigns):
            folded = self.fold(assign.value)
            if folded is not None:
                self.names[assign.targets[0].id] = folded  # type: ignore[attr-defined]
        self.calls: list[ast.Call] = _in_order(calls)

    def dotted(self, node: ast.expr) -> str:
        """`os.path.join` for that expression, aliases resolved; `?.name` for a method of
        anything else."""
        match node:
            case ast.Name(id=name):
                return self.aliases.get(name, name)
            case ast.Attribute(value=value, attr=attr):
                return f"{self.dotted(value)}.{attr}"
        return "?"

    def fold(self, node: ast.AST | None, depth: int = 0) -> str | None:
        """The string an expression evaluates to, as far as it can be known without running
        it (unknown parts read `UNKNOWN`); `None` when it is not a string at all."""
        if node is None or depth > MAX_FOLD_DEPTH:
            return None
        deeper = depth + 1
        match node:
            case ast.Constant(value=str(value)):
                return value
            case ast.Constant(value=bytes(value)):
                return value.decode("latin-1")
            case ast.Name(id=name):
                return self.names.get(name)
            case ast.JoinedStr(values=values):
                return "".join(self._part(v, deeper) for v in values)
            case ast.BinOp(left=left, op=ast.Add(), right=right):
                return self._joined((left, right), "", deeper)
            case ast.BinOp(left=left, op=ast.Div(), right=right):
                return self._joined((left, right), "/", deeper)
            case ast.Subscript(value=ast.Attribute(attr="environ"), slice=key):
                return _environ(self.fold(key, deeper))
            case ast.Call(func=func, args=args):
                return self._call(self.dotted(func), func, args, deeper)
        return None

    def _part(self, node: ast.expr, depth: int) -> str:
        match node:
            case ast.FormattedValue(value=value):
                return self.fold(value, depth) or UNKNOWN
        return self.fold(node, depth) or UNKNOWN

    def _joined(self, parts: Iterable[ast.expr], separator: str, depth: int) -> str | None:
        folded = [self.fold(p, depth) for p in parts]
        if all(f is None for f in folded):
            return None
        return separator.join(UNKNOWN if f is None else f for f in folded)

    def _call(self, name: str, func: ast.expr, args: list[ast.expr], depth: int) -> str | None:
        last = name.rsplit(".", 1)[-1]
        if name in ("os.path.join", "posixpath.join"):
            return self._joined(args, "/", depth)
        if last in ("expanduser", "abspath", "realpath", "normpath", "str", "Path", "PurePath"):
            return self.fold(args[0], depth) if args else None
        if last == "home" or (
            last in ("getenv", "get") and args and self.fold(args[0], depth) == "HOME"
        ):
            return "~"
        match func:
            case ast.Attribute(value=ast.Constant(value=str(separator)), attr="join") if args:
                match args[0]:
                    case ast.List(elts=items) | ast.Tuple(elts=items):
                        return self._joined(items, separator, depth)
            case ast.Attribute(value=template, attr="format"):
                text = self.fold(template, depth)
                return None if text is None else _format(text, [self._part(a, depth) for a in args])
        return None

    def argv(self, node: ast.expr) -> str | None:
        """A command given as a string, or as a list of arguments (then quoted as a shell
        would need them)."""
        match node:
            case ast.List(elts=items) | ast.Tuple(elts=items):
                return self.words(items)
        return self.fold(node)

    def words(self, items: list[ast.expr]) -> str:
        """Arguments as one command line, each quoted as a shell would need it."""
        return shlex.join(self._part(item, 0) for item in items)


#: Nodes that hold no call, no import and no assignment: the walk does not go into them.
_LEAVES: Final = (
    ast.Constant,
    ast.Name,
    ast.expr_context,
    ast.operator,
    ast.alias,
    ast.cmpop,
    ast.unaryop,
    ast.boolop,
)


def _walk(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of `tree` but the leaves, in no particular order (`ast.walk`, faster)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for name in node._fields:
            value = getattr(node, name, None)
            if type(value) is list:
                stack.extend(
                    v for v in value if isinstance(v, ast.AST) and not isinstance(v, _LEAVES)
                )
            elif isinstance(value, ast.AST) and not isinstance(value, _LEAVES):
                stack.append(value)


def _in_order(nodes: list[_Node]) -> list[_Node]:
    """`nodes` in source order."""
    return sorted(nodes, key=lambda node: (node.lineno, node.col_offset))


def _environ(key: str | None) -> str | None:
    return "~" if key == "HOME" else None


def _format(template: str, values: list[str]) -> str:
    """`template` with each `{}` filled in turn (other fields left as they are)."""
    parts = template.split("{}")
    filled = [p + (values[i] if i < len(values) else UNKNOWN) for i, p in enumerate(parts[:-1])]
    return "".join(filled) + parts[-1]


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _has_keyword(call: ast.Call, *names: str) -> bool:
    return any(k.arg in names for k in call.keywords)


#: Calls that run a command line (a string, or a list of arguments) in a shell or process.
_RUNS: Final = frozenset(
    {
        "os.system",
        "os.popen",
        "subprocess.run",
        "subprocess.call",
        "subprocess.check_call",
        "subprocess.check_output",
        "subprocess.Popen",
        "subprocess.getoutput",
        "subprocess.getstatusoutput",
        "pty.spawn",
        "asyncio.create_subprocess_shell",
        "asyncio.create_subprocess_exec",
    }
)
_EXEC_PREFIXES: Final = ("os.exec", "os.spawn", "os.posix_spawn")
_DELETES: Final = {"shutil.rmtree": "rm -r -f", "os.remove": "rm", "os.unlink": "rm"}
_COPIES: Final = frozenset(
    {"shutil.copy", "shutil.copy2", "shutil.copyfile", "shutil.copytree", "shutil.move"}
)
_SENDS: Final = frozenset({"post", "put", "patch", "urlopen", "Request", "request"})
_SENDERS: Final = ("requests", "httpx", "urllib", "aiohttp", "session", "client", "?")
_READ_METHODS: Final = frozenset({"read_text", "read_bytes", "open"})
_WRITE_METHODS: Final = frozenset({"write_text", "write_bytes"})


def _quoted(text: str | None) -> str:
    return shlex.quote(UNKNOWN if text is None else text)


class _Reader:
    """Reads one code action's calls into keyboard input and command lines."""

    def __init__(self, code: _Code, keyboard: _Keyboard) -> None:
        self.code, self.keyboard = code, keyboard
        self.runs: list[str] = []

    def read(self) -> None:
        for call in self.code.calls:
            name = self.code.dotted(call.func)
            if name.startswith("pyautogui."):
                self._keys(name.removeprefix("pyautogui."), call)
            else:
                command = self._command(name, call)
                if command is not None:
                    self.runs.append(command)

    def _keys(self, name: str, call: ast.Call) -> None:
        args, fold = call.args, self.code.fold
        match name:
            case "write" | "typewrite" if args:
                match args[0]:
                    case ast.List(elts=items) | ast.Tuple(elts=items):
                        for item in items:
                            self.keyboard.key(fold(item) or "")
                    case text:
                        self.keyboard.text(fold(text) or "")
            case "press" if args:
                keys = self._key_list(args[0])
                times = _count(_keyword(call, "presses"))
                for _ in range(times):
                    for key in keys:
                        self.keyboard.key(key)
            case "hotkey":
                self.keyboard.combo([k for a in args for k in self._key_list(a)])

    def _key_list(self, node: ast.expr) -> list[str]:
        match node:
            case ast.List(elts=items) | ast.Tuple(elts=items):
                return [k for item in items if (k := self.code.fold(item)) is not None]
        key = self.code.fold(node)
        return [] if key is None else [key]

    def _command(self, name: str, call: ast.Call) -> str | None:
        args, fold = call.args, self.code.fold
        first = fold(args[0]) if args else None
        last = name.rsplit(".", 1)[-1]
        if name in _RUNS or name.startswith(_EXEC_PREFIXES):
            return self._run(name, args)
        if name in _DELETES:
            return f"{_DELETES[name]} {_quoted(first)}"
        if name == "os.chmod" and len(args) > 1:
            return _chmod(args[1], first)
        if name in _COPIES and len(args) > 1:
            return f"cp -r {_quoted(first)} {_quoted(fold(args[1]))}"
        if name in ("open", "io.open", "builtins.open", "codecs.open") and args:
            return _open(first, fold(args[1]) if len(args) > 1 else fold(_keyword(call, "mode")))
        if name.startswith("?.") and last in _READ_METHODS | _WRITE_METHODS | {"unlink", "chmod"}:
            return self._path_method(call, last)
        if last in _SENDS and name.split(".")[0] in _SENDERS and first and "://" in first:
            sends = _has_keyword(call, "data", "files", "json", "content") or len(args) > 1
            return f"curl --upload-file - {_quoted(first)}" if sends else None
        return self._connects(name, last, args)

    def _run(self, name: str, args: list[ast.expr]) -> str | None:
        if not args:
            return None
        if name.startswith(_EXEC_PREFIXES):
            # (path, argv...) or (mode, path, argv): the argument list is the last one given.
            return self.code.argv(args[-1]) if len(args) > 1 else self.code.argv(args[0])
        if name == "asyncio.create_subprocess_exec":
            return self.code.words(args)
        return self.code.argv(args[0])

    def _path_method(self, call: ast.Call, method: str) -> str | None:
        path = None
        match call.func:
            case ast.Attribute(value=receiver):
                path = self.code.fold(receiver)
        if path is None:
            return None
        if method == "unlink":
            return f"rm {_quoted(path)}"
        if method == "chmod":
            return _chmod(call.args[0], path) if call.args else None
        if method == "open":
            return _open(path, self.code.fold(call.args[0]) if call.args else None)
        return f"{'cat' if method in _READ_METHODS else 'tee'} {_quoted(path)}"

    def _connects(self, name: str, last: str, args: list[ast.expr]) -> str | None:
        if last in ("connect", "create_connection", "connect_ex") and args:
            match args[0]:
                case ast.Tuple(elts=[host, port, *_]):
                    return f"nc {_quoted(self.code.fold(host))} {_number(port)}"
        if name.startswith(("smtplib.", "ftplib.")) and args:
            return f"nc {_quoted(self.code.fold(args[0]))} 25"
        return None


def _count(node: ast.expr | None) -> int:
    match node:
        case ast.Constant(value=bool()):
            return 1
        case ast.Constant(value=int(value)):
            return max(0, min(value, MAX_PRESSES))
    return 1


def _number(node: ast.expr) -> str:
    match node:
        case ast.Constant(value=int(value)):
            return str(value)
    return "0"


def _chmod(mode: ast.expr, path: str | None) -> str:
    match mode:
        case ast.Constant(value=bool()):
            pass
        case ast.Constant(value=int(value)):
            return f"chmod {value:o} {_quoted(path)}"
    return f"chmod {UNKNOWN} {_quoted(path)}"


def _open(path: str | None, mode: str | None) -> str:
    """The command reading (`cat`) or writing (`tee`) the file `open(path, mode)` opens."""
    writes = mode is not None and any(c in mode for c in "wax+")
    return f"{'tee' if writes else 'cat'} {_quoted(path)}"


def _parsed(code: str) -> ast.Module | None:
    """The syntax tree of a code action, or `None` when Python would not run it either (a
    syntax error, nesting too deep to parse)."""
    try:
        return ast.parse(code[:MAX_ACTION_CHARS], filename=SCREENED_CODE)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


#: Words without one of which code can neither type nor reach the system (it only clicks,
#: moves, scrolls or sleeps): such code is not parsed at all. Every name the reader knows
#: holds one, whatever it is imported as (an import names the original).
_MAY_ACT: Final = re.compile(
    r"write|press|hotkey|system|popen|subprocess|spawn|exec|rmtree|remove|unlink|chmod|copy"
    r"|move|open|read_|post|put|patch|url|request|Request|connect|SMTP|FTP|pty"
)


def _code(code: str, keyboard: _Keyboard) -> tuple[str, ...]:
    if _MAY_ACT.search(code) is None:
        return ()
    tree = _parsed(code)
    if tree is None:
        return ()
    try:
        reader = _Reader(_Code(tree), keyboard)
        reader.read()
    except RecursionError:  # a tree too deep to walk: what was read so far stands
        return ()
    return tuple(reader.runs)


def read_actions(actions: Sequence[Action | StoredAction]) -> tuple[ActionReading, ...]:
    """What each of a step's actions would do (see the module doc): one `ActionReading`
    per action, in order. Never raises, whatever the actions hold.

    >>> [r.typed for r in read_actions([
    ...     {"action_type": "TYPING", "text": "rm -rf "},
    ...     {"action_type": "TYPING", "parameters": {"text": "~"}},
    ...     {"action_type": "PRESS", "key": "enter"},
    ... ])]
    [(), ('rm -rf ~',), ()]
    """
    keyboard = _Keyboard()
    runs: list[tuple[str, ...]] = []
    for index, action in enumerate(actions):
        keyboard.action = index
        match action:
            case str() if action.strip() not in ("WAIT", "DONE", "FAIL"):
                runs.append(_code(action, keyboard))
                continue
            case Mapping():
                _computer_13(action, keyboard)
        runs.append(())
    typed = keyboard.typed_by(len(actions))
    return tuple(ActionReading(t, r) for t, r in zip(typed, runs, strict=True))


def lines_of(reading: ActionReading) -> Iterator[str]:
    """Each command line of a reading (typed lines split at their line ends)."""
    for line in reading.lines:
        yield from line.splitlines() or [line]


__all__ = [
    "MAX_ACTION_CHARS",
    "MAX_FOLD_DEPTH",
    "MAX_PRESSES",
    "SCREENED_CODE",
    "UNKNOWN",
    "ActionReading",
    "lines_of",
    "read_actions",
]
