"""Keeping the VM's client password out of what its errors say.

A task's setup fills `{CLIENT_PASSWORD}` into the commands it sends
(`echo {CLIENT_PASSWORD} | sudo -S ...`), and OSWorld's server answers a
command that overran with a 500 whose message quotes the command: Python's
`repr` of its argument list, inside a JSON body, which an error message then
quotes again. `Redactor` finds the password in any of those forms (as it is,
as JSON, Python's `repr` and the shell escape it, one inside another up to
`DEPTH` deep, and as the server's `shlex.split` of a string command quotes it) and puts `[redacted]` in its place, as the model clients do
with API keys (`adapters._wire.redact`, whose rule it shares: a secret of
fewer than 4 characters is left alone, since blanking it would blank
ordinary words).
"""

from __future__ import annotations

import functools
import json
import shlex
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar, cast

import attrs

from adapters._wire import redact
from adapters.errors import ModelCallError

#: How many escapings deep a secret is looked for (a repr in a JSON body in a quote).
DEPTH: Final = 3


def _escapings(text: str) -> tuple[str, ...]:
    """`text` as each escaping once writes it, without the quotes around it."""
    single = repr(text + "'\"")[1:-4]  # both quotes in it: repr escapes the single one
    return (
        json.dumps(text)[1:-1],
        json.dumps(text, ensure_ascii=False)[1:-1],
        single,
        single.replace("\\'", "'"),  # the repr in double quotes (text with ' and no ")
        text.replace("'", "'\\''"),  # inside single quotes, as a shell writes it
        text.replace("'", "'\"'\"'"),
    )


def _split(text: str) -> str:
    """`text` as the repr of the list `shlex.split` makes of it shows it, without the quotes
    around it (OSWorld's server splits a string command it is to run without a shell)."""
    try:
        return ", ".join(map(repr, shlex.split(text)))[1:-1]
    except ValueError:  # an unclosed quote: the server does not run it, nor quote it
        return text


def shown_forms(secret: str, depth: int = DEPTH) -> frozenset[str]:
    """`secret` and every form escaping it up to `depth` times gives.

    >>> sorted(shown_forms('a"b', depth=1))
    ['a"b', 'a\\\\"b']
    """
    forms = {secret, _split(secret)}
    for _ in range(depth):
        forms |= {shown for form in forms for shown in _escapings(form)}
    return frozenset(forms)


@attrs.frozen
class Redactor:
    """Puts `[redacted]` in place of the secrets' every shown form, in text and in errors."""

    forms: frozenset[str] = frozenset()

    @classmethod
    def of(cls, *secrets: str) -> Redactor:
        """The redactor of `secrets` (those of fewer than 4 characters are left alone)."""
        return cls(frozenset().union(*(shown_forms(s) for s in secrets if len(s) >= 4)))

    def text(self, text: str) -> str:
        """`text` without the secrets.

        >>> Redactor.of("hunter2").text("Command 'echo hunter2 | sudo -S' timed out")
        "Command 'echo [redacted] | sudo -S' timed out"
        """
        return redact(text, self.forms) if self.forms else text

    def scrub(self, error: BaseException) -> None:
        """Take the secrets out of `error`'s message, and out of every error it was raised
        from or while handling (`__cause__`, `__context__`), in place: it keeps its type,
        its fields and its traceback, and pickles without them."""
        if self.forms:
            for each in _chain(error):
                each.args = tuple(
                    self.text(arg) if isinstance(arg, str) else arg for arg in each.args
                )
                if isinstance(each, ModelCallError):  # its words are its `message`
                    each.message = self.text(each.message)


_F = TypeVar("_F", bound=Callable[..., Any])


def redacting(method: _F) -> _F:
    """`method` with its errors scrubbed by its object's `redactor` on their way out."""

    @functools.wraps(method)
    def scrubbed(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as error:
            self.redactor.scrub(error)
            raise

    return cast(_F, scrubbed)


def _chain(error: BaseException) -> Iterator[BaseException]:
    """`error` and the errors behind it, each once."""
    seen: set[int] = set()
    pending: list[BaseException | None] = [error]
    while pending:
        each = pending.pop()
        if each is not None and id(each) not in seen:
            seen.add(id(each))
            yield each
            pending += [each.__cause__, each.__context__]


__all__ = ["DEPTH", "Redactor", "redacting", "shown_forms"]
