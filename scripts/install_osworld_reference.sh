#!/usr/bin/env bash
# OSWorld's own evaluators (PyPI desktop-env 1.0.2) in an isolated venv, the reference side of
# bench/osworld_metric_diff.py and tests/test_osworld_metric_diff.py. Isolated because its pins
# (numpy<2, pandas<2.3, torch~=2.5, transformers~=4.35, gymnasium~=0.28) conflict with guigym's:
# nothing is installed into the current python. Every package is pinned and installed with
# --no-deps from scripts/osworld_reference_requirements.txt (the evaluators' imports, not
# desktop-env's ~70 declared dependencies). Idempotent: a venv whose stamp matches the
# requirements file is left alone (about 1 s); otherwise it is rebuilt (a few minutes, ~600 MB).
# Then the DesktopEnv loop's extras (scripts/osworld_desktopenv_requirements.txt, ~45 MB, mostly
# playwright's driver) for guigym.compat.osworld, under their own stamp.
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
else
  rm -rf "$VENV"
  mkdir -p "$(dirname "$VENV")"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$REQ"
  # the metrics package must import (with the runner's stubs for the three libraries left out)
  "$VENV/bin/python" bench/_osworld_ref_runner.py --check 2>/dev/null
  echo "$WANT" > "$STAMP"
fi
# OSWorld's DesktopEnv loop on guigym's local desktop (guigym.compat.osworld): what
# desktop_env.desktop_env imports on top of the evaluators, in the same venv, its own stamp
LOOP_REQ="scripts/osworld_desktopenv_requirements.txt"
LOOP_STAMP="$VENV/.guigym-desktopenv-ready"
LOOP_WANT="$(sha256sum "$LOOP_REQ" | cut -d' ' -f1) $WANT"
if [ -f "$LOOP_STAMP" ] && [ "$(cat "$LOOP_STAMP")" = "$LOOP_WANT" ]; then
  echo "desktop-env DesktopEnv loop extras up to date: $VENV"
  exit 0
fi
rm -f "$LOOP_STAMP"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$LOOP_REQ"
# DesktopEnv must import with guigym's provider registered (its stubs in place); PYTHONPATH: this checkout
if ! PYTHONPATH="$PWD" "$VENV/bin/python" -c 'from guigym.compat.osworld import register; register()' \
    >/dev/null 2>"$VENV/.desktopenv-check.log"; then
  cat "$VENV/.desktopenv-check.log" >&2
  exit 1
fi
echo "$LOOP_WANT" > "$LOOP_STAMP"
