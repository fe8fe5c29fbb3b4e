"""A running OSWorld VM or container, driven through the HTTP server inside it."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Final, TypeVar

import httpx

from adapters._checks import path_argument, positive_int
from adapters._files import new_file
from adapters.engine.body import ACCEPT_ENCODING
from adapters.engine.deadline import Cutoff, cut_by
from adapters.errors import (
    EnvironmentFailure,
    RevertFailure,
    TaskSetupError,
    error_line,
    error_text,
)
from adapters.runs._secrets import redacting
from adapters.runs.computer_13 import action_word, computer_13_code
from adapters.runs.desktop_env import DEFAULT_SETTLE, settle_seconds
from adapters.runs.env_contract import Observation, StepResult
from adapters.runs.vm_answers import (
    NotOk,
    any_failure,
    given_screen,
    kept_answer,
    png_size,
    read_execute_answer,
    read_png,
    read_tree,
    unrun,
)
from adapters.runs.vm_http import (
    DEFAULT_MAX_ANSWER_BYTES,
    TRANSFER_SECONDS,
    VmUnanswered,
    answer_seconds,
    closed,
    copy_within,
    outlasting_commands,
    seconds_limit,
    stopped,
    vm_answer,
    vm_exchange,
)
from adapters.runs.vm_json import json_body
from adapters.runs.vm_revert import RevertCommand
from adapters.runs.vm_setup import (
    DEFAULT_CLIENT_PASSWORD,
    DEFAULT_MAX_DOWNLOAD_BYTES,
    ServerSetup,
    plan_setup,
)
from adapters.runs.vm_tries import tries
from osharm_core import Action, ConfigError
from osharm_core.config import check_password
from osharm_core.errors import excerpt

#: Logged under the name it has always had, so existing log filters keep working.
_logger = logging.getLogger("adapters.runs.environments")
_T = TypeVar("_T")

#: The largest screen recording `OSWorldServerEnv.end_recording` saves (1 GiB).
DEFAULT_MAX_RECORDING_BYTES: Final = 1 << 30
#: Tries of a VM call that may be repeated, and the seconds between them (OSWorld's: 3, 5 s).
DEFAULT_VM_RETRIES: Final = 3
DEFAULT_VM_RETRY_WAIT: Final = 5.0
#: How long a reverted VM's server may take to answer again (OSWorld's providers wait 300 s).
DEFAULT_READY_TIMEOUT: Final = 300.0
#: The longest `timeout` and `ready_timeout` accepted (a day).
MAX_TIMEOUT: Final = 86400.0
#: Seconds between two looks at a reverted VM, and the most one look may take.
READY_POLL: Final = 2.0
READY_POLL_TIMEOUT: Final = 10.0
#: What OSWorld's controller puts before every pyautogui action it runs on the desktop.
PYAUTOGUI_PREFIX: Final = "import pyautogui; import time; pyautogui.FAILSAFE = False; "


def _within(limit: float, left: float) -> float:
    """`limit` seconds, but at least a moment and never past `left`."""
    return max(0.1, min(limit, left))


class OSWorldServerEnv:
    """The HTTP server inside every OSWorld VM and container, as an `Env` (an edge object).

    Observations come from `GET /screenshot` (PNG bytes) and
    `GET /accessibility` (`{"AT": xml}`); a pyautogui action runs through
    `POST /execute` (`{"command": ["python", "-c", code], "shell": false}`)
    after OSWorld's prefix, and so does a computer_13 action, turned into the
    pyautogui calls OSWorld's controller makes for it (`computer_13_code`;
    an action outside the vocabulary, or off the screen, runs nothing and
    its step's info says why; `screen_size` is read from the VM's screenshot
    once unless given, and also fills the setup's `{SCREEN_...}`
    placeholders). WAIT sleeps `pause` seconds, DONE and FAIL end the
    episode without running anything (as words or as computer_13 dicts).
    A command `/execute` fails, or answers unreadably, is reported the same
    way (`{"error": ...}` in the step's info) and the episode goes on, as
    OSWorld's controller only logs it (see `step`); an answer is kept in the
    step's info (`{"execute": ...}`) cut to `MAX_INFO_FIELDS` fields of
    `MAX_INFO_TEXT` characters (`NAME_chars` notes a field's full length).
    `evaluate()` is `None`: OSWorld's evaluators run host-side in `DesktopEnv`.

    `reset(task_config)` performs the task's setup steps (its `config`)
    through the server's `/setup/...` endpoints, then observes: launch,
    execute / command, execute_with_verification, sleep, open,
    activate_window, close_window, change_wallpaper, and download (this host
    fetches each URL, at most `max_download_bytes`, and uploads it to the VM).
    A task with steps that need OSWorld's host-side machinery (Chrome DevTools
    tabs, logins, Google Drive, proxies, ...) is refused before anything runs:
    use `DesktopEnv` through `DesktopEnvAdapter` for it. See
    `adapters.runs.vm_setup`. A setup step sent but left unanswered fails the
    task (a `TaskSetupError`) when the VM still shows a screenshot after it,
    and is a `VmUnanswered` (the VM is gone) when it does not.
    Any failed or malformed answer is an
    `EnvironmentFailure` (naming the setup step and endpoint, in setup), and
    so is an answer past `max_answer_bytes` (64 MiB; as sent or decompressed)
    or not whole within 180 s (`timeout` + 60 s when longer) of the request's
    start, however slowly it drips in, headers included; a download or the
    recording gets 600 s. `timeout` is a number of seconds above 0 (at most
    a day) that bounds connecting and each read; an `httpx.Timeout` is
    refused (a `ConfigError`, as for any other bad value): pass an
    `http_client` built with one for finer control (the answer's whole-call
    limit still follows `timeout`). `abort()` ends a call under way at once.
    As OSWorld's controller does, a call is tried `retries` times (3),
    `retry_wait` seconds apart (5): reading the screenshot or the tree after
    any failure, a command only when it cannot have run (a connection that
    never opened, or a busy server: 503 or 429), never after a timeout, a
    broken answer or another status (OSWorld's server answers 500 also when
    the command ran and failed after).
    After a setup that ran any step, the desktop is left `settle` seconds
    (default 10, as OS-Harm's runner waits) before the first observation, so
    it shows what the setup opened. The server cannot restore a VM snapshot;
    `revert` (a callable, such as a `RevertCommand` running `vmrun
    revertToSnapshot ...`) does, before each task's setup: then the client
    waits up to `ready_timeout` seconds (300) for the server to show a
    screenshot again. Without it each task starts from the desktop the
    previous one left.

    Screen recording, as OSWorld's runner keeps it: `start_recording()`
    (`POST /start_recording`) and `end_recording(dest)` (`POST /end_recording`,
    whose body is the video, streamed to `dest`, at most
    `max_recording_bytes`). With `recording=PATH` the client does both by
    itself: it starts recording at `reset` (after the setup steps) and saves
    the video at `close` (OS-Harm / OSWorld folders name it `recording.mp4`).
    A recording left running on the VM is ended first (see `start_recording`);
    a start that fails at `reset` is logged as a warning, kept in
    `recording_problem`, and the episode runs unrecorded, as OSWorld's
    controller only logs it.

    A `client_password` of its own (not OSWorld's default `password`, and of
    4 characters or more) never appears in what this raises, nor in a step's
    noted error: the server quotes a command that overran, password and all,
    so every error leaving a public method has it `[redacted]`, in each form
    JSON, Python's repr and the shell escape it to (see `adapters.runs._secrets`).
    """

    def __init__(
        self,
        base_url: str,
        *,
        timeout: float = 120.0,
        http_client: httpx.Client | None = None,
        sleep: Callable[[float], None] | None = None,
        recording: str | os.PathLike[str] | None = None,
        max_recording_bytes: int = DEFAULT_MAX_RECORDING_BYTES,
        screen_size: tuple[int, int] | None = None,
        client_password: str = DEFAULT_CLIENT_PASSWORD,
        max_download_bytes: int = DEFAULT_MAX_DOWNLOAD_BYTES,
        download_client: httpx.Client | None = None,
        settle: float = DEFAULT_SETTLE,
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        retries: int = DEFAULT_VM_RETRIES,
        retry_wait: float = DEFAULT_VM_RETRY_WAIT,
        revert: Callable[[], None] | None = None,
        ready_timeout: float = DEFAULT_READY_TIMEOUT,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        check_password("client_password", client_password)
        timeout = seconds_limit("timeout", timeout, high=MAX_TIMEOUT, above_zero=True)
        if not (revert is None or callable(revert)):
            raise ConfigError(f"revert must be callable; got {excerpt(revert)}")
        self.revert = revert
        self.ready_timeout = seconds_limit(
            "ready_timeout", ready_timeout, high=MAX_TIMEOUT, above_zero=True
        )
        self.settle = settle_seconds(settle)
        self.max_answer_bytes = positive_int("max_answer_bytes", max_answer_bytes)
        self.retries = positive_int("retries", retries)
        self.retry_wait = seconds_limit("retry_wait", retry_wait, high=600)
        positive_int("max_download_bytes", max_download_bytes)
        self._screen_size = None if screen_size is None else given_screen(screen_size)
        self.recording = None if recording is None else path_argument("recording", recording)
        self.max_recording_bytes = positive_int("max_recording_bytes", max_recording_bytes)
        self._recording_started = False
        #: Why the last `reset` could not start the recording (the episode ran unrecorded).
        self.recording_problem: str | None = None
        self._own = http_client is None
        self._closed = False  # by `close()`, with the HTTP client it closed
        self._http = http_client or httpx.Client(
            timeout=timeout, headers={"accept-encoding": ACCEPT_ENCODING}
        )
        # However an answer trickles in, it is whole within this long (or the call fails).
        self._answer_seconds = answer_seconds(timeout)
        self._stopped = threading.Event()
        # Cut by `abort`: the HTTP exchange under way ends at once, and no other starts.
        self._cutoff = Cutoff()
        self._sleep = sleep or self._wait
        self.setup = ServerSetup(
            self.base_url,
            self._http,
            sleep=self._sleep,
            download_client=download_client,
            max_download_bytes=max_download_bytes,
            client_password=client_password,
            screen_size=lambda: self.screen_size,
            max_answer_bytes=max_answer_bytes,
        )
        #: Keeps `client_password` (unless OSWorld's default) out of every error raised here.
        self.redactor = self.setup.redactor

    @property
    @redacting
    def screen_size(self) -> tuple[int, int]:
        """The VM's screen size: as given, else read from its screenshot once (then kept)."""
        if self._screen_size is None:
            self._screen_size = self._call(
                "GET", "/screenshot", read=png_size, retry_if=any_failure
            )
        return self._screen_size

    def _call(
        self,
        method: str,
        path: str,
        *,
        read: Callable[[bytes], _T],
        retry_if: Callable[[Exception], bool] | None = None,
        **kwargs: Any,
    ) -> _T:
        """`read` of the body of the server's 200 answer to `method path` (within
        `max_answer_bytes`), tried up to `retries` times while `retry_if` says a failure
        may pass (once without it), `retry_wait` seconds apart; else an
        `EnvironmentFailure` naming the call."""
        where = f"{method} {path}"

        def once() -> _T:
            status, body = vm_answer(
                self._http,
                method,
                self.base_url + path,
                where=where,
                limit=self.max_answer_bytes,
                **{"seconds": self._answer_seconds, **kwargs},
            )
            if status != 200:
                raise NotOk(f"{where}: HTTP {status}", status)
            return read(body)

        def halted() -> EnvironmentFailure | None:
            if self._is_closed():
                return closed(where)
            return stopped(where) if self._cutoff.is_cut else None

        with cut_by(self._cutoff):
            try:
                return tries(
                    once,
                    where=where,
                    attempts=self.retries if retry_if else 1,
                    wait=self.retry_wait,
                    retry_if=retry_if or any_failure,
                    sleep=self._wait,
                    stopped=halted,
                )
            except EnvironmentFailure:
                if self._is_closed():  # cut off, or woken from its wait, by `close()`
                    raise closed(where) from None
                raise

    def _is_closed(self) -> bool:
        return self._closed or self._http.is_closed

    def _ends_episode(self, failure: EnvironmentFailure) -> bool:
        """Whether `failure` ends the episode rather than being noted and gone past: the VM
        gave no answer at all, or the episode is being stopped."""
        return isinstance(failure, VmUnanswered) or self._stopped.is_set()

    @redacting
    def observe(self) -> Observation:
        """The desktop now: screenshot and accessibility tree (each tried `retries` times)."""
        screenshot = self._call("GET", "/screenshot", read=read_png, retry_if=any_failure)
        if self._screen_size is None:
            self._screen_size = png_size(screenshot)
        tree = self._call("GET", "/accessibility", read=read_tree, retry_if=any_failure)
        return {"screenshot": screenshot, "accessibility_tree": tree, "terminal": None}

    def _still_answers(self) -> bool:
        """Whether the VM shows a screenshot (tried `retries` times, `READY_POLL_TIMEOUT` s each)."""
        look = READY_POLL_TIMEOUT
        try:
            self._call(
                "GET",
                "/screenshot",
                read=read_png,
                retry_if=any_failure,
                timeout=look,
                seconds=look,
            )
        except EnvironmentFailure:
            return False
        return True

    def abort(self) -> None:
        """Stop the call under way, from another thread (`in_thread` does, when its episode's
        time limit passes or the run is interrupted): a revert command is killed, waits
        (between tries too) end and an HTTP exchange under way is cut off at once (one still
        connecting ends at its connect timeout), each with an `EnvironmentFailure`; no VM call
        is tried again. Later calls fail at once, but `close()` still saves the recording."""
        self._stopped.set()
        self._cutoff.cut()

    def _wait(self, seconds: float) -> None:
        """Sleep `seconds`, unless `abort` is called meanwhile (or was: then at once)."""
        if self._stopped.wait(seconds):
            raise EnvironmentFailure(f"{self.base_url}: stopped while waiting on the VM")

    @redacting
    def wait_until_ready(self) -> None:
        """Look at `GET /screenshot` every `READY_POLL` seconds until it shows a PNG; an
        `EnvironmentFailure` with the last failure once `ready_timeout` seconds have passed."""
        deadline = time.monotonic() + self.ready_timeout
        while True:
            look = _within(READY_POLL_TIMEOUT, deadline - time.monotonic())
            try:
                self._call("GET", "/screenshot", read=read_png, timeout=look, seconds=look)
                return
            except EnvironmentFailure as exc:
                last = str(exc)
            left = deadline - time.monotonic()
            self._wait(0)  # stopped: no more looks
            if left <= 0:
                break
            self._sleep(min(READY_POLL, left))
        late = f"did not show a screenshot within {self.ready_timeout:g} s of its revert"
        raise EnvironmentFailure(f"the VM at {self.base_url} {late}; last: {last}")

    def _revert(self, revert: Callable[..., None]) -> None:
        """Run `revert`, then wait for the VM to answer; any failure is a `RevertFailure`."""
        with _as_revert_failure(f"revert {excerpt(revert)}"):
            if isinstance(revert, RevertCommand):
                revert(cancel=self._stopped)
            else:
                revert()
        self._recording_started = False  # a recording under way did not survive the snapshot
        with _as_revert_failure("waiting for the reverted VM"):
            self.wait_until_ready()

    @redacting
    def reset(self, task_config: Mapping[str, Any] | None = None, **kwargs: Any) -> Observation:
        """Revert the VM (with `revert` set), perform the task's setup steps (see the class
        doc), then the first observation.

        A setup failure names the task (its `id`) as well as the step. After
        setup steps the desktop settles for `settle` seconds. With `recording`
        set, the screen recording starts here, after the setup.
        """
        task = task_config or {}
        if self._is_closed():
            raise closed("reset")
        try:
            if self.revert is not None:
                plan_setup(task.get("config"))  # a task that cannot run is refused before it
                self._revert(self.revert)
            ran = self._set_up(task.get("config"))
        except EnvironmentFailure as exc:
            if "id" not in task:
                raise
            raise type(exc)(f"task {excerpt(task['id'], 82)}: {error_text(exc)}") from None
        if ran and self.settle:
            self._sleep(self.settle)
        observation = self.observe()
        self.recording_problem = None
        if self.recording is not None and not self._recording_started:
            self._start_recording_or_note()
        return observation

    def _set_up(self, config: object) -> int:
        """The task's setup steps (how many ran). A step sent but never answered (a command
        still running past its time, a connection broken under it) fails the task, a
        `TaskSetupError` naming the step, when the VM still shows a screenshot after it
        (`_still_answers`); when it does not, the VM is gone and the `VmUnanswered` stands."""
        try:
            with cut_by(self._cutoff):
                return self.setup.run(config)
        except VmUnanswered as exc:
            if exc.sent and not self._stopped.is_set() and self._still_answers():
                still = "the VM still answers: the step failed, not the VM"
                raise TaskSetupError(f"{error_text(exc)} ({still})") from None
            raise

    @redacting
    def start_recording(self) -> None:
        """Start the VM's screen recording.

        A VM left recording (a run killed mid-episode: OSWorld's server answers 400,
        "Recording is already in progress.") has that recording ended first, its video
        discarded unread, and is asked once more; any failure is an `EnvironmentFailure`.
        """
        try:
            self._call("POST", "/start_recording", read=bytes)
        except NotOk as exc:
            if exc.status != 400:
                raise
            # Whatever the status (OSWorld's server stops its recorder before answering),
            # the video is not read: closing the answer drops it.
            self._end_recording(lambda _: None, self._answer_seconds)
            self._call("POST", "/start_recording", read=bytes)
        self._recording_started = True

    def _start_recording_or_note(self) -> None:
        """`start_recording` at `reset`; one that fails (but for a VM that gives no answer, or a
        stop) is logged as a warning and kept in `recording_problem`, and the episode runs
        unrecorded, as OSWorld's controller only logs a failed start."""
        try:
            self.start_recording()
        except EnvironmentFailure as exc:
            if self._ends_episode(exc):
                raise
            self.recording_problem = error_text(exc)
            _logger.warning(
                "%s: the screen recording did not start (%s): this episode runs unrecorded",
                self.base_url,
                self.recording_problem,
            )

    def _end_recording(self, take: Callable[[httpx.Response], None], seconds: float) -> None:
        """`POST /end_recording`, its answer handed to `take`, all within `seconds`."""
        where = "POST /end_recording"
        if self._is_closed():
            raise closed(where)
        url = self.base_url + "/end_recording"
        with cut_by(self._cutoff):
            vm_exchange(
                self._http,
                "POST",
                url,
                lambda answer, _: take(answer),
                where=where,
                seconds=seconds,
            )

    @redacting
    def end_recording(self, dest: str | os.PathLike[str]) -> Path:
        """Stop the recording and save the video the server sends to `dest`; returns `dest`.

        The body is streamed to `dest` + `.part` (removed first and made new, so a
        symbolic link left at that name is never written through) and renamed when
        whole; one over `max_recording_bytes` is an `EnvironmentFailure` and nothing is kept.
        """
        target = Path(dest)
        partial = target.with_name(target.name + ".part")

        def save(response: httpx.Response) -> None:
            problem = f"HTTP {response.status_code}"
            if response.status_code == 200:
                # A fresh file: nothing left at that name (a planted link) is written through.
                with new_file(partial, EnvironmentFailure, replace=True) as out:
                    limit = self.max_recording_bytes
                    video = copy_within(response, out, limit, setting="max_recording_bytes")
                problem = "" if video is None else f"the video {video}"
            if problem:
                raise EnvironmentFailure(f"POST /end_recording: {problem}")

        try:
            self._end_recording(save, TRANSFER_SECONDS)
            partial.replace(target)
        except OSError as exc:
            raise EnvironmentFailure(f"cannot save the recording to {target}: {exc}") from None
        finally:
            self._recording_started = False
            partial.unlink(missing_ok=True)
        return target

    @redacting
    def execute(self, code: str) -> dict[str, Any]:
        """Run pyautogui code on the desktop; the server's answer (status, output, error,
        returncode).

        The body is ASCII JSON (`json_body`), so code holding a lone surrogate reaches the
        server escaped. A failed or unreadable answer is an `EnvironmentFailure`.
        """
        payload = {"command": ["python", "-c", PYAUTOGUI_PREFIX + code], "shell": False}
        body = json_body(payload)
        return self._call(
            "POST",
            "/execute",
            read=read_execute_answer,
            retry_if=unrun,
            timeout=outlasting_commands(self._http.timeout),
            **body,
        )

    @redacting
    def step(self, action: Action, pause: float = 0) -> StepResult:
        """Run one pyautogui or computer_13 action (or WAIT / DONE / FAIL); the observation
        after it.

        What the action did not do is reported, not raised, and the episode goes on: a
        computer_13 action the vocabulary refuses runs nothing, and `/execute` answering
        with an error status (OSWorld's server answers 500 for a command that overran) or
        with something unreadable leaves the command's fate unknown; either way the info is
        `{"error": why}` (a custom `client_password` in it redacted) and the observation
        shows the desktop as it is. A VM that gives no answer at all (`VmUnanswered`), or
        an observation that cannot be read, is raised.
        """
        word = action_word(action)
        # The reward and the special actions' info are what OSWorld's DesktopEnv.step gives.
        if word in ("DONE", "FAIL"):
            return self.observe(), 0, True, {word.lower(): True}
        if word == "WAIT":
            self._sleep(pause)
            return self.observe(), 0, False, {}
        if isinstance(action, str):
            code = action
        else:
            size = self.screen_size
            try:
                code = computer_13_code(action, screen_size=size)
            except EnvironmentFailure as refused:  # the model's action: nothing runs
                return self.observe(), 0, False, self._noted(refused)
        try:
            info: dict[str, Any] = {"execute": kept_answer(self.execute(code))}
        except EnvironmentFailure as failed:  # the command's fate is unknown
            if self._ends_episode(failed):
                raise
            info = self._noted(failed)
        if pause:
            self._sleep(pause)
        return self.observe(), 0, False, info

    def _noted(self, failure: EnvironmentFailure) -> dict[str, Any]:
        """A step's info saying what `failure` kept its action from doing, redacted."""
        return {"error": self.redactor.text(str(failure))}

    def evaluate(self) -> float | None:
        """None: the task's evaluator runs host-side (use DesktopEnv for scores)."""
        return None

    @redacting
    def close(self) -> None:
        """Save the recording (with `recording` set, once started), then close the HTTP client
        this object built. An `abort` before it does not stop it (one during it does).

        Once its HTTP client is closed (this one's, or one given and closed by its owner),
        every call fails at once, never tried again, with an `EnvironmentFailure` saying
        the environment was closed; calls under way in other threads when `close()` closes
        the client it built end so at once (one still connecting at its connect timeout).
        """
        self._stopped.clear()
        self._cutoff.clear()
        try:
            if self.recording is not None and self._recording_started:
                self.end_recording(self.recording)
        finally:
            self.setup.close()
            if self._own:
                self._closed = True
                self._stopped.set()  # waits between tries end
                self._cutoff.cut()  # so do the exchanges under way
                self._http.close()


@contextlib.contextmanager
def _as_revert_failure(what: str) -> Iterator[None]:
    """Whatever fails inside as a `RevertFailure`: an `EnvironmentFailure`'s words as they are,
    another exception's after `what`."""
    try:
        yield
    except EnvironmentFailure as exc:  # a RevertFailure too: its words stay as they are
        raise RevertFailure(error_text(exc)) from None
    except Exception as exc:
        raise RevertFailure(f"{what}: {error_line(exc)}") from exc


__all__ = [
    "DEFAULT_MAX_RECORDING_BYTES",
    "DEFAULT_READY_TIMEOUT",
    "DEFAULT_VM_RETRIES",
    "DEFAULT_VM_RETRY_WAIT",
    "MAX_TIMEOUT",
    "PYAUTOGUI_PREFIX",
    "READY_POLL",
    "READY_POLL_TIMEOUT",
    "OSWorldServerEnv",
]
