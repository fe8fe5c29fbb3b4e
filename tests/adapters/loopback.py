"""A real HTTP server on 127.0.0.1 for integration tests: routes, scripted replies, injected faults.

Only the standard library, so it also runs as a script in its own process
(`python loopback.py --delay 0.2` prints its base URL, serves until stdin
closes; `in_child_process(...)` starts and stops one), which keeps its CPU
time out of a benchmark's measurements.

* Routes: `server.route("POST", r"/v1/messages", handler)` adds a handler
  (`Received -> Reply`) for paths matching the regex; later routes win, so a
  test helper can add provider routes from its own module. The built-in
  route answers any `.../chat/completions` path (OpenAI and Azure) with a
  canned completion.
* Faults: `server.enqueue(Reply(...), ...)` queues scripted replies that the
  next requests get, in order, before any route is asked (optionally only
  requests whose path matches `path=`). A `Reply` sets status, headers and
  body (bytes, str or JSON), a `delay`, `drop=True` (send the headers and half
  the body, then close the connection) or `hangup=True` (close without
  answering). Hostile servers too: `trickle=` seconds between single body
  bytes, `declared_length=` a Content-Length that lies, and `stream=` a
  function giving body chunks made on the fly (sent with no length, the
  connection closed after them, so a huge body never sits in memory).
* `server.requests` is every request received, in order (none are kept with
  `keep_requests=False`, as in a script's long benchmark runs).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import socket
import subprocess
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Received:
    """One request as the server saw it (header names lower-cased)."""

    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        """The body decoded as JSON."""
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """What the server sends back, faults included."""

    status: int = 200
    body: Any = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0
    drop: bool = False
    hangup: bool = False
    trickle: float = 0.0
    declared_length: int | None = None
    stream: Callable[[], Iterable[bytes]] | None = None

    def payload(self) -> tuple[bytes, str]:
        """The body bytes and their content type."""
        if isinstance(self.body, bytes):
            return self.body, "application/json"
        if isinstance(self.body, str):
            return self.body.encode(), "application/json"
        return json.dumps(self.body).encode(), "application/json"


Handler = Callable[[Received], Reply]


def chat_completion(
    text: str | None = "loopback reply",
    *,
    model: str = "gpt-4o-loopback",
    prompt_tokens: int = 11,
    completion_tokens: int = 3,
) -> dict[str, Any]:
    """An OpenAI Chat Completions reply body with `text` (None: a message with no content)."""
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def openai_error(status: int, message: str, *, code: str | None = None, kind: str = "") -> Reply:
    """An OpenAI-style error reply."""
    body = {"error": {"message": message, "type": kind or "invalid_request_error", "code": code}}
    return Reply(status, body, headers={"x-request-id": f"req-{status}"})


class LoopbackServer:
    """A threading HTTP server on 127.0.0.1 with routes and a queue of scripted replies."""

    def __init__(self, *, default_delay: float = 0.0, keep_requests: bool = True) -> None:
        self.default_delay = default_delay
        self.keep_requests = keep_requests
        self._lock = threading.Lock()
        self._routes: list[tuple[str, re.Pattern[str], Handler]] = []
        self._queue: deque[tuple[re.Pattern[str] | None, Reply]] = deque()
        self._requests: list[Received] = []
        self._httpd = _Server(("127.0.0.1", 0), _RequestHandler)
        self._httpd.owner = self
        self._thread: threading.Thread | None = None
        self.route("POST", r".*/chat/completions", self._chat)

    @property
    def base_url(self) -> str:
        """`http://127.0.0.1:PORT`."""
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[Received]:
        """Every request received since the last `reset()`, in order."""
        with self._lock:
            return list(self._requests)

    def wait_for_requests(
        self, count: int, *, path: str | None = None, timeout: float = 30.0
    ) -> list[Received]:
        """The requests received (to `path`, if given), once there are at least `count` (a
        test's clients run in threads of their own; a fixed sleep races them on a loaded
        machine)."""
        deadline = time.monotonic() + timeout
        while len(received := [r for r in self.requests if path in (None, r.path)]) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{len(received)} of {count} requests in {timeout} s")
            time.sleep(0.01)
        return received

    def route(self, method: str, pattern: str, handler: Handler) -> None:
        """Answer `method` requests whose path (no query) fully matches `pattern` with `handler`."""
        with self._lock:
            self._routes.insert(0, (method.upper(), re.compile(pattern), handler))

    def enqueue(self, *replies: Reply, path: str | None = None) -> None:
        """Queue scripted replies for the next requests (whose path matches `path`, if given)."""
        compiled = re.compile(path) if path is not None else None
        with self._lock:
            self._queue.extend((compiled, r) for r in replies)

    def pending(self) -> int:
        """How many scripted replies are still queued."""
        with self._lock:
            return len(self._queue)

    def reset(self) -> None:
        """Forget queued replies and received requests (routes stay)."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()

    def dispatch(self, received: Received) -> Reply:
        """The reply for `received`: the first matching queued reply, else the route's."""
        with self._lock:
            if self.keep_requests:
                self._requests.append(received)
            for index, (pattern, reply) in enumerate(self._queue):
                if pattern is None or pattern.search(received.path):
                    del self._queue[index]
                    return reply
            routes = list(self._routes)
        for method, pattern, handler in routes:
            if method == received.method and pattern.fullmatch(received.path):
                return handler(received)
        return Reply(404, {"error": {"message": f"no route for {received.path}"}})

    def _chat(self, received: Received) -> Reply:
        return Reply(200, chat_completion(), delay=self.default_delay)

    def start(self) -> LoopbackServer:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> LoopbackServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    owner: LoopbackServer


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out at once, no 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        """Stay quiet."""

    def handle(self) -> None:
        """Serve the connection; a client that hung up mid-reply is no error here."""
        with contextlib.suppress(ConnectionError):
            super().handle()

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        path, _, query = self.path.partition("?")
        received = Received(
            method=self.command,
            path=path,
            query=query,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
        )
        reply = self.server.owner.dispatch(received)
        if reply.delay:
            time.sleep(reply.delay)
        try:
            if reply.hangup:
                self._hang_up()
                return
            payload, content_type = reply.payload()
            self.send_response(reply.status)
            self.send_header("content-type", content_type)
            for name, value in reply.headers.items():
                self.send_header(name, value)
            if reply.stream is not None:
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in reply.stream():
                    self.wfile.write(chunk)
                self._hang_up()
                return
            length = len(payload) if reply.declared_length is None else reply.declared_length
            self.send_header("content-length", str(length))
            self.end_headers()
            if reply.trickle:
                for index in range(len(payload)):
                    self.wfile.write(payload[index : index + 1])
                    self.wfile.flush()
                    time.sleep(reply.trickle)
                return
            if reply.drop:
                self.wfile.write(payload[: len(payload) // 2])
                self.wfile.flush()
                self._hang_up()
                return
            self.wfile.write(payload)
        except OSError:  # the client gave up (timeout) and closed its end
            self.close_connection = True

    def _hang_up(self) -> None:
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def in_child_process(*args: str) -> Iterator[str]:
    """This module as a script in a child process (`args`: its options, e.g. `--delay 0.2`),
    so its CPU time stays out of the caller's; yields its base URL, stops it at the end."""
    process = subprocess.Popen(
        [sys.executable, __file__, *args],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stdin is not None
    try:
        base_url = process.stdout.readline().strip()
        assert base_url.startswith("http://127.0.0.1:"), base_url
        yield base_url
    finally:
        process.stdin.close()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        process.stdout.close()


def main(argv: list[str] | None = None) -> None:
    """Serve until stdin closes; print the base URL first (for a server in its own process)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--delay", type=float, default=0.0, help="seconds before each reply")
    parser.add_argument("--reply", help="the chat completions' text (default: a canned one)")
    args = parser.parse_args(argv)
    # Nobody reads a script's requests back: keeping them would hold every body received.
    with LoopbackServer(default_delay=args.delay, keep_requests=False) as server:
        if args.reply is not None:
            reply = Reply(200, chat_completion(args.reply), delay=args.delay)
            server.route("POST", r".*/chat/completions", lambda _: reply)
        print(server.base_url, flush=True)
        sys.stdin.read()


if __name__ == "__main__":
    main()
