"""`rollgate train --mode async`: the shortened tiny-math recipe (tests/trainer_adapters/
test_train_recipe.py's) with asynchronous GRPO writes its files, and metrics.json says how the
GRPO phase ran: its mode, the wall time of each step and what the staleness bound dropped. No
timing or reward threshold is asserted."""

from __future__ import annotations

import json

import pytest

from rollgate.cli import main
from rollgate.trainer_adapters import recipes
from tests.trainer_adapters.test_train_recipe import SHORT


@pytest.fixture
def short_recipe(monkeypatch):
    monkeypatch.setitem(recipes.RECIPES, "tiny-math", SHORT)
    return SHORT


def test_a_shortened_async_recipe_writes_its_files_and_counts_staleness(short_recipe, tmp_path, capsys):
    out = tmp_path / "async"
    argv = ["train", "--recipe", "tiny-math", "--out", str(out), "--mode", "async", "--max-staleness", "1"]
    assert main(argv) == 0
    m = json.loads((out / "metrics.json").read_text())
    for key in ("recipe", "heldout_tasks", "reward_before", "reward_after_sft", "reward_after_rl", "steps", "seconds"):
        assert key in m, key
    assert (out / "reward_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (out / "model" / "config.json").exists()
    assert m["rl_mode"] == "async" and m["rl_max_staleness"] == 1 and m["config"]["grpo"]["mode"] == "async"
    assert len(m["rl_step_seconds"]) == m["rl_steps"] == 2 and m["rl_seconds_per_step"] > 0
    stats = m["rl_async"]
    assert stats["batches_inline"] + stats["batches_prefetched"] == 2 and stats["prefetch_misses"] == 0
    assert m["rl_stale_dropped"] == stats["dropped_stale"] == 0  # weights were pushed every step
    assert set(stats["staleness_histogram"]) <= {"0", "1"}
    assert "GRPO async" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--max-staleness", "2"], "--mode async only"),
        (["--mode", "async", "--max-staleness", "0"], "must be >= 1"),
    ],
)
def test_a_staleness_bound_without_async_or_below_one_is_refused(short_recipe, tmp_path, capsys, flags, says):
    out = tmp_path / "x"
    assert main(["train", "--recipe", "tiny-math", "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err
    assert "--max-staleness" in err and says in err
    assert not out.exists()
