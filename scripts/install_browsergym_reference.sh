#!/usr/bin/env bash
# BrowserGym's own env (PyPI browsergym-core 0.14.3) in an isolated venv: the BrowserGym side of
# guigym.compat.browsergym (tests/test_browsergym_compat.py, docs/coming_from_browsergym.md) and the
# BrowserGym rows of bench/web_step.py. Isolated because browsergym-core pins playwright==1.44 and
# lxml<6 while guigym uses playwright>=1.45 and lxml 6: nothing is installed into the current python.
# Every package is pinned and installed with --no-deps from scripts/browsergym_reference_requirements.txt
# (what pip resolves for browsergym-core, plus the few libraries guigym's task side imports there);
# guigym itself is not installed in it (the checkout goes on PYTHONPATH), and the embedded sites run
# in guigym's own python. Playwright 1.44's browser paths are symlinked to the system Chromium (no
# browser download). Idempotent: a venv whose stamp matches is left alone (about 1 s); otherwise it is
# rebuilt (about a minute, ~250 MB).
#   GUIGYM_BROWSERGYM_VENV=DIR        where (default ~/.cache/guigym/venvs/browsergym)
#   GUIGYM_BROWSERGYM_CHROMIUM=PATH   the Chromium Playwright 1.44 launches (default: Debian's headless shell)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV="${GUIGYM_BROWSERGYM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/guigym/venvs/browsergym}"
REQ="scripts/browsergym_reference_requirements.txt"
if [ -z "${GUIGYM_BROWSERGYM_CHROMIUM:-}" ]; then
  GUIGYM_BROWSERGYM_CHROMIUM=/usr/bin/chromium
  [ -x /usr/lib/chromium/chromium-headless-shell ] && GUIGYM_BROWSERGYM_CHROMIUM=/usr/lib/chromium/chromium-headless-shell
fi
STAMP="$VENV/.guigym-ready"
WANT="$(sha256sum "$REQ" | cut -d' ' -f1) $("$PY" -c 'import sys; print(sys.version.split()[0])') $GUIGYM_BROWSERGYM_CHROMIUM"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ]; then
  echo "BrowserGym venv up to date: $VENV"
  exit 0
fi
rm -rf "$VENV"
mkdir -p "$(dirname "$VENV")"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-deps -r "$REQ"
# Playwright's expected browser paths (inside the venv only) -> the system Chromium, as bench/web_step.py does
PLAYWRIGHT_BROWSERS_PATH="$VENV/ms-playwright" "$VENV/bin/python" bench/web_step.py --worker probe-playwright \
  --chromium "$GUIGYM_BROWSERGYM_CHROMIUM" >/dev/null
# guigym's tasks must register with BrowserGym there (PYTHONPATH: this checkout)
if ! PYTHONPATH="$PWD" "$VENV/bin/python" -c 'import guigym.compat.browsergym as b; assert b.REGISTERED' \
    >/dev/null 2>"$VENV/.register-check.log"; then
  cat "$VENV/.register-check.log" >&2
  exit 1
fi
echo "$WANT" > "$STAMP"
echo "BrowserGym venv ready: $VENV"
