"""The price table: USD per million tokens per model, kept as data (`prices.json`) in the package.

Matching rules (explicit, in this order):

1. An entry matches when one of its names equals the whole name as given
   (case and surrounding spaces aside, and `scheme:model` or `scheme|model`
   read as `scheme/model`, as the registry reads them): a user's entry for
   `compat/llama3` or `anthropic-computer/claude-sonnet-4-6` prices exactly
   that name.
2. Otherwise the vendor's model name is taken: a first-party scheme
   (`anthropic`, `openai`, `gemini`, their native computer-use schemes
   `anthropic-computer`, `openai-computer`, `gemini-computer`, then Gemini's
   `models/`) is removed, with any of the three separators. The computer-use
   schemes call the vendor's own API with the vendor's model, billed at its
   per-token prices (the tool's own prompt tokens are in the reported usage).
   Any other scheme (a compatible server, a router, Azure, a replay) matches
   only by rule 1: their prices are not the vendor's.
3. An entry matches that vendor name when it equals its `model` or one of its
   `aliases`, or is that name followed by a dated snapshot suffix:
   `-YYYYMMDD`, `-YYYY-MM-DD`, or `-latest`. Nothing else:
   `claude-sonnet-5-5` does not match `claude-sonnet-5`, so a new model is
   never priced as an older one.

A table is checked when it is built: every name unique, every price a finite
number >= 0, `read` a date, `source` an http(s) URL.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from datetime import date
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final

import attrs

from adapters._files import MAX_JSON_BYTES, read_regular
from osharm_core.errors import ConfigError, excerpt, is_finite_number, refusing

#: Scheme prefixes whose model names are the vendor's own (see the matching rules).
FIRST_PARTY_SCHEMES: Final = (
    "anthropic",
    "openai",
    "gemini",
    "anthropic-computer",
    "openai-computer",
    "gemini-computer",
)

_SEPARATOR: Final = re.compile(r"[/|:]")
_SNAPSHOT: Final = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2}|latest)")


def _key(name: str) -> str:
    """`name` as rule 1 compares it: lower-cased, stripped, its first separator read as `/`."""
    name = name.strip().lower()
    match = _SEPARATOR.search(name)
    return name if match is None else f"{name[: match.start()]}/{name[match.end() :]}"


def normalise_model_name(model: str) -> str | None:
    """The vendor's name prices are looked up by, or `None` when it names a third-party endpoint.

    >>> normalise_model_name("anthropic/Claude-Sonnet-4-5")
    'claude-sonnet-4-5'
    >>> normalise_model_name("anthropic-computer:claude-sonnet-4-6")
    'claude-sonnet-4-6'
    >>> normalise_model_name("together/meta-llama/Llama-3-70b") is None
    True
    """
    name = _key(model)
    scheme, _, rest = name.partition("/")
    if rest and scheme in FIRST_PARTY_SCHEMES:
        name = _key(rest)
    name = name.removeprefix("models/")
    return None if "/" in name or not name else name


def _finite(_: object, attribute: attrs.Attribute[Any], value: object) -> None:
    """An attrs validator: a finite JSON number (not a bool, not an int past a float's range)."""
    if not is_finite_number(value):
        raise TypeError(attribute.name)


def _date(_: object, attribute: attrs.Attribute[Any], value: str) -> None:
    """An attrs validator: `""` (not given) or a YYYY-MM-DD date."""
    if value:
        date.fromisoformat(value)


def _name(value: object) -> object:
    """A model name as tables compare it: stripped and lower-cased (anything else left to the
    validator to refuse)."""
    return value.strip().lower() if isinstance(value, str) else value


def _names(value: object) -> object:
    """Aliases as a tuple of names (see `_name`); a JSON list is taken as one."""
    return tuple(map(_name, value)) if isinstance(value, list | tuple) else value


_NAME: Final = re.compile(r"\s*\S.*", re.DOTALL)
_USD: Final = refusing(
    "a finite number of USD per million tokens that is not negative",
    _finite,
    attrs.validators.ge(0),
)
_NAMES: Final = refusing(
    "a list of non-empty names",
    attrs.validators.deep_iterable(
        attrs.validators.and_(
            attrs.validators.instance_of(str), attrs.validators.matches_re(_NAME)
        ),
        attrs.validators.instance_of(tuple),
    ),
)


@attrs.frozen(kw_only=True)
class ModelPrice:
    """One model's standard prices in USD per million tokens, with where and when they were read.

    `cached_input` is the price of prompt tokens served from a cache; `None`
    when the source gave none. Reasoning tokens are billed as `output`. Each
    field is checked when the price is built (`ConfigError` naming it): a
    non-empty `model` and `aliases`, finite prices >= 0, `read` a YYYY-MM-DD
    date and `source` an http(s) URL (both may be left out).
    """

    model: str = attrs.field(
        converter=_name,
        validator=refusing("a non-empty string", attrs.validators.matches_re(_NAME)),
    )
    input: float = attrs.field(validator=_USD)
    output: float = attrs.field(validator=_USD)
    cached_input: float | None = attrs.field(
        default=None, validator=attrs.validators.optional(_USD)
    )
    aliases: tuple[str, ...] = attrs.field(default=(), converter=_names, validator=_NAMES)
    read: str = attrs.field(
        default="",
        validator=refusing("a YYYY-MM-DD date", attrs.validators.instance_of(str), _date),
    )
    source: str = attrs.field(
        default="",
        validator=refusing("an http(s) URL", attrs.validators.matches_re(r"(https?://.+)?")),
    )

    @property
    def names(self) -> tuple[str, ...]:
        """The model name and its aliases."""
        return (self.model, *self.aliases)

    def matches(self, name: str) -> bool:
        """Whether the normalised `name` is this model (see the module's matching rules)."""
        return any(
            name == known
            or (name.startswith(known) and _SNAPSHOT.fullmatch(name[len(known) :]) is not None)
            for known in self.names
        )

    @classmethod
    def from_json(cls, obj: object, where: str) -> ModelPrice:
        """An entry of `prices.json` (names lower-cased; `read` and `source` required);
        `ConfigError` naming `where` and the field when it is malformed."""
        if not isinstance(obj, Mapping):
            raise ConfigError(f"{where} must be an object; got {type(obj).__name__}")
        unknown = sorted(map(str, set(obj) - {f.name for f in attrs.fields(cls)}))
        try:
            if unknown:
                raise ConfigError(f"unknown keys: {', '.join(unknown)}")
            # `read` and `source` may be left out of a price built in code, not of a table
            return cls(**{"read": None, "source": None, **obj})
        except (ConfigError, TypeError) as exc:  # TypeError: a required key is missing
            raise ConfigError(f"{where}: {exc}") from None


def _entries(value: Iterable[ModelPrice]) -> tuple[ModelPrice, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class PriceTable:
    """A versioned set of `ModelPrice`s; `lookup(model)` applies the matching rules."""

    version: str = attrs.field(
        validator=refusing("a non-empty string", attrs.validators.matches_re(_NAME))
    )
    entries: tuple[ModelPrice, ...] = attrs.field(converter=_entries)

    def __attrs_post_init__(self) -> None:
        seen: dict[str, str] = {}
        for entry in self.entries:
            for name in entry.names:
                if _key(name) in seen:
                    raise ConfigError(
                        f"price table {self.version}: {name!r} is listed twice "
                        f"({seen[_key(name)]} and {entry.model})"
                    )
                seen[_key(name)] = entry.model

    def lookup(self, model: str) -> ModelPrice | None:
        """The price of `model` (a name as given to `client_for`), or `None` when the table has none."""
        whole = _key(model)
        for entry in self.entries:
            if any(_key(known) == whole for known in entry.names):
                return entry
        name = normalise_model_name(model)
        if name is None:
            return None
        for entry in self.entries:
            if name in entry.names:
                return entry
        return next((entry for entry in self.entries if entry.matches(name)), None)

    def with_overrides(self, other: PriceTable | Iterable[ModelPrice]) -> PriceTable:
        """This table with `other`'s entries added; a name `other` lists is taken from this table's
        entries (an entry left with no name is dropped; its other names keep their prices)."""
        table = (
            other
            if isinstance(other, PriceTable)
            else PriceTable(version="overrides", entries=other)
        )
        extra = table.entries
        replaced = {_key(name) for entry in extra for name in entry.names}
        kept = []
        for entry in self.entries:
            names = [name for name in entry.names if _key(name) not in replaced]
            if len(names) == len(entry.names):
                kept.append(entry)
            elif names:
                kept.append(attrs.evolve(entry, model=names[0], aliases=tuple(names[1:])))
        return PriceTable(version=f"{self.version}+{table.version}", entries=(*extra, *kept))

    @classmethod
    def from_json(cls, obj: object, where: str = "price table") -> PriceTable:
        """A table from decoded JSON: `{"version": ..., "models": [entry, ...]}`."""
        if not isinstance(obj, Mapping) or not isinstance(obj.get("models"), list):
            raise ConfigError(f"{where}: expected an object with a 'models' list")
        entries = [
            ModelPrice.from_json(entry, f"{where}: models[{index}]")
            for index, entry in enumerate(obj["models"])
        ]
        try:
            return cls(version=obj.get("version", "custom"), entries=entries)
        except ConfigError as exc:
            raise ConfigError(f"{where}: {exc}") from None

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> PriceTable:
        """A table from a JSON file in the `prices.json` format; `ConfigError` naming the file when unusable."""
        try:
            data = read_regular(Path(path), "price table", MAX_JSON_BYTES, ConfigError)
        except FileNotFoundError as exc:
            raise ConfigError(f"cannot read price table {path}: {exc.strerror}") from None
        try:
            obj: Any = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise ConfigError(f"cannot read price table {path}: {exc}") from None
        return cls.from_json(obj, str(path))


@cache
def default_prices() -> PriceTable:
    """The price table shipped in the package (`adapters/accounting/prices.json`), loaded once."""
    text = resources.files("adapters.accounting").joinpath("prices.json").read_text("utf-8")
    return PriceTable.from_json(json.loads(text), "adapters/accounting/prices.json")


def check_prices(prices: object) -> PriceTable | None:
    """`prices` when it is a `PriceTable` or `None`, else a `ConfigError` (a path or a mapping
    is read with `load_prices` first)."""
    if prices is not None and not isinstance(prices, PriceTable):
        raise ConfigError(
            f"prices must be a PriceTable or None (read a file or mapping with load_prices); "
            f"got {type(prices).__name__} {excerpt(prices)}"
        )
    return prices


def load_prices(
    overrides: str | os.PathLike[str] | Mapping[str, Any] | PriceTable | None = None,
) -> PriceTable:
    """The shipped table, with a user's prices (a JSON file, decoded JSON or a table) taking precedence."""
    base = default_prices()
    if overrides is None:
        return base
    if isinstance(overrides, PriceTable):
        return base.with_overrides(overrides)
    if isinstance(overrides, Mapping):
        return base.with_overrides(PriceTable.from_json(overrides, "price overrides"))
    return base.with_overrides(PriceTable.from_file(overrides))
