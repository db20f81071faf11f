"""What differs between the transformers versions Rollgate supports, asked once per model class."""

from __future__ import annotations

import functools
import inspect
from typing import Any


@functools.cache
def _cache_kwarg(cls: type) -> str:
    return "cache" if "cache" in inspect.signature(cls.forward).parameters else "past_key_values"


def cache_kwarg(model: Any) -> str:
    """The keyword a causal LM's `forward` takes its KV cache under: `cache` in transformers 5.2x,
    which deprecates `past_key_values` with a warning on every call; `past_key_values` before."""
    return _cache_kwarg(type(model))


def output_cache(out: Any) -> Any:
    """The KV cache a forward returned: `out.cache` in transformers 5.2x (reading the deprecated
    `past_key_values` there warns), `out.past_key_values` before."""
    if "cache" in out:  # not out.get("cache", out.past_key_values): that reads the old name, and warns
        return out["cache"]
    return out.past_key_values
