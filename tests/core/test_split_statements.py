"""`split_statements` gives exactly the output of its former per-semicolon implementation."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings

from osharm_core.parsing import split_statements
from tests.core import _split_oracle
from tests.strategies import any_text, python_ish_code


@given(python_ish_code | any_text)
@settings(max_examples=600)
@example("```\nx = '''\n" + "''';'''\n" * 20)
@example("a\n;\nb")
@example(" ;\n  ;\n\n;")
@example("'a\\\n\n;b")
def test_split_statements_matches_the_oracle(code: str) -> None:
    """Any code splits to the very same text as the per-semicolon implementation gave."""
    assert split_statements(code) == _split_oracle.split_statements(code)


@pytest.mark.parametrize(
    "unit", ["''';'''\n", "```python\nx = 1; y = '\n", "a();", "\n", ";\n", "'\\\n", "#;\n"]
)
def test_split_statements_matches_the_oracle_on_long_hostile_code(unit: str) -> None:
    """Long repetitions of the hostile-reply shapes split as before (10 KB each)."""
    code = "x = '''\n" + unit * (10_000 // len(unit)) + ";"
    assert split_statements(code) == _split_oracle.split_statements(code)
