"""reward_curve.png: held-out reward against training step, the SFT phase shaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def plot_curve(points: list[dict[str, Any]], sft_steps: int, path: Path, *, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # files only: no display here, and none needed
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.2), dpi=120)
    ax.axvspan(0, max(sft_steps, 0.5), color="tab:blue", alpha=0.08, label="SFT (gold demonstrations)")
    if any(p["phase"] == "rl" for p in points):
        last = max(p["step"] for p in points)
        ax.axvspan(
            sft_steps, max(last, sft_steps + 0.5), color="tab:orange", alpha=0.08, label="GRPO (verified reward)"
        )
    xs = [p["step"] for p in points]
    ys = [p["reward"] for p in points]
    lo = [p["reward"] - p["ci"][0] if p.get("ci") else 0.0 for p in points]
    hi = [p["ci"][1] - p["reward"] if p.get("ci") else 0.0 for p in points]
    ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", color="black", capsize=3, lw=1.5, label="held-out mean reward")
    ax.axvline(sft_steps, color="gray", ls="--", lw=1)
    ax.set_xlabel("training step (SFT steps, then GRPO steps)")
    ax.set_ylabel("held-out mean verified reward")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
