"""Every hypothesis strategy of the test suite, in one place.

Sections are grouped by the concern they feed; add new strategies to the
section of the module they exercise.
"""

from __future__ import annotations

from hypothesis import strategies as st

# --- text -----------------------------------------------------------------

#: Any text, including control characters, surrogate-free odd Unicode and fences.
any_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=400) | st.text(
    alphabet="`'\";\n\t #\\abcDONEWAITFAILpyautogui().,=", max_size=200
)
