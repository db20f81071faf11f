#!/usr/bin/env bash
# Install NeMo Gym 0.7.0 into its own virtual environment, for the slow `nemo_gym` test tier
# (tests/interop/test_nemo_gym_real.py) and for running its resources servers beside Rollgate.
# Usage: scripts/install-nemo-gym.sh [VENV_DIR]   (default: .venv-nemo-gym)
# nemo-gym 0.7.0 declares Python >= 3.13.14; its resources servers run on pyenv's 3.13.0 when pip
# is told to ignore that pin. Then run the tier with:
#   .venv/bin/pytest -m nemo_gym tests/interop/test_nemo_gym_real.py
set -euo pipefail
VENV="${1:-.venv-nemo-gym}"
if [ -z "${PYTHON:-}" ]; then
  if command -v pyenv >/dev/null 2>&1; then
    PYTHON="$(pyenv root)/versions/3.13.0/bin/python"
  else  # pyenv installed but not on this PATH (e.g. a CI shell)
    PYTHON="${PYENV_ROOT:-$HOME/.pyenv}/versions/3.13.0/bin/python"
  fi
fi
if [ ! -x "$PYTHON" ]; then
  echo "install-nemo-gym: $PYTHON is missing; run 'pyenv install 3.13.0' or set PYTHON=/path/to/python3.13" >&2
  exit 1
fi
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
fi
"$VENV/bin/pip" install --ignore-requires-python "nemo-gym==0.7.0"
"$VENV/bin/python" -c "import nemo_gym, sys; print('nemo-gym installed in $VENV, Python', sys.version.split()[0])"
