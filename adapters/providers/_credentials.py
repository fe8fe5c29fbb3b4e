"""Where keys and endpoints come from: explicit arguments first, then environment variables.

Only the registry calls these; providers never read the environment.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import httpx

from adapters.errors import ConfigurationError
from osharm_core.errors import excerpt

if TYPE_CHECKING:
    from adapters.contract import ModelClient
    from adapters.registry import ClientOptions


def from_env(names: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """The first non-blank value among the variables `names` (in order), else `None`.

    >>> from_env(["A", "B"], {"A": " ", "B": "b"})
    'b'
    """
    found = _first_set(names, environ)
    return None if found is None else found[1]


def _first_set(names: Sequence[str], environ: Mapping[str, str] | None) -> tuple[str, str] | None:
    """The first variable of `names` with a non-blank value, and that value (stripped)."""
    env = os.environ if environ is None else environ
    for name in names:
        value = env.get(name, "").strip()
        if value:
            return name, value
    return None


def pick(
    explicit: str | None, names: Sequence[str], environ: Mapping[str, str] | None = None
) -> str | None:
    """`explicit` when given (non-blank), else the first set variable of `names`.

    >>> pick(None, ["X"], {"X": "from-env"}), pick("arg", ["X"], {"X": "from-env"})
    ('from-env', 'arg')
    """
    if explicit is not None and explicit.strip():
        return explicit.strip()
    return from_env(names, environ)


def require_key(
    explicit: str | None,
    names: Sequence[str],
    *,
    provider: str,
    environ: Mapping[str, str] | None = None,
) -> str:
    """The API key for `provider`, or a `ConfigurationError` naming the variable(s) to set.

    >>> require_key(None, ["ACME_API_KEY"], provider="acme", environ={})
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: acme needs an API key: set ACME_API_KEY or pass api_key=...
    """
    key = pick_key(explicit, names, provider=provider, environ=environ)
    if key is None:
        wanted = " or ".join(names)
        raise ConfigurationError(f"{provider} needs an API key: set {wanted} or pass api_key=...")
    return key


def pick_key(
    explicit: str | None,
    names: Sequence[str],
    *,
    provider: str,
    environ: Mapping[str, str] | None = None,
) -> str | None:
    """`pick` for an API key, checked with `check_key` (naming where it came from)."""
    if explicit is not None and explicit.strip():
        return check_key(explicit.strip(), "api_key", provider=provider)
    found = _first_set(names, environ)
    return None if found is None else check_key(found[1], found[0], provider=provider)


def check_key(key: str, where: str, *, provider: str) -> str:
    """`key`, or a `ConfigurationError` when no HTTP header can carry it (a space, a line
    break, a non-ASCII character: a variable set wrongly); the error never shows the key.

    >>> check_key("sk-ok", "ACME_API_KEY", provider="acme")
    'sk-ok'
    """
    if key.isascii() and key.isprintable() and not any(c.isspace() for c in key):
        return key
    raise ConfigurationError(
        f"{provider}: the API key in {where} holds a space, a line break or a non-ASCII "
        "character, so no request can carry it; check how it was set (its value is not shown)"
    )


def valid_key(instance: object, attribute: object, value: Any) -> None:
    """The attrs validator of a provider's `api_key`: `check_key` when the provider is built,
    so a key no header can carry is a `ConfigurationError` (never shown) before any request,
    however the provider was made. `None` passes (a provider that may go without a key).

    >>> import attrs
    >>> Acme = attrs.make_class("Acme", {"api_key": attrs.field(validator=valid_key)})
    >>> Acme("sk-SECRÉT")
    Traceback (most recent call last):
    ...
    osharm_core.errors.ConfigError: Acme: the API key in api_key holds a space, a line break or a non-ASCII character, so no request can carry it; check how it was set (its value is not shown)
    """
    if value is None:
        return
    provider = getattr(instance, "name", None)
    provider = provider if isinstance(provider, str) and provider else type(instance).__name__
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{provider}: api_key must be a string, not {type(value).__name__}"
        )
    check_key(value, "api_key", provider=provider)


def require_url(
    explicit: str | None,
    names: Sequence[str],
    *,
    what: str,
    default: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> str:
    """A base URL: the argument, else the variables, else `default`; it must be an http(s) URL
    that httpx can parse, with a host and a port (when given) in 1-65535.

    >>> require_url(None, ["ACME_BASE_URL"], what="acme", default="https://acme.test/v1/", environ={})
    'https://acme.test/v1'
    """
    url = pick(explicit, names, environ) or default
    if url is None:
        hint = " or set " + " or ".join(names) if names else ""
        raise ConfigurationError(f"{what} needs a base URL: pass base_url=...{hint}")
    problem = url_problem(url)
    if problem is not None:
        raise ConfigurationError(f"{what}: base URL {problem}")
    return url.rstrip("/")


def url_problem(url: str) -> str | None:
    """Why `url` cannot be a base URL (not http(s), not parseable by httpx, no host, a port
    outside 1-65535), quoting it; `None` when it can.

    >>> url_problem("http://127.0.0.1:abc/v1")
    "'http://127.0.0.1:abc/v1' is not a URL: Invalid port: 'abc'"
    """
    if not url.startswith(("http://", "https://")):
        return f"must start with http:// or https://; got {excerpt(url)}"
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError, ValueError) as exc:
        return f"{excerpt(url)} is not a URL: {exc}"
    if not parsed.host:
        return f"{excerpt(url)} names no host"
    if parsed.port is not None and not 1 <= parsed.port <= 65535:
        return f"{excerpt(url)} has port {parsed.port}, outside 1-65535"
    return None


def named_model(options: ClientOptions) -> str:
    """The model name after a scheme prefix, or a `ConfigurationError` when there is none."""
    if not options.model.strip():
        raise ConfigurationError(f"{options.name!r}: no model name after {options.scheme!r}")
    return options.model.strip()


def keyed_client(
    provider: Callable[..., Any],
    *,
    vendor: str,
    key_envs: Sequence[str],
    url_envs: Sequence[str],
    default_url: str,
) -> Callable[[ClientOptions], ModelClient]:
    """A registry factory building `provider(api_key=, base_url=)` for a named model, the key
    and base URL taken from the options or else from `key_envs` / `url_envs`."""

    def make(options: ClientOptions) -> ModelClient:
        named_model(options)
        key = require_key(options.api_key, key_envs, provider=vendor)
        base = require_url(options.base_url, url_envs, what=vendor, default=default_url)
        return options.http_client_for(provider(api_key=key, base_url=base))

    return make
