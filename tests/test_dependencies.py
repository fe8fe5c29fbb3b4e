"""The declared dependencies match what the library imports: none missing, none idle."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path
from typing import Final

ROOT = Path(__file__).resolve().parents[1]
#: Import names that differ from their distribution's name.
DISTRIBUTIONS: Final = {"PIL": "pillow"}
#: Declared but never imported by the library: a dependency imports it at run time (see the
#: comment beside it in pyproject.toml).
USED_BY_DEPENDENCIES: Final = {"sniffio"}


def _imported() -> set[str]:
    """The third-party distributions `osharm_core/` and `adapters/` import (at any depth)."""
    found: set[str] = set()
    for package in ("osharm_core", "adapters"):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    found.update(alias.name.split(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    found.add(node.module.split(".")[0])
    local = set(sys.stdlib_module_names) | {"osharm_core", "adapters", "__future__"}
    return {DISTRIBUTIONS.get(name, name).lower() for name in found - local}


def _declared() -> set[str]:
    """The distributions pyproject.toml's `dependencies` name."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    names = (re.match(r"[A-Za-z0-9_.-]+", spec) for spec in project["dependencies"])
    return {name.group(0).lower() for name in names if name is not None}


def test_every_imported_package_is_declared() -> None:
    """A package the library imports (anyio, httpcore in the engine) is a declared dependency,
    not one that happens to come with another."""
    assert _imported() - _declared() == set()


def test_every_declared_package_is_imported_or_needed_by_one_that_is() -> None:
    """A declared dependency is imported by the library, or listed with why it is needed."""
    assert _declared() - _imported() - USED_BY_DEPENDENCIES == set()
