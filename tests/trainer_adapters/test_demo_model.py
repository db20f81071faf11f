"""The demo's trained checkpoint (recipes.demo_model): a recipe's data, init and SFT phases run
end to end through the real parts (the math environment and its calculator, the agent loop with
the scripted backend for gold demonstrations, the recipe's tiny model, plain-torch SFT), on a
shortened setting, cached and reused. No reward threshold: a few SFT steps say nothing about
learning (the demo recipe's figures are in docs/trainers/recipes.md)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from rollgate.model_server.tiny import TinyShape
from rollgate.resources_servers.families.splits import row_key
from rollgate.trainer_adapters import recipes
from rollgate.trainer_adapters.recipes.config import SFTPhase
from rollgate.trainer_adapters.recipes.demo_model import STAMP, ensure_sft_model, train_rows

SHORT = dataclasses.replace(
    recipes.RECIPES["tiny-math-demo"],
    train_tasks=8,
    shape=TinyShape(),
    sft=SFTPhase(epochs=1.0, batch_size=4, learning_rate=3e-3, warmup_steps=1),
)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[Path, list[str], list[str]]:
    """One shortened build, two of its training rows excluded by content."""
    path = tmp_path_factory.mktemp("demo-model") / "tiny-math-demo-model"
    excluded = [row_key("math", r) for r in train_rows(SHORT, set())[:2]]
    lines: list[str] = []
    out, fresh = ensure_sft_model(SHORT, path, exclude_keys=excluded, progress=lines.append)
    assert out == path and fresh
    return path, excluded, lines


def test_the_short_recipe_builds_a_trained_checkpoint(built):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path, _, lines = built
    model = AutoModelForCausalLM.from_pretrained(path)
    AutoTokenizer.from_pretrained(path)
    assert model.config.hidden_size == TinyShape().hidden_size
    stamp = json.loads((path / STAMP).read_text())
    assert stamp["recipe"] == "tiny-math-demo" and stamp["sft_steps"] == 1
    # The excluded rows never became demonstrations.
    assert stamp["demonstrations"] == 6
    # It said what it was doing: the demonstrations, then SFT with its steps.
    assert any("gold math demonstrations" in line for line in lines)
    assert any("SFT step 1/1" in line for line in lines)
    assert not any(p.name.startswith(".") for p in path.parent.iterdir() if p.is_dir()), "a build directory was left"


def test_the_cached_checkpoint_is_reused(built):
    path, excluded, _ = built
    before = (path / "model.safetensors").stat().st_mtime_ns
    lines: list[str] = []
    out, fresh = ensure_sft_model(SHORT, path, exclude_keys=excluded, progress=lines.append)
    assert out == path and not fresh and lines == []
    assert (path / "model.safetensors").stat().st_mtime_ns == before


def test_grpo_settings_are_not_part_of_the_sft_checkpoint(built):
    """The demo serves the SFT phase's checkpoint: a recipe differing only in GRPO settings (a new
    GRPOPhase field, say) reuses it, one differing in SFT's does not."""
    from rollgate.trainer_adapters.recipes.demo_model import is_current

    path, excluded, _ = built
    grpo = dataclasses.replace(SHORT, grpo=dataclasses.replace(SHORT.grpo, steps=99, norm_learning_rate=1e-2))
    sft = dataclasses.replace(SHORT, sft=dataclasses.replace(SHORT.sft, learning_rate=1e-3))
    assert is_current(path, SHORT, excluded) and is_current(path, grpo, excluded)
    assert not is_current(path, sft, excluded)
    # a stamp written with the GRPO settings (as the shipped one was) reads the same
    stamp = json.loads((path / STAMP).read_text())
    assert "grpo" not in stamp["config"]
    (path / STAMP).write_text(json.dumps(stamp | {"config": stamp["config"] | {"grpo": SHORT.grpo.__dict__}}))
    try:
        assert is_current(path, SHORT, excluded)
    finally:
        (path / STAMP).write_text(json.dumps(stamp))


def test_other_settings_or_exclusions_rebuild(built, tmp_path):
    path, excluded, _ = built
    copy = tmp_path / path.name
    import shutil

    shutil.copytree(path, copy)
    _, fresh = ensure_sft_model(SHORT, copy, exclude_keys=excluded[:1])
    assert fresh
    assert json.loads((copy / STAMP).read_text())["demonstrations"] == 7


def test_excluding_every_row_is_refused(tmp_path):
    from rollgate.core.errors import BadRequest

    every = {row_key("math", r) for r in train_rows(SHORT, set())}
    with pytest.raises(BadRequest, match="every training task is excluded"):
        ensure_sft_model(SHORT, tmp_path / "m", exclude_keys=every)
    assert not (tmp_path / "m").exists()


# The first train-split rows of the generator are the shipped examples/math.jsonl rows, which the
# demo shows: 20 rows leave a few demonstrations once those are excluded.
DEMO_SHORT = dataclasses.replace(SHORT, train_tasks=20)


@pytest.fixture
def demo_home(tmp_path, monkeypatch) -> Path:
    """A fresh Rollgate home and the shortened demo recipe: `rollgate demo` builds into it."""
    monkeypatch.setenv("ROLLGATE_HOME", str(tmp_path))
    monkeypatch.setitem(recipes.RECIPES, "tiny-math-demo", DEMO_SHORT)
    return tmp_path


def run_demo(capsys, *flags: str) -> tuple[str, str]:
    from rollgate.cli import main

    assert main(["demo", "--envs", "math", "--tasks-per-env", "2", "--no-progress", *flags]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_the_demo_serves_the_trained_checkpoint_built_once(demo_home, capsys):
    out, err = run_demo(capsys)  # trained is the default
    model = demo_home / "tiny-math-demo-model"
    assert "tiny-math-demo recipe's SFT checkpoint" in err and "SFT step 1/1" in err and "built and cached" in err
    # The example rows the demo shows were kept out of training: the demonstrations are the train
    # rows less those.
    examples = Path(__file__).resolve().parents[2] / "examples" / "math.jsonl"
    shown = {row_key("math", json.loads(line)) for line in examples.read_text().splitlines() if line.strip()}
    overlap = sum(row_key("math", r) in shown for r in train_rows(DEMO_SHORT, set()))
    assert overlap > 0
    assert json.loads((model / STAMP).read_text())["demonstrations"] == 20 - overlap
    assert "math" in out and "2 rollouts" in out
    before = (model / "model.safetensors").stat().st_mtime_ns

    # A second demo reuses the cached checkpoint: nothing is built again.
    out, err = run_demo(capsys, "--trained")
    assert "SFT step" not in err and "built and cached" not in err and "math" in out
    assert (model / "model.safetensors").stat().st_mtime_ns == before


def test_untrained_serves_the_tiny_model_and_builds_nothing(demo_home, capsys):
    out, err = run_demo(capsys, "--untrained")
    assert "SFT" not in err and "math" in out
    assert not (demo_home / "tiny-math-demo-model").exists()


def test_the_shipped_demo_policy_is_current():
    """The checkpoint Rollgate ships is the demo recipe's, built without the demo's example rows:
    stale (a changed recipe, tiny model build or example rows) means a first demo trains for
    minutes. Rebuild it with `python scripts/build_demo_policy.py`."""
    from rollgate.commands.demo import DEMO_RECIPE, demo_exclusions, examples_dir
    from rollgate.trainer_adapters.recipes.demo_model import SHIPPED, is_current

    src = examples_dir(None)
    assert src is not None
    assert is_current(SHIPPED, recipes.get_recipe(DEMO_RECIPE), demo_exclusions(src)), (
        f"{SHIPPED} is stale: run python scripts/build_demo_policy.py"
    )
    stamp = json.loads((SHIPPED / STAMP).read_text())
    assert stamp["sft_steps"] >= 1000 and (SHIPPED / "model.safetensors").stat().st_size < 2_000_000


def test_a_first_demo_serves_the_shipped_policy_and_trains_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("ROLLGATE_HOME", str(tmp_path))
    out, err = run_demo(capsys)
    assert "shipped with Rollgate" in err and "SFT step" not in err and "gold math demonstrations" not in err
    assert not (tmp_path / "tiny-math-demo-model").exists()
    assert "math" in out and "2 rollouts" in out


def test_rebuild_trains_here_instead_of_serving_the_shipped_policy(demo_home, capsys, monkeypatch, tmp_path):
    from rollgate.trainer_adapters.recipes import demo_model

    run_demo(capsys)  # the shortened recipe: the real shipped checkpoint is not current for it: built here
    shipped = tmp_path / "shipped"
    import shutil

    shutil.copytree(demo_home / "tiny-math-demo-model", shipped)
    monkeypatch.setattr(demo_model, "SHIPPED", shipped)
    _, err = run_demo(capsys)
    assert f"model: {shipped}" in err and "shipped with Rollgate" in err
    _, err = run_demo(capsys, "--rebuild")
    assert f"model: {demo_home / 'tiny-math-demo-model'}" in err and "SFT step" not in err  # the cached build
