"""One error tree: every exception lives in its package's errors module, under OsharmError."""

from __future__ import annotations

import ast
import inspect
import pickle
from pathlib import Path

import pytest

import adapters
import osharm_core
from adapters import errors as adapter_errors
from osharm_core import errors as core_errors

ROOT = Path(__file__).resolve().parents[1]
ERRORS_MODULES = {ROOT / "osharm_core" / "errors.py", ROOT / "adapters" / "errors.py"}


def _exception_classes() -> list[type[BaseException]]:
    return [
        value
        for value in vars(adapter_errors).values()
        if inspect.isclass(value)
        and issubclass(value, BaseException)
        and not value.__name__.startswith("_")
    ]


def test_no_exception_class_is_defined_outside_the_errors_modules() -> None:
    """Public exceptions live in the errors modules (private control-flow ones may stay put)."""
    for package in ("osharm_core", "adapters"):
        for path in (ROOT / package).rglob("*.py"):
            if path in ERRORS_MODULES:
                continue
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                    bases = [ast.unparse(b) for b in node.bases]
                    assert not any(b.endswith(("Error", "Exception")) for b in bases), (
                        f"{path.relative_to(ROOT)}: class {node.name}({', '.join(bases)}) "
                        "belongs in the package's errors module"
                    )


def test_every_error_is_an_osharm_error_and_exported() -> None:
    for cls in _exception_classes():
        assert issubclass(cls, core_errors.OsharmError), cls
        assert cls.__name__ in adapter_errors.__all__
        owner = adapters if hasattr(adapters, cls.__name__) else osharm_core
        assert getattr(owner, cls.__name__) is cls


def test_the_branches_of_the_tree() -> None:
    e = adapter_errors
    assert not issubclass(e.SafetyCheckPending, e.ModelCallError)
    assert issubclass(e.ConfigurationError, core_errors.ConfigError)
    assert issubclass(e.ReplayExhausted, e.RepliesExhausted)
    assert issubclass(e.FakeClientExhausted, e.RepliesExhausted)
    assert issubclass(e.RepliesExhausted, e.ModelCallError)
    assert issubclass(e.RepliesExhausted, LookupError)
    assert issubclass(e.ResponseTooLargeError, e.ResponseDecodeError)
    for cls in (e.ConfigError, e.ObservationError, e.ActionParseError, e.TrajectoryError):
        assert issubclass(cls, ValueError)


@pytest.mark.parametrize(
    "error",
    [
        adapter_errors.RetryableError("busy", provider="p", status=503, retry_after=2.0),
        adapter_errors.ReplayExhausted("none left", provider="replay"),
        adapter_errors.SafetyCheckPending([("sc_1", "code", "why")], provider="openai"),
        adapter_errors.ConfigurationError("no key"),
        adapter_errors.TrajectoryError("torn"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_errors_pickle_with_their_fields(error: Exception) -> None:
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is type(error)
    assert str(again) == str(error)
    assert vars(again) == vars(error)


def test_a_value_whose_repr_raises_is_still_quoted() -> None:
    """Errors quote what they were given through `excerpt`; a caller's object (a revert
    callable, a task config) whose `__repr__` raises used to turn the error into another."""
    from osharm_core.errors import excerpt

    class Odd:
        def __repr__(self) -> str:
            raise RuntimeError("no")

    assert excerpt(Odd()) == "<unprintable Odd>"
