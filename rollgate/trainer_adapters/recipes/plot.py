"""reward_curve.png: held-out reward against training step. Two panels sharing the reward axis,
the SFT phase (shaded) and the GRPO phase, because SFT takes tens of times more steps than GRPO
and one step axis would squeeze the GRPO part into a sliver. GRPO's panel starts at the SFT
checkpoint's point, so the two curves join. With the greedy references (eval.greedy_reference),
GRPO's panel also shows the post-SFT checkpoint decoded greedily (a dashed line: about what
sharpening the sampled policy can reach) and the final one (a cross at the last step)."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def _errors(points: list[dict[str, Any]]) -> list[list[float]]:
    lo = [p["reward"] - p["ci"][0] if p.get("ci") else 0.0 for p in points]
    hi = [p["ci"][1] - p["reward"] if p.get("ci") else 0.0 for p in points]
    return [lo, hi]


def plot_curve(
    points: list[dict[str, Any]],
    sft_steps: int,
    path: Path,
    *,
    title: str,
    greedy: dict[str, float] | None = None,
) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display here, and none needed
    import matplotlib.pyplot as plt

    sft = [p for p in points if p["phase"] in ("before", "sft")]
    rl = ([sft[-1]] if sft else []) + [p for p in points if p["phase"] == "rl"]
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(9, 4.2), dpi=120, sharey=True, gridspec_kw={"width_ratios": [3, 2], "wspace": 0.05}
    )
    left.axvspan(0, max(sft_steps, 1), color="tab:blue", alpha=0.08, label="SFT on gold demonstrations")
    left.errorbar(
        [p["step"] for p in sft],
        [p["reward"] for p in sft],
        yerr=_errors(sft),
        marker="o",
        color="tab:blue",
        capsize=3,
        label="held-out mean reward (95% CI)",
    )
    left.set_xlabel("SFT step")
    left.set_ylabel("held-out mean verified reward")
    left.legend(loc="upper left", fontsize=8)
    right.errorbar(
        [p["step"] - sft_steps for p in rl],
        [p["reward"] for p in rl],
        yerr=_errors(rl),
        marker="o",
        color="tab:orange",
        capsize=3,
        label="GRPO, verified reward only",
    )
    greedy = greedy or {}
    if "sft" in greedy:
        right.axhline(greedy["sft"], color="tab:gray", linestyle="--", linewidth=1, label="SFT checkpoint, greedy")
    if "rl" in greedy and rl:
        right.plot(
            [rl[-1]["step"] - sft_steps], [greedy["rl"]], "x", color="tab:red", markersize=8, label="final, greedy"
        )
    right.set_xlabel("GRPO step (after SFT)")
    right.legend(loc="upper left", fontsize=8)
    for ax in (left, right):
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.13, top=0.9)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
