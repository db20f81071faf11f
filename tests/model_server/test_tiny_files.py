"""The built tiny model is readable by other users: the image builds it as root and runs as uid 10001
(issue 15: a 0600 model.safetensors kept every model-loading role of the image from starting)."""

from __future__ import annotations

import functools
import stat

from rollgate.model_server.tiny import build_tiny_model, ensure_tiny_model


def _modes(root):
    out = {".": stat.S_IMODE(root.stat().st_mode)}
    for p in root.rglob("*"):
        out[str(p.relative_to(root))] = stat.S_IMODE(p.stat().st_mode)
    return out


def test_built_model_files_are_world_readable(tmp_path):
    out = build_tiny_model(tmp_path / "tiny", seed=1, warmup_steps=1)
    modes = _modes(out)
    assert modes["model.safetensors"] == 0o644
    assert all(m == (0o755 if (out / name).is_dir() else 0o644) for name, m in modes.items()), modes


def test_ensure_tiny_model_publishes_a_readable_directory(tmp_path, monkeypatch):
    import rollgate.model_server.tiny as tiny

    # a 1-step warm-up keeps the build to seconds; the files' modes do not depend on it
    monkeypatch.setattr(tiny, "build_tiny_model", functools.partial(tiny.build_tiny_model, warmup_steps=1))
    target = ensure_tiny_model(tmp_path / "cache" / "tiny-model")
    modes = _modes(target)
    assert modes["."] == 0o755, "the directory ensure_tiny_model renames into place must not stay 0700"
    assert modes["model.safetensors"] == 0o644
