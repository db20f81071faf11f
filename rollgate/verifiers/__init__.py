"""Reward functions and their composition. Small modules, one job each:

answers (final-answer extraction), strings (exact / normalised match), mathexpr (safe expressions),
math_equiv (numeric / symbolic equivalence; math-verify for sets, intervals, matrices), answer_form
(is an equal answer written in the expected form: a value, not the question's expression), math_grader
(the worker processes that run it under a time limit), toolcalls (function-call comparison), structured
(JSON schema checks), state (expected-subset-of-actual), judge (LLM-as-judge), compose
(weighted_sum, gate).

Names are re-exported lazily: importing `rollgate.verifiers.compose` must not pay for sympy.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "extract_final_answer": "answers",
    "gate": "compose",
    "weighted_sum": "compose",
    "check_equivalence": "math_equiv",
    "form_mismatch": "answer_form",
    "math_equivalent": "math_equiv",
    "MathGrader": "math_grader",
    "compare_state": "state",
    "state_matches": "state",
    "exact_match": "strings",
    "normalize_text": "strings",
    "normalized_match": "strings",
    "check_json_schema": "structured",
    "parse_json_output": "structured",
    "compare_tool_calls": "toolcalls",
    "function_calls": "toolcalls",
    "LLMJudge": "judge",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'rollgate.verifiers' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rollgate.verifiers.{module}"), name)
