"""Rebuild the demo policy Rollgate ships (rollgate/trainer_adapters/recipes/demo_policy/): the
`tiny-math-demo` recipe's SFT checkpoint, with the demo's example rows (examples/math.jsonl) kept
out of its training data, exactly as `rollgate demo --rebuild` builds it. Run it when the recipe,
the tiny model's build or those rows change: tests/trainer_adapters/test_demo_model.py fails while
the shipped checkpoint is stale. About 4 minutes on 2 cores.

    python scripts/build_demo_policy.py
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

from rollgate.commands.demo import DEMO_RECIPE, demo_exclusions, examples_dir
from rollgate.trainer_adapters.recipes import get_recipe
from rollgate.trainer_adapters.recipes.demo_model import SHIPPED, build_sft_model, is_current


def main() -> int:
    cfg = get_recipe(DEMO_RECIPE)
    src = examples_dir(None)
    if src is None:
        print("no examples/ directory: run this from a source checkout", file=sys.stderr)
        return 2
    exclude = demo_exclusions(src)
    with tempfile.TemporaryDirectory() as tmp:
        out = build_sft_model(cfg, Path(tmp) / "policy", exclude_keys=exclude, progress=print)
        if not is_current(out, cfg, exclude):
            print("the build does not carry the expected stamp", file=sys.stderr)
            return 1
        shutil.rmtree(SHIPPED, ignore_errors=True)
        shutil.copytree(out, SHIPPED)
    print(f"wrote {SHIPPED}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
