#!/usr/bin/env bash
# OSWorld's own evaluators (PyPI desktop-env 1.0.2) in an isolated venv, the reference side of
# bench/osworld_metric_diff.py and tests/test_osworld_metric_diff.py. Isolated because its pins
# (numpy<2, pandas<2.3, torch~=2.5, transformers~=4.35, gymnasium~=0.28) conflict with guigym's:
# nothing is installed into the current python. Every package is pinned and installed with
# --no-deps from scripts/osworld_reference_requirements.txt (the evaluators' imports, not
# desktop-env's ~70 declared dependencies). Idempotent: a venv whose stamp matches the
# requirements file is left alone (about 1 s); otherwise it is rebuilt (a few minutes, ~600 MB).
#   GUIGYM_DESKTOP_ENV_VENV=DIR   where (default ~/.cache/guigym/venvs/desktop-env)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${GUIGYM_DESKTOP_ENV_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/guigym/venvs/desktop-env}"
REQ="scripts/osworld_reference_requirements.txt"
STAMP="$VENV/.guigym-ready"
WANT="$(sha256sum "$REQ" | cut -d' ' -f1) $("$PY" -c 'import sys; print(sys.version.split()[0])')"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "desktop-env reference venv up to date: $VENV"
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$REQ"
# the metrics package must import (with the runner's stubs for the three libraries left out)
"$VENV/bin/python" bench/_osworld_ref_runner.py --check 2>/dev/null
echo "$WANT" > "$STAMP"
