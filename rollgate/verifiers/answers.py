"""Final-answer extraction: how a free-text response becomes the one answer that is graded.

The rule, in order (documented in every math row's instructions):
1. the last `\\boxed{...}` (braces may nest);
2. else the last line of the form `Answer: ...` (also `Final answer: ...`);
3. else the last number in the text.
"""

from __future__ import annotations

import re

_ANSWER_LINE = re.compile(r"(?im)^[\s*#>_-]*(?:the\s+)?(?:final\s+)?answer\s*(?:is)?\s*[:：=]\s*(.+?)\s*$")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?")


def extract_boxed(text: str) -> str | None:
    """The content of the last \\boxed{...} (or \\fbox{...}), with nested braces balanced."""
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    i = text.index("{", start) + 1
    depth, j = 1, i
    while j < len(text) and depth:
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        j += 1
    return text[i : j - 1].strip() if depth == 0 else None


def extract_answer_line(text: str) -> str | None:
    matches = _ANSWER_LINE.findall(text)
    if not matches:
        return None
    ans = matches[-1].strip().strip("*_`").strip()
    return ans.rstrip(".").strip() or None


def last_number(text: str) -> str | None:
    matches = _NUMBER.findall(text)
    return matches[-1].replace(" ", "") if matches else None


def extract_final_answer(text: str) -> str | None:
    """The graded answer of a response (see the module docstring for the rule), or None."""
    if not text:
        return None
    for extract in (extract_boxed, extract_answer_line, last_number):
        found = extract(text)
        if found:
            return found
    return None
