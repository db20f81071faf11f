"""The offline tiny model: a byte-level BPE tokenizer and a small Qwen2-style causal LM, built in
seconds with no network, deterministic for a seed, briefly warmed up on synthetic agent
transcripts so it emits well-formed tool calls and final answers instead of pure noise.

`build_tiny_model(out_dir, seed)` writes a transformers model directory; `ensure_tiny_model(path)`
builds it once (atomically, safe under concurrent callers) and returns the path."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from rollgate.core.blocking import FileLock

log = logging.getLogger("rollgate.model_server.tiny")

PAD, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [PAD, IM_START, IM_END, "<tool_call>", "</tool_call>", "<think>", "</think>"]
VOCAB_SIZE = 2048
CONTEXT = 2048
WARMUP_STEPS = 110
WARMUP_BATCH = 8
REQUIRED_FILES = ("config.json", "tokenizer.json", "model.safetensors")
# Bump when the recipe changes: ensure_tiny_model rebuilds cached copies made by an older recipe.
# 2: head_dim 32 (vLLM's CPU attention has no kernel for head_dim 16).
RECIPE_VERSION = 2
STAMP = "rollgate_tiny.json"
BUILD_WAIT_S = 1800.0  # how long a caller waits while another process builds the same model


@dataclass(frozen=True)
class TinyShape:
    """The Qwen2 dimensions of a tiny model. The default is the embedded model; a learning recipe
    asks for a larger one (rollgate.trainer_adapters.recipes) with the same tokenizer."""

    hidden_size: int = 64
    intermediate_size: int = 192
    num_hidden_layers: int = 2
    num_attention_heads: int = 2
    num_key_value_heads: int = 1


def chat_template() -> str:
    return resources.files("rollgate.model_server").joinpath("tiny_chat_template.jinja").read_text()


def _train_tokenizer(corpus: list[str]):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=IM_END,
        pad_token=PAD,
        model_max_length=CONTEXT,
        padding_side="left",
        clean_up_tokenization_spaces=False,
    )
    hf.chat_template = chat_template()
    return hf


def _render(hf, messages: list[dict[str, Any]], tools: list[dict[str, Any]], gen: bool = False) -> str:
    return hf.apply_chat_template(messages, tools=tools or None, tokenize=False, add_generation_prompt=gen)


def split_assistant_turns(tokenizer, text: str, *, tail: bool) -> tuple[list[int], list[int]]:
    """(token ids, loss mask) of a rendered chat, tokenized piece by piece as it is served: each
    stretch of context up to an assistant turn's opener on its own (mask 0), each assistant turn
    through its end-of-turn token on its own (mask 1); with `tail`, what follows the last turn too
    (mask 0). The tiny model's warm-up and the training recipes' SFT both tokenize this way."""
    opener = IM_START + "assistant\n"
    ids: list[int] = []
    mask: list[int] = []
    pos = 0
    while (start := text.find(opener, pos)) != -1:
        start += len(opener)
        end = text.index(IM_END, start) + len(IM_END)
        context = tokenizer.encode(text[pos:start], add_special_tokens=False)
        turn = tokenizer.encode(text[start:end], add_special_tokens=False)
        ids += context + turn
        mask += [0] * len(context) + [1] * len(turn)
        pos = end
    if tail:
        rest = tokenizer.encode(text[pos:], add_special_tokens=False)
        ids += rest
        mask += [0] * len(rest)
    return ids, mask


def _warmup_examples(hf, rng: random.Random, n: int) -> list[tuple[list[int], list[int]]]:
    """(input ids, labels) with loss only on assistant turns (-100 elsewhere)."""
    from rollgate.model_server.tiny_corpus import transcript

    out = []
    for _ in range(n):
        ids, mask = split_assistant_turns(hf, _render(hf, *transcript(rng)), tail=True)
        out.append((ids, [t if m else -100 for t, m in zip(ids, mask, strict=True)]))
    return out


def _warm_up(model, hf, rng: random.Random, steps: int) -> float:
    import torch

    examples = _warmup_examples(hf, rng, steps * WARMUP_BATCH)
    opt = torch.optim.AdamW(model.parameters(), lr=5e-3, weight_decay=0.0)
    model.train()
    loss_value = float("nan")
    for step in range(steps):
        batch = examples[step * WARMUP_BATCH : (step + 1) * WARMUP_BATCH]
        width = max(len(ids) for ids, _ in batch)
        input_ids = torch.full((len(batch), width), hf.pad_token_id, dtype=torch.long)
        labels = torch.full((len(batch), width), -100, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for row, (ids, lab) in enumerate(batch):  # right padding for training
            input_ids[row, : len(ids)] = torch.tensor(ids)
            labels[row, : len(lab)] = torch.tensor(lab)
            mask[row, : len(ids)] = 1
        for group in opt.param_groups:  # linear decay: a stable finish in few steps
            group["lr"] = 5e-3 * (1 - step / steps)
        loss = model(input_ids=input_ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        loss_value = float(loss.detach())
    model.eval()
    return loss_value


def build_tiny_model(
    out_dir: str | os.PathLike,
    seed: int = 0,
    *,
    warmup_steps: int = WARMUP_STEPS,
    shape: TinyShape | None = None,
    extra_transcripts: Sequence[tuple[list[dict[str, Any]], list[dict[str, Any]]]] = (),
) -> Path:
    """Build the tiny model into `out_dir` (created; existing files are overwritten).
    `extra_transcripts` ((chat messages, tools) pairs) join the tokenizer's corpus: a recipe's own
    domain then gets merges of its own, and its episodes far fewer tokens."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from rollgate.model_server.tiny_corpus import transcript

    started = time.perf_counter()
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    # The tokenizer corpus: rendered transcripts need a tokenizer to render, so render them
    # with a throwaway byte-level tokenizer first (the template text does not depend on it).
    bootstrap = _train_tokenizer(["a"])
    corpus = [_render(bootstrap, *transcript(rng)) for _ in range(1500)]
    corpus += [_render(bootstrap, messages, tools) for messages, tools in extra_transcripts]
    hf = _train_tokenizer(corpus)
    eos = hf.convert_tokens_to_ids(IM_END)
    shape = shape or TinyShape()
    config = Qwen2Config(
        vocab_size=len(hf),
        **asdict(shape),
        max_position_embeddings=CONTEXT,
        rope_theta=10000.0,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=eos,
        pad_token_id=hf.pad_token_id,
        torch_dtype="float32",
    )
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: bitwise-identical weights on any machine, no oversubscription
    try:
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
        loss = _warm_up(model, hf, random.Random(seed + 1), warmup_steps) if warmup_steps else float("nan")
    finally:
        torch.set_num_threads(threads)
    model.generation_config = GenerationConfig(
        eos_token_id=eos, pad_token_id=hf.pad_token_id, bos_token_id=None, do_sample=True, temperature=1.0
    )
    model.save_pretrained(out)
    hf.save_pretrained(out)
    _portable_tokenizer_config(out)
    (out / STAMP).write_text(
        json.dumps({"recipe": RECIPE_VERSION, "seed": seed, "warmup_steps": warmup_steps, "shape": asdict(shape)})
        + "\n"
    )
    make_world_readable(out)
    log.info(
        "built tiny model in %s (seed %d, warm-up loss %.3f, %.1fs)", out, seed, loss, time.perf_counter() - started
    )
    return out


def make_world_readable(out: Path) -> None:
    """Files 0644, directories 0755. A model holds no secret, and the service that loads it often
    runs as another user than the one that built it (a container image built as root, run as an
    unprivileged uid); safetensors writes its file 0600 and mkdtemp makes the directory 0700."""
    out.chmod(0o755)
    for path in out.rglob("*"):
        path.chmod(0o755 if path.is_dir() else 0o644)


def _portable_tokenizer_config(out: Path) -> None:
    """Name the generic fast-tokenizer class (loads in transformers 4 and 5, and in vLLM) and keep
    the chat template inside tokenizer_config.json as well as in chat_template.jinja."""
    path = out / "tokenizer_config.json"
    data = json.loads(path.read_text())
    data["tokenizer_class"] = "PreTrainedTokenizerFast"
    data["chat_template"] = chat_template()
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def is_model_dir(path: str | os.PathLike) -> bool:
    p = Path(path)
    return all((p / f).exists() for f in REQUIRED_FILES)


def is_current(path: str | os.PathLike) -> bool:
    """A complete tiny model built by this recipe version."""
    p = Path(path)
    try:
        return is_model_dir(p) and json.loads((p / STAMP).read_text()).get("recipe") == RECIPE_VERSION
    except (OSError, ValueError):
        return False


def build_once(target: Path, is_current: Callable[[Path], bool], build: Callable[[Path], Any]) -> bool:
    """Build a model directory at `target` unless `is_current(target)`; whether it was built now.
    Concurrent callers (several processes starting at once) wait on a lock file beside it; `build`
    writes into a fresh temporary directory, which then replaces `target` atomically."""
    if is_current(target):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(target.parent / f".{target.name}.lock", what=f"the build of {target}", timeout_s=BUILD_WAIT_S):
        if is_current(target):
            return False
        tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
        try:
            build(tmp)
            if target.exists():
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return True


def ensure_tiny_model(path: str | os.PathLike, seed: int = 0) -> Path:
    """Return `path`, building the tiny model there first if it is missing or was built by an older
    recipe (`build_once`: safe under concurrent callers, the directory appears atomically)."""
    target = Path(path)
    build_once(target, is_current, lambda tmp: build_tiny_model(tmp, seed))
    return target
