"""The offline tiny model: deterministic, ChatML-style template, atomic special tokens."""

from __future__ import annotations

import hashlib
from pathlib import Path

from transformers import AutoTokenizer

from rollgate.model_server.tiny import SPECIAL_TOKENS, build_tiny_model, ensure_tiny_model


def _hashes(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


def test_same_seed_gives_identical_files_and_another_seed_differs(tmp_path):
    a = build_tiny_model(tmp_path / "a", seed=3, warmup_steps=2)
    b = build_tiny_model(tmp_path / "b", seed=3, warmup_steps=2)
    c = build_tiny_model(tmp_path / "c", seed=4, warmup_steps=2)
    assert _hashes(a) == _hashes(b)
    assert _hashes(a)["model.safetensors"] != _hashes(c)["model.safetensors"]


def test_ensure_reuses_an_existing_model(tiny_model_dir):
    # The build is deterministic, so equal bytes would not show a rebuild: the files must be the
    # same files, untouched (same inode, same modification time).
    weights = Path(tiny_model_dir) / "model.safetensors"
    before = (weights.stat().st_ino, weights.stat().st_mtime_ns)
    assert ensure_tiny_model(tiny_model_dir) == Path(tiny_model_dir)
    assert (weights.stat().st_ino, weights.stat().st_mtime_ns) == before


def test_template_renders_tools_calls_reasoning_and_tool_results(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    messages = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {
            "role": "assistant",
            "content": "",
            "reasoning_content": "R",
            "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}],
        },
        {"role": "tool", "content": "T"},
    ]
    tools = [{"name": "f", "parameters": {"type": "object"}}]
    text = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=True)
    assert text == (
        '<|im_start|>system\nS\n\n# Tools\nCall a tool by replying <tool_call>{"name": NAME, '
        '"arguments": {...}}</tool_call>.\n<tools>\n{"name": "f", "parameters": '
        '{"type": "object"}}\n</tools><|im_end|>\n<|im_start|>user\nU<|im_end|>\n'
        '<|im_start|>assistant\n<think>R</think><tool_call>{"name": "f", "arguments": {"x": 1}}'
        "</tool_call><|im_end|>\n<|im_start|>tool\nT<|im_end|>\n<|im_start|>assistant\n"
    )
    shorter = tok.apply_chat_template(messages[:3], tools=tools, tokenize=False)
    assert text.startswith(shorter)  # prefix-stable: what token-in/token-out relies on
    for special in SPECIAL_TOKENS:
        assert len(tok.encode(special, add_special_tokens=False)) == 1
    assert tok.eos_token == "<|im_end|>"
