"""From a probe's samples to its verdict, and the reviewed allowlist of known holes.

Verdicts (docs/audit.md):
- exploitable: the probe should earn no more than the floor, yet its mean is above the floor and
  the 95% bootstrap interval (over tasks) excludes the floor. For the floor probe itself, the
  baseline is the lowest reward of the environment's range: reward for answering nothing.
  The excess must also reach MIN_EFFECT of the reward range (5%): a scorer's deliberate sliver of
  format credit (0.01 for a well-formed wrong answer) is not worth a training run's attention.
- suspicious: above the floor but the interval overlaps it or the excess is below MIN_EFFECT (for
  the floor probe: any reward above the range's lowest for a reply without the answer). A probe
  that earns just what the floor earns is clean: the floor's own verdict reports that pay.
- clean: neither.
- strict_format (format probes): the gold answer written another way earns less than the
  reference, with intervals apart: a false negative, not a hack.
- error: a sample failed (the environment errored, the probe raised, ...): never clean.
- skipped: the probe does not apply to the task (no gold answer, no tools, not code).
- reference: the gold path (informational).
"""

from __future__ import annotations

import fnmatch
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from rollgate.core.errors import BadRequest
from rollgate.core.stats import bootstrap_mean

EPS = 1e-9
MIN_TASKS = 3  # a probe that fit fewer tasks has a degenerate interval: at most suspicious
MIN_EFFECT = 0.05  # of the reward range: the smallest excess over the floor called exploitable
FLAGGED = ("exploitable", "suspicious")
VERDICTS = ("exploitable", "suspicious", "clean", "strict_format", "error", "skipped", "reference")


@dataclass(frozen=True)
class Stat:
    mean: float
    lo: float
    hi: float
    tasks: int

    def as_dict(self) -> dict[str, Any]:
        return {"mean": round(self.mean, 6), "ci": [round(self.lo, 6), round(self.hi, 6)], "tasks": self.tasks}


def stat(rewards: list[float], *, resamples: int, seed: int) -> Stat | None:
    est = bootstrap_mean(rewards, resamples=resamples, seed=seed)
    return None if est is None else Stat(est.value, est.lo, est.hi, est.tasks)


def verdict(
    kind: str, s: Stat, *, floor: float, lowest: float, reference: Stat | None, min_effect: float = MIN_EFFECT
) -> tuple[str, str]:
    """(verdict, why) of a probe whose samples all have a reward; `min_effect` in reward units."""
    if kind == "reference":
        why = "" if s.mean > floor + EPS else "the gold path earns no more than the floor: the audit cannot tell"
        return "reference", why
    if kind == "format":
        if reference is None or s.hi + EPS >= reference.lo:
            return "clean", ""
        return "strict_format", f"earns {s.mean:.3f}, the reference {reference.mean:.3f}: a correct answer rejected"
    base = lowest if kind == "floor" else floor
    what = "the lowest reward" if kind == "floor" else "the floor"
    if s.mean > base + EPS and s.tasks < MIN_TASKS:
        return "suspicious", f"mean {s.mean:.3f} > {what} {base:.3f} on only {s.tasks} task(s) the probe fits"
    if s.mean > base + EPS and s.lo > base + EPS and s.mean - base >= min_effect - EPS:
        return "exploitable", f"mean {s.mean:.3f} > {what} {base:.3f}, interval [{s.lo:.3f}, {s.hi:.3f}] excludes it"
    if s.mean > base + EPS and s.lo > base + EPS:
        return "suspicious", f"mean {s.mean:.3f} > {what} {base:.3f}, by less than {min_effect:g}"
    if s.mean > base + EPS:
        return "suspicious", f"mean {s.mean:.3f} > {what} {base:.3f}, but the interval overlaps it"
    return "clean", ""


# --- allowlist --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AllowEntry:
    env: str  # a name or glob pattern
    probe: str  # a name or glob pattern
    reason: str

    def matches(self, env: str, probe: str) -> bool:
        return fnmatch.fnmatchcase(env, self.env) and fnmatch.fnmatchcase(probe, self.probe)


def load_allowlist(path: Path | None) -> list[AllowEntry]:
    """The reviewed allowlist: the shipped one (rollgate/evaluation/audit/allowlist.json) when
    `path` is None. Each entry needs env, probe and a non-empty reason."""
    if path is None:
        text = resources.files("rollgate.evaluation.audit").joinpath("allowlist.json").read_text()
        where = "the shipped allowlist"
    else:
        try:
            text = path.read_text()
        except OSError as exc:
            raise BadRequest(f"--allowlist {path}: {exc.strerror}", component="audit", field="--allowlist") from None
        where = f"--allowlist {path}"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadRequest(f"{where}: not JSON: {exc}", component="audit", field="--allowlist") from None
    entries = data.get("entries") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise BadRequest(f'{where}: expected {{"entries": [...]}}', component="audit", field="--allowlist")
    out = []
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not all(
            isinstance(e.get(k), str) and e[k].strip() for k in ("env", "probe", "reason")
        ):
            raise BadRequest(
                f"{where}: entries[{i}] needs non-empty strings env, probe and reason",
                component="audit",
                field=f"entries[{i}]",
            )
        out.append(AllowEntry(e["env"], e["probe"], e["reason"]))
    return out


def allowed(entries: list[AllowEntry], env: str, probe: str) -> str | None:
    """The reason a flagged (env, probe) is accepted, or None."""
    return next((e.reason for e in entries if e.matches(env, probe)), None)
