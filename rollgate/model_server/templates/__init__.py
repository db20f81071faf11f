"""Chat templates a model can be served with instead of its checkpoint's own
(`model.chat_template`: a file path, a name below, or the template text itself)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

NAMES = ("chatml",)  # templates/<name>.jinja


def resolve_chat_template(value: str | None, *, field: str = "model.chat_template") -> str | None:
    """The template text for a setting's value; None keeps the checkpoint's own template."""
    if value is None or value == "":
        return None
    if "{{" in value or "{%" in value:
        return value  # the template itself, as vLLM's --chat-template also takes
    if value in NAMES:
        return resources.files(__name__).joinpath(f"{value}.jinja").read_text()
    path = Path(value).expanduser()
    if path.is_file():
        return path.read_text()
    raise ValueError(
        f"{field}: {value!r} is neither a template file nor a known template name; known names: {list(NAMES)} "
        "(or leave it unset to use the model's own template)"
    )
