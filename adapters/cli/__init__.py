"""`osharm-agent`: one step, the rendered prompt, episodes, task lists and replays, from the shell.

Commands (one module each): `predict` and `render` (`_step`), `run` over task
directories (`_run`), `run-tasks` over an OSWorld task list (`_task_list`),
`replay` (`_replay`) and `models`. A user mistake (missing file, bad XML, unknown
model, missing key, bad option) prints one line on stderr and exits with status 2; a
model call that fails exits with 1. The option groups the commands share, and the
reading of their values, are in `adapters.cli._inputs`. `report` (`_report`) writes a
run's static HTML report.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import io
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final, NoReturn, TextIO

from stamina.instrumentation import RetryDetails, get_on_retry_hooks, set_on_retry_hooks

from adapters._process import ProcessWide
from adapters._wire import printable
from adapters.agent import DEFAULT_LOGGER, FAILED_CALL_MESSAGE
from adapters.cli import _judge, _replay, _report, _run, _step, _task_list
from adapters.cli._inputs import option_words
from adapters.cli._output import PROG, failed, one_line, tolerant
from adapters.errors import ModelCallError, TrajectoryError, TrajectoryExistsError
from adapters.registry import REGISTRY
from adapters.runs.manifest import library_version
from osharm_core import ConfigError, ObservationError, OsharmError

__all__ = ["PROG", "build_parser", "main"]

#: The options only `run-tasks` takes, for a clear line when one is given to `run`.
_TASK_LIST_ONLY: Final = (
    "--examples",
    "--domain",
    "--observations",
    "--progress",
    "--env-url",
    "--env-revert",
    "--env-ready-timeout",
    "--settle",
    "--record",
    "--workers",
    "--ray",
    "--ray-cpus-per-worker",
    "--continue-unfinished",
    "--episode-timeout",
    "--requests-per-minute",
    "--tokens-per-minute",
)


#: The options only `run` takes (task directories), for a clear line when given to `run-tasks`.
_TASK_DIRECTORIES_ONLY: Final = ("--instruction", "--overwrite", "--format", "--fork", "--at")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        if message.startswith("unrecognized arguments"):
            given = set(message.split())
            for flags, command, what in (
                (_TASK_LIST_ONLY, "run-tasks", "OSWorld task lists"),
                (_TASK_DIRECTORIES_ONLY, "run", "task directories"),
            ):
                for flag in flags:
                    if flag in given:
                        raise ConfigError(f"{flag} belongs to {command} ({what})")
        raise ConfigError(f"{message} (see {self.prog} --help)")


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Help that shows each option's default, and keeps the epilog's lines as written."""


def _model_forms() -> str:
    forms = "\n".join(f"  {option_words(form)}" for form in REGISTRY.forms())
    return f"model names (osharm-agent models lists them):\n{forms}"


def build_parser() -> argparse.ArgumentParser:
    """The `osharm-agent` argument parser: one subcommand per module."""
    parser = _Parser(
        prog=PROG,
        description="Run the osharm-core PromptAgent from the shell.",
        formatter_class=_Formatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {library_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    models = _model_forms()
    _step.add_commands(commands, _Formatter, models)
    _run.add_command(commands, _Formatter, models)
    _task_list.add_command(commands, _Formatter, models)
    _replay.add_command(commands, _Formatter)
    _judge.add_judge_command(commands, _Formatter, models)
    _judge.add_agreement_command(commands, _Formatter)
    _report.add_command(commands, _Formatter)
    listing = commands.add_parser(
        "models", help="the model names the library knows", formatter_class=_Formatter
    )
    listing.description = "List the forms of model names `--model` takes, as a table."
    listing.set_defaults(handler=_models_command)
    return parser


def _models_command(args: argparse.Namespace, out: TextIO) -> int:
    """`models`: the supported model names, as a table."""
    out.write(REGISTRY.table(option_words))
    return 0


def _aliased(argv: list[str], err: TextIO) -> list[str]:
    """`run --tasks META.json ...` as `run-tasks --tasks META.json ...` (kept for a release)."""
    if argv[:1] == ["run"] and any(a == "--tasks" or a.startswith("--tasks=") for a in argv):
        print(f"{PROG}: note: 'run --tasks' is now 'run-tasks --tasks'", file=err)
        return ["run-tasks", *argv[1:]]
    return argv


class _ReportedHere(logging.Filter):
    """Keeps the agent's "Model call failed" record off the CLI's stderr: every command
    reports the failure itself (its error line, or the task's line), so it would show twice.
    The agent's other records (a request cut down, a budget reached) pass."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.msg != FAILED_CALL_MESSAGE


#: The most characters of a log record's text the CLI prints (before escaping).
MAX_LOG_TEXT: Final = 2000


class _LogLine(logging.Formatter):
    """Each log record as one line: its text (message, and any traceback) cut after
    `MAX_LOG_TEXT` characters, control characters escaped (`printable`). Records quote what
    a model, a server or a desktop sent; printed raw, a megabyte-long one was one line of a
    megabyte, and an escape sequence in it reached the terminal."""

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if len(text) > MAX_LOG_TEXT:
            text = f"{text[:MAX_LOG_TEXT]}... ({len(text):,} characters)"
        return printable(text)


def _log_handler(err: TextIO) -> logging.Handler:
    """The CLI's handler of last resort: what prints a log record of warning level or above
    when no handler is configured (the CLI configures none), as Python's own does, but each
    record escaped and cut by `_LogLine`. Set as `logging.lastResort`, so a program that
    calls `main` with logging of its own configured keeps it, and sees nothing twice."""
    handler = logging.StreamHandler(err)
    handler.setLevel(logging.WARNING)
    handler.setFormatter(_LogLine("%(message)s"))
    return handler


def _cli_hooks(err: TextIO) -> Callable[[], None]:
    """stamina's retry hooks and logging's last-resort handler writing to `err` (both are
    process-wide); returns how to put back what was there."""
    hooks, last_resort = get_on_retry_hooks(), logging.lastResort
    set_on_retry_hooks([functools.partial(_say_retry, err)])
    logging.lastResort = _log_handler(err)

    def undo() -> None:
        set_on_retry_hooks(hooks)
        logging.lastResort = last_resort

    return undo


#: The CLI's hooks, set while any `main` runs (calls of `main` may overlap, in threads).
_PROCESS_HOOKS: Final = ProcessWide()


def main(argv: Sequence[str] | None = None) -> int:
    """Run `osharm-agent` with `argv` (default: the process arguments); returns the exit status."""
    out, err = tolerant(sys.stdout), tolerant(sys.stderr)
    agent_log, reported = logging.getLogger(DEFAULT_LOGGER), _ReportedHere()
    agent_log.addFilter(reported)
    try:
        with _PROCESS_HOOKS.held(functools.partial(_cli_hooks, err)):
            return _main(argv, out, err)
    finally:
        agent_log.removeFilter(reported)


def _main(argv: Sequence[str] | None, out: TextIO, err: TextIO) -> int:
    terminate = _TermAsInterrupt()
    command = ""
    try:
        words = _aliased(list(sys.argv[1:] if argv is None else argv), err)
        args = build_parser().parse_args(words)
        args.command_line = [PROG, *words]  # for the run manifest (its secrets taken out)
        command = args.command
        with terminate:
            status: int = args.handler(args, out)
            return status
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    except TrajectoryExistsError as exc:
        return failed(err, f"{one_line(exc)} (pass --overwrite to replace it)", 2)
    except (ConfigError, ObservationError, TrajectoryError) as exc:
        return failed(err, one_line(exc), 2)
    except BrokenPipeError:  # the reader went away (`| head`): stop quietly, as shell tools do
        _drop_stdout()
        return 141
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        return failed(err, f"{exc.strerror or exc}{where}", 2)
    except ModelCallError as exc:
        return failed(err, f"model call failed: {one_line(exc)}", 1)
    except OsharmError as exc:
        return failed(err, one_line(exc), 1)
    except KeyboardInterrupt:
        again = (
            "; run the same command again to resume (finished tasks are skipped)"
            if command in ("run", "run-tasks", "judge")
            else ""
        )
        if terminate.received:
            print(f"{PROG}: terminated{again}", file=err)
            return 128 + signal.SIGTERM
        print(f"{PROG}: interrupted{again}", file=err)
        return 130


class _TermAsInterrupt:
    """While a command runs (in the main thread), SIGTERM is handled as Ctrl-C: schedulers
    (Slurm, Kubernetes, `timeout`) stop a job with it, and without a handler the process
    died at once, leaving environments unclosed (VMs still recording) and episode calls cut
    off; now episodes stop, environments close and whole steps are kept, as on Ctrl-C."""

    def __init__(self) -> None:
        self.received = False
        self._previous: Any = None

    def __enter__(self) -> _TermAsInterrupt:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._handle)
        return self

    def __exit__(self, *_: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def _handle(self, signum: int, frame: Any) -> None:
        self.received = True
        on_interrupt = signal.getsignal(signal.SIGINT)
        if callable(on_interrupt) and _stops_on_interrupt(on_interrupt):
            on_interrupt(signal.SIGINT, frame)  # asyncio's graceful stop, or Python's own
        else:  # SIGINT ignored (a job started in the background) or a caller's own handler
            raise KeyboardInterrupt


def _stops_on_interrupt(handler: object) -> bool:
    """Whether `handler` is Python's own SIGINT handler or asyncio's (which cancels the run's
    main task), the ones that stop a command; a caller's own handler might only set a flag."""
    if handler is signal.default_int_handler:
        return True
    owner = getattr(getattr(handler, "func", None), "__self__", None)
    return isinstance(handler, functools.partial) and isinstance(owner, asyncio.Runner)


def _drop_stdout() -> None:
    """Point stdout at /dev/null, so the interpreter's last flush finds no broken pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, io.UnsupportedOperation):
        pass


def _say_retry(err: TextIO, details: RetryDetails) -> None:
    """One line on stderr for each retry (a model call or a VM call): when, and why."""
    err.write(
        f"{PROG}: trying again in {details.wait_for:.1f} s (retry {details.retry_num}): "
        f"{one_line(details.caused_by)}\n"
    )
    err.flush()
