"""Chat templates a model can be served with instead of its checkpoint's own
(`model.chat_template`: a file path, a shipped name, or the template text itself). The names and
the checks live with the model registry (core/model_registry.py); this reads the setting."""

from __future__ import annotations

from rollgate.core import model_registry
from rollgate.core.errors import BadRequest

NAMES = tuple(sorted(model_registry.CHAT_TEMPLATES))


def resolve_chat_template(value: str | None, *, field: str = "model.chat_template") -> str | None:
    """The template text for a setting's value; None keeps the checkpoint's own template."""
    if value is None or value == "":
        return None
    try:
        return model_registry.chat_template_text(value)
    except (ValueError, BadRequest) as exc:
        message = exc.message if isinstance(exc, BadRequest) else str(exc)
        raise ValueError(f"{field}: {message}") from None
