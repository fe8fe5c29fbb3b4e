"""A task's setup steps (its `config` list) performed through the OSWorld VM server.

An OSWorld task's `config` is a list of `{"type": T, "parameters": {...}}`
steps that OSWorld's `SetupController` performs in order before the first
observation. `plan_setup` checks a whole list first (every step's type and
fields; nothing is sent for a list with any problem) and `ServerSetup` then
performs the steps through the server's `/setup/...` endpoints:

========================== ===============================================================
type                       what is sent
========================== ===============================================================
launch                     `POST /setup/launch` `{"command", "shell"}`; a string command
                           with spaces and `shell` false is split on whitespace first, as
                           OSWorld's client does
execute, command           `POST /setup/execute` `{"command", "shell"}`, with OSWorld's
                           placeholders (`{CLIENT_PASSWORD}`, `{SCREEN_WIDTH}`,
                           `{SCREEN_HEIGHT}`, `{SCREEN_WIDTH_HALF}`,
                           `{SCREEN_HEIGHT_HALF}`) filled in; with `until`
                           (`returncode` / `stdout` / `stderr`) it is repeated every
                           0.3 s until the answer matches; each answer is awaited
                           longer than the server lets the command run (120 s)
execute_with_verification  `POST /setup/execute_with_verification` `{"command", "shell",
                           "verification", "max_wait_time", "check_interval"}`; the
                           answer is awaited 120 s + `max_wait_time` and a margin
                           (the server runs the command, then verifies)
sleep                      nothing sent: waits `seconds`
open                       `POST /setup/open_file` `{"path"}` (the server waits, up to
                           30 minutes, for the file's window)
activate_window,           `POST /setup/activate_window` / `/setup/close_window`
close_window               `{"window_name", "strict", "by_class"}`
change_wallpaper           `POST /setup/change_wallpaper` `{"path"}`
download                   for each of `files` (`{"url", "path"}`): this host GETs the
                           URL (streamed, at most `max_download_bytes`, redirects
                           followed, 3 tries on connection errors and 5xx) and uploads
                           it with `POST /setup/upload`, a multipart form whose field
                           `file_path` is the VM path and whose file part `file_data`
                           is the content
========================== ===============================================================

Types whose work OSWorld does on its own host (`HOST_SIDE_SETUP_TYPES`:
Chrome DevTools tabs and logins, Google Drive, a proxy pool, browser-history
databases, host files) are refused before any step runs, with a
`TaskSetupError` naming them: such a task needs OSWorld's `DesktopEnv`
(through `DesktopEnvAdapter`).

Failures: OSWorld stops setting up at the first step that raises; here every
failed step raises, so the first failed request (an HTTP error, a status
other than 200, a download that fails) is a `TaskSetupError` naming the
step (`config[i]`, its type) and the endpoint, and no later step runs; a
request that gets no answer is a `VmUnanswered` (`OSWorldServerEnv` makes it
the task's `TaskSetupError` when the VM still answers after it). (OSWorld
only logs a failed launch, window or wallpaper request and goes on; a task
started on a half-prepared desktop would measure the wrong thing, so here it
stops.) As in OSWorld, an `execute` whose command exits non-zero is no
failure unless `until` asks for a return code; its `stdout` / `stderr` file
names (files OSWorld's evaluators read on the host) are accepted and unused.

A `client_password` of its own (not OSWorld's default, 4 characters or more)
never appears in what `ServerSetup` raises: the server's answer to a command
that overran quotes the command, so it is redacted (`adapters.runs._secrets`)
before it is quoted, and every error leaving `run` or `perform` is scrubbed.
"""

from __future__ import annotations

import math
import re
import tempfile
import time
from collections.abc import Callable, Mapping
from types import UnionType
from typing import IO, Any, Final, cast

import attrs
import httpx
from returns.pipeline import is_successful
from returns.result import Failure, Result, Success

from adapters.engine.body import ACCEPT_ENCODING
from adapters.engine.deadline import cut_short, stream_until
from adapters.errors import TaskSetupError
from adapters.runs import vm_http
from adapters.runs._secrets import Redactor, redacting
from adapters.runs.vm_answers import json_object
from adapters.runs.vm_http import (
    DEFAULT_MAX_ANSWER_BYTES,
    TRANSFER_SECONDS,
    answer_seconds,
    copy_within,
    outlasting_commands,
    stopped,
    vm_answer,
)
from adapters.runs.vm_json import json_body
from osharm_core.config import check_password
from osharm_core.errors import excerpt
from osharm_core.vocabulary import DEFAULT_SCREEN_SIZE

#: The setup types performed through the VM server.
SERVER_SETUP_TYPES: Final = (
    "launch",
    "execute",
    "command",
    "execute_with_verification",
    "sleep",
    "open",
    "activate_window",
    "close_window",
    "change_wallpaper",
    "download",
)
#: Setup types OSWorld performs with machinery on its own host, and what that is.
HOST_SIDE_SETUP_TYPES: Final[Mapping[str, str]] = {
    "chrome_open_tabs": "Chrome DevTools (Playwright)",
    "chrome_close_tabs": "Chrome DevTools (Playwright)",
    "login": "Chrome DevTools (Playwright) and a credentials file",
    "googledrive": "Google Drive credentials",
    "update_browse_history": "a Chrome history database edited on the host",
    "proxy": "a proxy pool",
    "upload_file": "files on the host",
    "tidy_desktop": "nothing: OSWorld does not implement it",
    "act": "nothing: OSWorld does not implement it",
    "replay": "nothing: OSWorld does not implement it",
}
#: The largest file a `download` step fetches (1 GiB).
DEFAULT_MAX_DOWNLOAD_BYTES: Final = 1 << 30
#: OSWorld's VM password for the `{CLIENT_PASSWORD}` placeholder (its non-AWS default).
DEFAULT_CLIENT_PASSWORD: Final = "password"
#: The longest `sleep` step accepted (a longer one is taken for a mistake).
MAX_SLEEP_SECONDS: Final = 600.0
#: How often an `execute` step with `until` is repeated before it fails (OSWorld: no limit).
MAX_UNTIL_TRIES: Final = 200
UNTIL_INTERVAL: Final = 0.3
#: How long `open` may wait for its window: the server's own 1800 s limit, and a margin.
OPEN_TIMEOUT: Final = 1810.0
UPLOAD_TIMEOUT: Final = 600.0
#: Seconds waited before the second and the third try of a download that failed (a 5xx or
#: a broken connection): a busy file server gets a moment instead of three requests at once.
DOWNLOAD_WAITS: Final = (2.0, 5.0)
DOWNLOAD_TRIES: Final = 1 + len(DOWNLOAD_WAITS)

_REQUIRED: Final = object()
#: What a `download` file's VM path cannot hold: UTF-8 (its multipart form field) has no
#: code for a surrogate (a lone one, from a file name read with `surrogateescape`).
_SURROGATE: Final = re.compile("[\ud800-\udfff]")

#: A parameter's checker: `None` when the value will do, else what is wrong with it.
Checker = Callable[[object], "str | None"]


def _kind(value: object) -> str:
    return type(value).__name__


def _typed(value: object, want: type | UnionType, noun: str) -> str | None:
    """`None` when `value` is a `want` (a bool only where bool is wanted: JSON's `true` is
    no number), else that `noun` was expected and what came instead."""
    if isinstance(value, want) and (want is bool or not isinstance(value, bool)):
        return None
    return f"expected {noun}, got {_kind(value)} {excerpt(value)}"


def _at(place: str, problem: str | None) -> str | None:
    """`problem` as said of `place` (a field, `[index]`, `.name`), or `None`."""
    if problem is None:
        return None
    return place + ("" if problem[0] in "[." else ": ") + problem


def _items(values: list[Any], check: Checker) -> str | None:
    """The first problem `check` finds in `values`, at its `[index]`."""
    return next(filter(None, (_at(f"[{i}]", check(v)) for i, v in enumerate(values))), None)


def _text(value: object) -> str | None:
    if value == "":
        return "expected a non-empty string, got ''"
    return _typed(value, str, "a non-empty string")


def _any_text(value: object) -> str | None:
    return _typed(value, str, "a string")


def _bool(value: object) -> str | None:
    return _typed(value, bool, "true or false")


def _command(value: object) -> str | None:
    if isinstance(value, str):
        return None if value.strip() else "expected a command, got an empty string"
    if value == []:
        return "expected a string or a non-empty list of strings, got []"
    problem = _typed(value, list, "a string or a non-empty list of strings")
    return problem or _items(cast("list[object]", value), _any_text)


def _number(value: object, high: float) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return f"expected a number of seconds, got {_kind(value)} {excerpt(value)}"
    if not (0 <= value <= high and math.isfinite(value)):
        return f"{excerpt(value)} is outside 0..{high:g}"
    return None


def _seconds(value: object) -> str | None:
    return _number(value, MAX_SLEEP_SECONDS)


def _wait_seconds(value: object) -> str | None:
    return _number(value, OPEN_TIMEOUT)


def _fields(value: object, kinds: Mapping[str, type]) -> str | None:
    """`None` when `value` is an object whose fields are among `kinds`, each of its type."""
    if not isinstance(value, dict):
        return f"expected an object, got {_kind(value)} {excerpt(value)}"
    for name, item in value.items():
        want = kinds.get(name)
        if want is None:
            return f"unknown field {excerpt(name)}; known: {', '.join(kinds)}"
        problem = _at(name, _typed(item, want, want.__name__))
        if problem is not None:
            return problem
    return None


def _until(value: object) -> str | None:
    if value is None:
        return None
    return _fields(value, {"returncode": int, "stdout": str, "stderr": str})


def _verification(value: object) -> str | None:
    return _fields(value, {"window_exists": str, "command_success": str})


def _files(value: object) -> str | None:
    if value == []:
        return "expected a non-empty list of {url, path} objects, got []"
    problem = _typed(value, list, "a non-empty list of {url, path} objects")
    return problem or _items(cast("list[object]", value), _file)


def _file(item: object) -> str | None:
    """What is wrong with one `{url, path}` object of a download's `files`, or `None`."""
    if not isinstance(item, dict) or set(item) != {"url", "path"}:
        return f"expected an object with exactly url and path, got {excerpt(item)}"
    path = item["path"]
    problem = _at(".url", _url(item["url"])) or _at(".path", _text(path))
    if problem is None and _SURROGATE.search(path):
        return ".path: holds a lone surrogate, which the upload cannot carry"
    return problem


def _url(url: object) -> str | None:
    """What keeps `url` from being fetched, found before anything is sent, or `None`."""
    problem = _text(url)
    if problem is not None:
        return problem
    try:
        parsed = httpx.URL(cast(str, url))  # a str: `_text` saw to it
        if parsed.scheme not in ("http", "https"):
            return f"not an http(s) URL: {excerpt(url)}"
        # httpx decodes an `xn--` label here and the socket layer IDNA-encodes the host
        # to look it up: either refuses a label over 63 characters, an empty or a malformed one.
        if not parsed.host:
            return f"no host name: {excerpt(url)}"
        parsed.raw_host.decode("ascii").encode("idna")
    except UnicodeError as exc:  # IDNAError and UnicodeDecodeError are UnicodeErrors
        return f"a host name that cannot be looked up ({exc}): {excerpt(url)}"
    except (httpx.InvalidURL, TypeError, ValueError):
        return f"not an http(s) URL: {excerpt(url)}"
    return None


_COMMAND: Final[dict[str, tuple[Checker, object]]] = {
    "command": (_command, _REQUIRED),
    "shell": (_bool, False),
}
_WINDOW: Final[dict[str, tuple[Checker, object]]] = {
    "window_name": (_text, _REQUIRED),
    "strict": (_bool, False),
    "by_class": (_bool, False),
}
#: Each server-side type's parameters: checker and default (`_REQUIRED`: no default).
_PARAMS: Final[Mapping[str, Mapping[str, tuple[Checker, object]]]] = {
    "launch": _COMMAND,
    "execute": {
        **_COMMAND,
        "stdout": (_any_text, ""),
        "stderr": (_any_text, ""),
        "until": (_until, None),
    },
    "execute_with_verification": {
        **_COMMAND,
        "verification": (_verification, {}),
        "max_wait_time": (_wait_seconds, 10),
        "check_interval": (_seconds, 1.0),
    },
    "sleep": {"seconds": (_seconds, _REQUIRED)},
    "open": {"path": (_text, _REQUIRED)},
    "activate_window": _WINDOW,
    "close_window": _WINDOW,
    "change_wallpaper": {"path": (_text, _REQUIRED)},
    "download": {"files": (_files, _REQUIRED)},
}


@attrs.frozen
class SetupStep:
    """One checked setup step: its place in `config`, its type, its parameters (defaults filled in)."""

    index: int
    kind: str
    params: Mapping[str, Any]

    @property
    def where(self) -> str:
        """`config[i] (type)`, how errors name the step."""
        return f"setup config[{self.index}] ({self.kind})"


def _step(index: int, raw: object) -> Result[SetupStep, str]:
    """The checked step `config[index]`, or what is wrong with it, its place named."""
    where = f"setup config[{index}]"
    if not isinstance(raw, dict):
        return Failure(f"{where}: expected an object, got {_kind(raw)} {excerpt(raw)}")
    kind = raw.get("type")
    if not isinstance(kind, str):
        return Failure(f"{where}.type: expected a string, got {excerpt(kind)}")
    where = f"{where} ({kind})"
    extra = sorted(set(raw) - {"type", "parameters"}, key=str)
    params = raw.get("parameters")
    spec = _PARAMS["execute" if kind == "command" else kind]
    if extra:
        return Failure(f"{where}: unknown field {excerpt(extra[0])}")
    if not isinstance(params, dict):
        return Failure(
            f"{where}.parameters: expected an object, got {_kind(params)} {excerpt(params)}"
        )
    unknown = [name for name in params if name not in spec]
    if unknown:
        takes = f"{kind} takes {', '.join(spec)}"
        return Failure(f"{where}.parameters: unknown parameter {excerpt(unknown[0])}; {takes}")
    filled: dict[str, Any] = {}
    for name, (check, default) in spec.items():
        if name in params:
            problem = check(params[name])
        else:
            problem = "missing" if default is _REQUIRED else None
        if problem is not None:
            return Failure(f"{where}.parameters.{_at(name, problem)}")
        filled[name] = params.get(name, default)
    return Success(SetupStep(index, kind, filled))


def _unrunnable(config: object) -> str | None:
    """What keeps a whole `config` from being planned: it is no list, or it has steps of
    types the VM server cannot perform (all named at once), or of unknown types."""
    if not isinstance(config, list):
        return f"setup config: expected a list of steps, got {_kind(config)} {excerpt(config)}"
    typed = (step.get("type") for step in config if isinstance(step, dict))
    kinds: set[str] = {kind for kind in typed if isinstance(kind, str)}
    host_side = sorted(kinds & set(HOST_SIDE_SETUP_TYPES))
    unknown = sorted(kinds - set(_PARAMS) - {"command"})
    if host_side:
        needs = "; ".join(f"{k} needs {HOST_SIDE_SETUP_TYPES[k]}" for k in host_side)
        return (
            f"task setup uses steps the VM server cannot perform ({needs}); "
            "run the task through OSWorld's DesktopEnv (DesktopEnvAdapter)"
        )
    if unknown:
        return (
            f"task setup has unknown step types ({', '.join(map(excerpt, unknown))}); "
            f"known: {', '.join(SERVER_SETUP_TYPES)}"
        )
    return None


def plan_setup(config: object) -> tuple[SetupStep, ...]:
    """The checked steps of a task's `config` (None: none).

    Any type this module cannot perform is refused first, all of them named
    at once; then the first step with a bad field is named. Either way it is
    a `TaskSetupError` and nothing has been sent.

    >>> [s.kind for s in plan_setup([{"type": "sleep", "parameters": {"seconds": 1}}])]
    ['sleep']
    """
    if config is None:
        return ()
    problem = _unrunnable(config)
    steps = [] if problem else cast("list[object]", config)
    planned = [_step(index, raw) for index, raw in enumerate(steps)]
    problem = problem or next((p.failure() for p in planned if not is_successful(p)), None)
    if problem is not None:
        raise TaskSetupError(problem)
    return tuple(step.unwrap() for step in planned)


def fill_placeholders(command: str | list[str], password: str, size: tuple[int, int]) -> Any:
    """`command` with OSWorld's `{CLIENT_PASSWORD}` and screen-size placeholders filled in.

    >>> fill_placeholders(["echo {CLIENT_PASSWORD}", "{SCREEN_WIDTH_HALF}"], "pw", (1920, 1080))
    ['echo pw', '960']
    """
    width, height = size
    values = {
        "{CLIENT_PASSWORD}": password,
        "{SCREEN_WIDTH_HALF}": str(width // 2),
        "{SCREEN_HEIGHT_HALF}": str(height // 2),
        "{SCREEN_WIDTH}": str(width),
        "{SCREEN_HEIGHT}": str(height),
    }

    def fill(text: str) -> str:
        for name, value in values.items():
            text = text.replace(name, value)
        return text

    return fill(command) if isinstance(command, str) else [fill(item) for item in command]


def _until_met(until: Mapping[str, Any], answer: Mapping[str, Any]) -> bool:
    if "returncode" in until and answer.get("returncode") == until["returncode"]:
        return True
    said = {"stdout": answer.get("output"), "stderr": answer.get("error")}
    return any(isinstance(text, str) and until[k] in text for k, text in said.items() if k in until)


class ServerSetup:
    """Performs checked setup steps through the VM server at `base_url` (see the module doc).

    `http` talks to the VM server; downloads use `download_client` (give one
    that follows redirects: task files are often served through one), else a
    client made when first needed, with redirects followed and 120 s read
    timeouts, which `close()` closes.
    """

    def __init__(
        self,
        base_url: str,
        http: httpx.Client,
        *,
        sleep: Callable[[float], None] | None = None,
        download_client: httpx.Client | None = None,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
        client_password: str = DEFAULT_CLIENT_PASSWORD,
        screen_size: tuple[int, int] | Callable[[], tuple[int, int]] = DEFAULT_SCREEN_SIZE,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.max_download_bytes = max_download_bytes
        self.max_answer_bytes = max_answer_bytes
        self.client_password = check_password("client_password", client_password)
        #: Keeps a password of its own out of every error (OSWorld's default is no secret).
        self.redactor = Redactor.of(client_password)
        if client_password == DEFAULT_CLIENT_PASSWORD:
            self.redactor = Redactor()
        #: The VM's screen size, for the `{SCREEN_...}` placeholders (asked only when used).
        self.screen: Callable[[], tuple[int, int]]
        if callable(screen_size):
            self.screen = screen_size
        else:
            fixed = screen_size
            self.screen = lambda: fixed
        self._http = http
        self._sleep = sleep or time.sleep
        self._downloads = download_client
        self._own_downloads = download_client is None

    @redacting
    def run(self, config: object) -> int:
        """Check `config`, then perform its steps in order; how many ran."""
        steps = plan_setup(config)
        for step in steps:
            self.perform(step)
        return len(steps)

    @redacting
    def perform(self, step: SetupStep) -> None:
        """Perform one checked step."""
        p = step.params
        match step.kind:
            case "launch":
                command = p["command"]
                if not p["shell"] and isinstance(command, str) and len(command.split()) > 1:
                    command = command.split()
                self._post(step, "/setup/launch", body={"command": command, "shell": p["shell"]})
            case "execute" | "command":
                self._execute(step)
            case "execute_with_verification":
                body = {
                    "command": p["command"],
                    "shell": p["shell"],
                    "verification": p["verification"],
                    "max_wait_time": p["max_wait_time"],
                    "check_interval": p["check_interval"],
                }
                # The server runs the command (up to COMMAND_SECONDS), then verifies for up
                # to max_wait_time: its answer is awaited longer than both.
                endpoint = "/setup/execute_with_verification"
                self._post(step, endpoint, body=body, command_then=p["max_wait_time"])
            case "sleep":
                self._sleep(float(p["seconds"]))
            case "open":
                self._post(step, "/setup/open_file", body={"path": p["path"]}, timeout=OPEN_TIMEOUT)
            case "activate_window" | "close_window":
                body = {k: p[k] for k in ("window_name", "strict", "by_class")}
                self._post(step, f"/setup/{step.kind}", body=body)
            case "change_wallpaper":
                self._post(step, "/setup/change_wallpaper", body={"path": p["path"]})
            case _:  # download: plan_setup admits nothing else
                for item in p["files"]:
                    self._download(step, item["url"], item["path"])

    def close(self) -> None:
        """Close the download client this object made."""
        if self._own_downloads and self._downloads is not None:
            self._downloads.close()
            self._downloads = None

    def _post(
        self,
        step: SetupStep,
        endpoint: str,
        *,
        body: object = None,
        timeout: float | None = None,
        command_then: float | None = None,
        **kwargs: Any,
    ) -> bytes:
        """POST to `endpoint` (`body`, when given, as ASCII JSON: see `json_body`); the
        answer's body, or a `TaskSetupError` naming the step for a status other than 200.

        `command_then`: the server runs a command (`COMMAND_SECONDS` at most) and then
        waits that many seconds more, so the answer is awaited longer than both (see
        `outlasting_commands`); `timeout`: the answer may take that long to start."""
        where = f"{step.where}: POST {endpoint}"
        extra: dict[str, Any] = {} if body is None else json_body(body)
        if command_then is not None:
            outlasting = outlasting_commands(self._http.timeout, then=command_then)
            read = outlasting.read
            if read is None:
                read = vm_http.COMMAND_SECONDS + command_then + vm_http.COMMAND_MARGIN
            extra.update(timeout=outlasting, seconds=answer_seconds(read))
        elif timeout is not None:  # the answer may take that long to start, and then arrive
            extra.update(timeout=timeout, seconds=answer_seconds(timeout))
        # A VM that does not answer is an EnvironmentFailure (not this task's fault).
        status, body = vm_answer(
            self._http,
            "POST",
            self.base_url + endpoint,
            where=where,
            limit=self.max_answer_bytes,
            **kwargs,
            **extra,
        )
        if status != 200:
            # The server's words can quote the command, password and all (a 500 for a command
            # that overran): it is left out before they are cut to length.
            detail = self.redactor.text(body.decode("utf-8", "replace")).strip()
            tail = f": {excerpt(detail, 200)}" if detail else ""
            raise TaskSetupError(f"{where}: HTTP {status}{tail}")
        return body

    def _execute(self, step: SetupStep) -> None:
        p = step.params
        parts = [p["command"]] if isinstance(p["command"], str) else p["command"]
        # The screen size is asked for (a VM call when it is not known yet) only when used.
        sized = any("{SCREEN_" in part for part in parts)
        size = self.screen() if sized else DEFAULT_SCREEN_SIZE
        command = fill_placeholders(p["command"], self.client_password, size)
        body = {"command": command, "shell": p["shell"]}
        until: Mapping[str, Any] | None = p["until"]
        for attempt in range(MAX_UNTIL_TRIES):
            answered = self._post(step, "/setup/execute", body=body, command_then=0.0)
            if not until:
                return
            answer = json_object(answered)
            if answer is None:
                raise TaskSetupError(f"{step.where}: POST /setup/execute gave no JSON object")
            if _until_met(until, answer):
                return
            if attempt + 1 < MAX_UNTIL_TRIES:
                self._sleep(UNTIL_INTERVAL)
        never = f"the answer never met until={excerpt(until)} in {MAX_UNTIL_TRIES} tries"
        raise TaskSetupError(f"{step.where}: POST /setup/execute: {never}")

    def _download(self, step: SetupStep, url: str, path: str) -> None:
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
            self._fetch(step, url, spool)
            spool.seek(0)
            name = path.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1] or "file"
            self._post(
                step,
                "/setup/upload",
                data={"file_path": path},
                files={"file_data": (name, spool)},
                timeout=UPLOAD_TIMEOUT,
            )

    def _client(self) -> httpx.Client:
        if self._downloads is None:
            timeout = httpx.Timeout(120.0, connect=30.0)
            self._downloads = httpx.Client(
                timeout=timeout,
                follow_redirects=True,
                headers={"accept-encoding": ACCEPT_ENCODING},  # what the reader can decode
            )
        return self._downloads

    def _fetch(self, step: SetupStep, url: str, out: IO[bytes]) -> None:
        """Stream `url` into `out` (tried again after `DOWNLOAD_WAITS` on connection errors and
        5xx answers), each try whole within `TRANSFER_SECONDS`, headers included."""
        where = f"{step.where}: GET {excerpt(url, 200)}"
        for wait in (0.0, *DOWNLOAD_WAITS):
            if wait:
                self._sleep(wait)
            problem, again = self._fetch_once(url, out, where)
            if problem is None:
                return
            if not again:
                break
        raise TaskSetupError(f"{where}{problem}")

    def _fetch_once(self, url: str, out: IO[bytes], where: str) -> tuple[str | None, bool]:
        """One try of `_fetch`: `None` when the file is in `out`, else what went wrong (as the
        end of the error naming `where`) and whether another try may pass."""
        out.seek(0)
        out.truncate()
        deadline = time.monotonic() + TRANSFER_SECONDS
        try:
            with stream_until(self._client(), "GET", url, deadline=deadline) as response:
                status = response.status_code
                if status != 200:
                    return f": HTTP {status}", status >= 500
                limit = self.max_download_bytes
                failed = copy_within(response, out, limit, setting="max_download_bytes")
                return (None if failed is None else f": the file {failed}"), False
        except (httpx.HTTPError, httpx.InvalidURL, UnicodeError) as exc:
            if cut_short():
                raise stopped(where) from None
            what = f": {type(exc).__name__}: {exc}"
            # A host name (the URL's, or a redirect's) IDNA cannot encode, or a redirect to
            # something that is no http(s) URL (`file://`): trying again cannot help.
            if isinstance(exc, UnicodeError):
                return f" (its host, or a redirect's){what}", False
            if isinstance(exc, httpx.InvalidURL | httpx.UnsupportedProtocol):
                return what, False
            if time.monotonic() >= deadline:
                return f": the file did not arrive within {TRANSFER_SECONDS:g} s", False
            return what, True


__all__ = [
    "DEFAULT_CLIENT_PASSWORD",
    "DEFAULT_MAX_DOWNLOAD_BYTES",
    "HOST_SIDE_SETUP_TYPES",
    "SERVER_SETUP_TYPES",
    "ServerSetup",
    "SetupStep",
    "fill_placeholders",
    "plan_setup",
]
