"""Shared test setup: hypothesis profiles and the bundled fixture paths."""

from __future__ import annotations

import ipaddress
import os
import struct
import sys
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import pytest
from hypothesis import HealthCheck, settings

from osharm_core.observation import PNG_SIGNATURE

settings.register_profile(
    "default", deadline=None, max_examples=100, suppress_health_check=[HealthCheck.too_slow]
)
# CI runs from a fresh clone: no example database to write into the tree or carry over.
settings.register_profile("ci", parent=settings.get_profile("default"), database=None)
settings.register_profile("thorough", parent=settings.get_profile("default"), max_examples=2000)
settings.load_profile(
    os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "default")
)


class OffLoopback(AssertionError):
    """A test tried to reach an address other than this machine's loopback."""


def _loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if host is None or host == "localhost":
        return True
    try:
        return ipaddress.ip_address(str(host).split("%")[0]).is_loopback
    except ValueError:
        return False


def _guard_sockets(event: str, args: tuple[Any, ...]) -> None:
    """Refuse, in every test, any connection, lookup or datagram that would leave 127.0.0.0/8 / ::1."""
    if event == "socket.getaddrinfo":
        host = args[0]
    elif event in ("socket.connect", "socket.sendto"):
        address = args[1]
        if not isinstance(address, tuple):  # AF_UNIX paths and socketpairs stay on the machine
            return
        host = address[0]
    else:
        return
    if not _loopback(host):
        raise OffLoopback(f"{event} to {host!r}: tests may only reach loopback addresses")


sys.addaudithook(_guard_sockets)

#: The files that take longest, handed out first when the suite runs on several workers
#: (with `--dist loadfile` and `--no-loadscope-reorder`, xdist hands files out in collection
#: order): the long Ray file starts at once and the others share the rest around it.
LONGEST_FIRST: Final = ("facade/test_ray_runner.py", "hostile/test_servers.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the files of `LONGEST_FIRST` to the front, keeping every other order."""

    def rank(item: pytest.Item) -> int:
        path = item.path.as_posix()
        return next((n for n, name in enumerate(LONGEST_FIRST) if path.endswith(name)), 99)

    items.sort(key=rank)


FIXTURES = Path(__file__).parent / "fixtures"
#: The command that runs osharm-agent from this checkout in a child Python (the console
#: script need not be on PATH); its arguments follow.
CLI_CHILD: Final = (
    sys.executable,
    "-c",
    "import sys; from adapters.cli import main; sys.exit(main())",
)
OBSERVATIONS = FIXTURES / "observations"
#: The five-observation episode the request-budget tests and benchmark walk through
#: (large trees and screenshots: three turns of history pass nginx's 1 MB at step 4).
BUDGET_EPISODE = (
    "libreoffice_calc_sales",
    "chromium_inventory_table",
    "libreoffice_writer_checklist",
    "mousepad_notes",
    "thunar_context_menu",
)
FIXTURE_NAMES = sorted(p.stem for p in OBSERVATIONS.glob("*.xml"))


@pytest.fixture(scope="session")
def observations_dir() -> Path:
    """The folder of real desktop observations copied from ../shared/fixtures."""
    return OBSERVATIONS


def fixture_observation(name: str) -> dict[str, Any]:
    """A real observation as OSWorld hands it over: PNG bytes and the tree's text."""
    return {
        "screenshot": (OBSERVATIONS / f"{name}.png").read_bytes(),
        "accessibility_tree": (OBSERVATIONS / f"{name}.xml").read_text(encoding="utf-8"),
    }


def write_named(directory: Path, name: str, data: bytes) -> Path:
    """Write `data` to the file `name` in `directory`, named by `name`'s UTF-8 bytes as a UTF-8
    desktop or the reference writes it, whatever this process's file-system encoding (under
    `LC_ALL=C PYTHONUTF8=0` it is ASCII and `open` refuses a non-ASCII `str` name, yet such
    files exist). Returns the file's path as this process names it (`os.fsdecode`)."""
    raw = os.path.join(os.fsencode(directory), name.encode("utf-8", "surrogateescape"))
    with open(raw, "wb") as out:
        out.write(data)
    return Path(os.fsdecode(raw))


def file_system_names(text: str) -> bool:
    """Whether this process's file-system encoding can name a file `text` (under `LC_ALL=C
    PYTHONUTF8=0` it is ASCII: a task id holding U+202E names no result folder there)."""
    try:
        os.fsencode(text)
    except UnicodeEncodeError:
        return False
    return True


def child_environment(*, api_keys: bool = True) -> dict[str, str]:
    """This process's environment for a child Python whose stderr a test reads whole, with
    asyncio's debug mode off: under PYTHONDEVMODE=1 (or PYTHONASYNCIODEBUG=1) it logs every
    loop callback over 100 ms to stderr, and on a loaded machine there are many. Without
    `api_keys`, no `*_API_KEY` variable either (a child that must find no key)."""
    dropped = ("PYTHONDEVMODE", "PYTHONASYNCIODEBUG")
    return {
        k: v
        for k, v in os.environ.items()
        if k not in dropped and (api_keys or not k.endswith("_API_KEY"))
    }


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk with its length and a valid CRC."""
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def png_claiming(width: int, height: int, pixels: bytes = b"\0" * 64) -> bytes:
    """A well-formed PNG whose header claims any size, with a tiny (valid CRC) data chunk."""
    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (
        PNG_SIGNATURE
        + png_chunk(b"IHDR", header)
        + png_chunk(b"IDAT", zlib.compress(pixels))
        + png_chunk(b"IEND", b"")
    )


@pytest.fixture(autouse=True)
def _close_model_clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Close the sync pool of every `HttpModelClient` a test built, as its owner would.

    Tests run with ResourceWarning as an error, so a pool left for the garbage
    collector would fail whichever test happens to be running when it is collected.
    """
    from adapters.engine.client import HttpModelClient

    built: list[HttpModelClient] = []
    original = HttpModelClient.__init__

    def tracking(self: HttpModelClient, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(HttpModelClient, "__init__", tracking)
    yield
    for client in built:
        client.close()


def step_record(
    *,
    screenshot: bytes | None = None,
    accessibility_tree: str | None = None,
    som_screenshot: bytes | None = None,
    masks: Any = None,
    frame: Any = None,
    degradation: Any = None,
    **fields: Any,
) -> Any:
    """A `StepRecord` built from its parts as a recorder reads them: the raw observation, and
    a request whose stored observation holds the tagged screenshot, frame and cuts."""
    import base64

    from adapters.record import StepRecord
    from osharm_core import Observation
    from osharm_core.state import ObservationRecord
    from osharm_core.step import StepRequest

    tagged = None if som_screenshot is None else base64.b64encode(som_screenshot).decode()
    record = ObservationRecord(tagged, None, frame, degradation)
    request = StepRequest((), record, masks)
    observation = Observation(screenshot=screenshot, accessibility_tree=accessibility_tree)
    return StepRecord(observation=observation, request=request, **fields)


def reply_step(
    config: Any, text: str, actions: Any, observation: Any, *, prepaid: bool = False
) -> Any:
    """The `StepRecord` of a reply `text` (and its `actions`) to an observation dict, as an
    agent that gives only replies makes it; `prepaid`: replayed from a recording."""
    import attrs

    from adapters.record import StepRecord, raw_observation

    record = StepRecord.of_reply("the task", config, raw_observation(observation), text, actions)
    return attrs.evolve(record, response=attrs.evolve(record.response, prepaid=prepaid))
