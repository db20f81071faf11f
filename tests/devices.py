"""Which device the model-server tests put the local backend on: the CPU by default (CI has no
GPU); `ROLLGATE_TEST_DEVICE=cuda` runs the same tests on a CUDA GPU."""

from __future__ import annotations

import os

TEST_DEVICE = os.environ.get("ROLLGATE_TEST_DEVICE", "cpu")
