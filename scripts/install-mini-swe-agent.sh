#!/usr/bin/env bash
# Install mini-swe-agent 2.4.6 into its own virtual environment (about 700 MB with litellm), for
# the `mini_swe_agent` agent (docs/agents.md) and its slow test (tests/agent/test_harness_mini_swe.py).
# Usage: scripts/install-mini-swe-agent.sh [VENV_DIR]   (default: .venv-mini)
# `mcp` goes beside it: litellm imports it when tools are sent (without it, mini retries and hangs).
# Then point the agent's `mini` option at VENV_DIR/bin/mini, or run the test with:
#   ROLLGATE_TEST_MINI=VENV_DIR/bin/mini .venv/bin/pytest -m slow tests/agent/test_harness_mini_swe.py
set -euo pipefail
VENV="${1:-.venv-mini}"
PYTHON="${PYTHON:-python3}"
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install -q "mini-swe-agent==2.4.6" mcp
"$VENV/bin/mini" --help >/dev/null
echo "mini-swe-agent installed: $VENV/bin/mini"
