"""Restoring a VM to its clean snapshot before each task, with a command the researcher gives.

An OSWorld VM's server cannot restore a snapshot: that is the hypervisor's
job (OSWorld's providers call `vmrun revertToSnapshot`, recreate a Docker
container, or replace a cloud instance). `RevertCommand` runs the shell
command that does it for your setup, so `OSWorldServerEnv(url,
revert=RevertCommand(...))` (or `osharm-agent run --env-url URL
--env-revert COMMAND`) starts every task from the same desktop. The command
sees `OSHARM_VM_URL` and `OSHARM_VM_INDEX` (the VM's position among
`--env-url`) in its environment, so one command serves several VMs. It runs
in a session of its own (POSIX) and is killed, with everything it started,
after `timeout` seconds; a non-zero exit is a `RevertFailure` (an
`EnvironmentFailure`: the task-list runners stop the run) that quotes the
end of what it printed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import tempfile
import threading
import time
from typing import IO, Final

import attrs
from attrs.validators import gt, instance_of, le, matches_re, not_

from adapters.errors import RevertFailure
from osharm_core.errors import excerpt, refusing

#: How long a revert command may run before it is killed: 10 minutes.
DEFAULT_REVERT_TIMEOUT: Final = 600.0
#: How much of the end of a failed command's output its error quotes.
_OUTPUT_TAIL: Final = 2000


#: What `RevertCommand.command` and `.timeout` must be.
_SHELL_COMMAND: Final = refusing(
    "a non-empty shell command", instance_of(str), matches_re(r"\s*\S.*", re.DOTALL)
)
_SECONDS: Final = refusing(
    "a number of seconds in (0, 86400]",
    not_(instance_of(bool)),
    instance_of((int, float)),
    gt(0),
    le(86400),
)


@attrs.frozen
class RevertCommand:
    """A shell command that restores a VM to its clean snapshot; calling it runs it once.

    For example `vmrun -T ws revertToSnapshot /vms/Ubuntu.vmx init_state &&
    vmrun -T ws start /vms/Ubuntu.vmx nogui`, or `docker rm -f osworld-$OSHARM_VM_INDEX
    && docker run -d --name osworld-$OSHARM_VM_INDEX ...`. It is a value (it
    pickles), so a Ray worker can run it on its own node.
    """

    command: str = attrs.field(validator=_SHELL_COMMAND)
    vm_url: str = ""
    vm_index: int = 0
    timeout: float = attrs.field(default=DEFAULT_REVERT_TIMEOUT, validator=_SECONDS)

    def __call__(self, cancel: threading.Event | None = None) -> None:
        """Run the command; a `RevertFailure` when it cannot start, fails or overruns,
        or once `cancel` is set (the episode was stopped): then it is killed at once."""
        environment = {
            **os.environ,
            "OSHARM_VM_URL": self.vm_url,
            "OSHARM_VM_INDEX": str(self.vm_index),
        }
        named = f"the revert command {excerpt(self.command, 120)}"
        with tempfile.TemporaryFile() as output:
            try:
                process = subprocess.Popen(
                    self.command,
                    shell=True,
                    stdin=subprocess.DEVNULL,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    env=environment,
                    start_new_session=True,
                )
            except OSError as exc:
                raise RevertFailure(f"{named} could not start: {exc}") from None
            try:
                status = _wait(process, time.monotonic() + self.timeout, cancel)
            except BaseException:  # an interrupt in this thread: the command goes too
                _kill_session(process)
                raise
            if status == 0:
                return
            endings: dict[int | str, str] = {
                _OVERRUN: f"did not finish within {self.timeout:g} s; it was killed",
                _CANCELLED: "was killed: its episode was stopped",
            }
            said = _tail(output)
            ending = endings.get(status, f"exited with status {status}")
            raise RevertFailure(f"{named} {ending}" + (f"; it said: {said}" if said else ""))


_OVERRUN: Final = "overrun"
_CANCELLED: Final = "cancelled"
#: How often a running command is checked for `cancel`.
_CHECK_EVERY: Final = 0.2


def _wait(
    process: subprocess.Popen[bytes], deadline: float, cancel: threading.Event | None
) -> int | str:
    """The command's exit status; `_OVERRUN` or `_CANCELLED` once it has been killed for that."""
    while True:
        left = deadline - time.monotonic()
        try:
            return process.wait(min(left, _CHECK_EVERY) if cancel is not None else left)
        except subprocess.TimeoutExpired:
            if cancel is not None and cancel.is_set():
                _kill_session(process)
                return _CANCELLED
            if time.monotonic() >= deadline:
                _kill_session(process)
                return _OVERRUN


def _kill_session(process: subprocess.Popen[bytes]) -> None:
    """Kill the command and everything it started (its own session), and reap it."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _tail(output: IO[bytes]) -> str:
    """The last `_OUTPUT_TAIL` bytes the command wrote, as one line of text."""
    size = output.seek(0, os.SEEK_END)
    output.seek(max(0, size - _OUTPUT_TAIL))
    text = output.read().decode("utf-8", "replace")
    return " / ".join(line.strip() for line in text.splitlines() if line.strip())


__all__ = ["DEFAULT_REVERT_TIMEOUT", "RevertCommand"]
