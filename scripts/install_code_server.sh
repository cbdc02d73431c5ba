#!/usr/bin/env bash
# VS Code for guigym's local desktop (issue 17): code-server (VS Code in a browser, from npm),
# which guigym/envs/desktop/sandbox_bin/code launches as `code` with desktop VS Code's paths.
# Usage: bash scripts/install_code_server.sh [PREFIX]   (default /opt/guigym/code-server; run as
# root or with sudo). Idempotent: nothing is done when the pinned version is already in PREFIX.
# Measured here: 85 s, ~300 MB in PREFIX (+~100 MB npm cache); needs node >= 20 (Debian 12's
# nodejs is 18: then install node 20 first).
set -euo pipefail
PREFIX=${1:-${GUIGYM_CODE_SERVER_PREFIX:-/opt/guigym/code-server}}
VERSION=4.100.3   # = VS Code 1.100.3: the last code-server whose engines accept node 20 (Debian's)
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
MARK="$PREFIX/.guigym-code-server"   # written last: an interrupted install is redone
if [ "$(cat "$MARK" 2>/dev/null)" = "$VERSION" ]; then
  echo "code-server $VERSION already in $PREFIX"; exit 0
fi
# build-essential/python3: its native addons (argon2, kerberos, node-pty) compile here because
# their prebuilt binaries come from github.com; libkrb5-dev: kerberos' headers; ripgrep: the seed below
missing=""
PKGS="build-essential python3 libkrb5-dev ripgrep"
command -v npm >/dev/null || PKGS="$PKGS nodejs npm"   # an npm from elsewhere is used as it is
for p in $PKGS; do dpkg -s "$p" >/dev/null 2>&1 || missing="$missing $p"; done
if [ -n "$missing" ]; then
  $SUDO apt-get update -qq
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing >/dev/null
fi
T=$(mktemp -d); trap 'rm -rf "$T"' EXIT
# @vscode/ripgrep's postinstall downloads rg from api.github.com; its cache is seeded with Debian's
# rg (the same 13.0.0) so the install works without github.com
mkdir -p "$T/vscode-ripgrep-cache-1.15.11" "$T/seed"; cp "$(command -v rg)" "$T/seed/rg"
tar czf "$T/vscode-ripgrep-cache-1.15.11/ripgrep-v13.0.0-10-x86_64-unknown-linux-musl.tar.gz" -C "$T/seed" rg
$SUDO mkdir -p "$PREFIX"
# unsafe_perm: code-server's postinstall refuses to run as root without it; yes: node-pty's
# postinstall runs `npx node-gyp`, which would otherwise wait at a prompt
$SUDO env TMPDIR="$T" npm_config_unsafe_perm=true npm_config_yes=true \
  npm install --prefix "$PREFIX" --no-audit --no-fund --foreground-scripts "code-server@$VERSION" >"$T/npm.log" 2>&1 \
  || { tail -40 "$T/npm.log" >&2; exit 1; }
# the desktop's unprivileged agent user must be able to read and run it
$SUDO chmod -R a+rX "$PREFIX"
"$PREFIX/node_modules/.bin/code-server" --version | head -1
echo "$VERSION" | $SUDO tee "$MARK" >/dev/null
