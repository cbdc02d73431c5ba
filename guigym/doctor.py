"""``guigym doctor``: what this machine has for each env and the trainer, with the install hint for
what it lacks.

    guigym doctor                        # every check; exit 1 only if MiniWoB-v0 (the default) cannot run
    guigym doctor --env OSWorld-v0       # exit 1 if anything OSWorld-v0 needs is missing
    guigym doctor --env WebArena-v0 --env train --json report.json

Each :class:`Check` probes one thing (a program, a Python module, a kernel feature, a server) and
reports ``ok`` / ``missing`` with a detail (version, path, why) and the exact hint to fix it.
:data:`NEEDS` says which checks each target requires (a miss fails the exit status) and which are
optional for it (a miss is shown as ``warn``: some tasks or providers need it, not all). Probes
run nothing an agent controls and start no server; the slowest (user namespaces, a database
connection) are bounded by timeouts.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

APT = "apt-get install -y --no-install-recommends"


@dataclass(frozen=True)
class Result:
    """One check's outcome: ``status`` is ok, missing or warn (missing but optional for the targets)."""

    name: str
    status: str
    detail: str
    hint: str


@dataclass(frozen=True)
class Check:
    name: str
    probe: Callable[[], tuple[bool, str]]
    hint: str


def _run(cmd: Sequence[str], timeout: float = 10.0) -> tuple[int, str]:
    try:
        p = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return 127, str(e)
    return p.returncode, (p.stdout or p.stderr).strip().splitlines()[0] if (p.stdout or p.stderr).strip() else ""


def program(*names: str, version_arg: Optional[str] = "--version") -> Callable[[], tuple[bool, str]]:
    """The first of ``names`` on PATH, with its version line."""
    def probe() -> tuple[bool, str]:
        for n in names:
            path = shutil.which(n)
            if path:
                if version_arg is None:
                    return True, path
                _, out = _run([path, version_arg])
                return True, f"{path} {out}".strip()
        return False, f"none of {', '.join(names)} on PATH"
    return probe


def module(name: str, attr: str = "__version__") -> Callable[[], tuple[bool, str]]:
    def probe() -> tuple[bool, str]:
        if importlib.util.find_spec(name) is None:
            return False, f"python module {name} not importable"
        try:
            mod = __import__(name)
        except Exception as e:  # noqa: BLE001 - a broken install is a finding, not a crash
            return False, f"import {name} failed: {type(e).__name__}: {e}"[:200]
        version = getattr(mod, attr, None)
        if not isinstance(version, str) or version == name:
            try:
                version = importlib.metadata.version(name)
            except importlib.metadata.PackageNotFoundError:
                version = "installed"
        return True, f"{name} {version}"
    return probe


def chromium() -> tuple[bool, str]:
    from guigym.envs.web.browser import SYSTEM_CHROMIUM

    env = os.environ.get("GUIGYM_CHROMIUM")
    for path in ([env] if env else []) + list(SYSTEM_CHROMIUM):
        if path and os.path.exists(path):
            _, out = _run([path, "--version"])
            return True, f"{path} {out}".strip()
    cache = Path(os.environ.get("PLAYWRIGHT_BROWSERS_PATH", Path.home() / ".cache" / "ms-playwright"))
    own = sorted(cache.glob("chromium*/chrome-linux*/chrome")) if cache.exists() else []
    return (True, f"Playwright's own {own[-1]}") if own else (False, "no system Chromium and no Playwright browser")


def user_namespaces() -> tuple[bool, str]:
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return False, "bwrap not on PATH"
    code, out = _run([bwrap, "--unshare-user", "--unshare-pid", "--ro-bind", "/", "/", "--proc", "/proc",
                      "--dev", "/dev", "true"], timeout=15)
    return (True, "bwrap --unshare-user works") if code == 0 else (False, f"bwrap --unshare-user failed: {out[:160]}")


def desktop_bounds() -> tuple[bool, str]:
    """How the local desktop bounds its agent zone here (issue 35): cgroups or rlimits."""
    from guigym.envs.desktop.providers.bounds import enforcement_here

    full, how = enforcement_here()
    return full, "; ".join(f"{k}: {v}" for k, v in how.items())


def pyatspi_system() -> tuple[bool, str]:
    # the in-desktop server runs under Debian's /usr/bin/python3 with python3-pyatspi
    py = "/usr/bin/python3"
    if not os.path.exists(py):
        return False, "/usr/bin/python3 missing"
    code, out = _run([py, "-c", "import pyatspi, gi; print('pyatspi', gi.__version__)"], timeout=20)
    return (code == 0, out[:160] if out else "import pyatspi failed")


def kvm() -> tuple[bool, str]:
    if not os.path.exists("/dev/kvm"):
        return False, "/dev/kvm absent (no hardware virtualisation exposed)"
    return (True, "/dev/kvm read/write") if os.access("/dev/kvm", os.R_OK | os.W_OK) else \
        (False, "/dev/kvm exists but is not read/writable by this user (add it to group kvm)")


def docker_engine() -> tuple[bool, str]:
    sock = "/var/run/docker.sock"
    if not os.path.exists(sock):
        return False, f"{sock} absent: no Docker engine"
    try:
        import docker  # type: ignore[import-not-found]

        v = docker.DockerClient(base_url=f"unix://{sock}", timeout=5).version()
        return True, f"Docker {v.get('Version', '?')}"
    except Exception as e:  # noqa: BLE001
        return False, f"{sock} does not answer: {type(e).__name__}: {e}"[:200]


def adb_devices() -> tuple[bool, str]:
    adb = shutil.which("adb")
    if adb is None and importlib.util.find_spec("adbutils") is not None:
        try:
            import adbutils

            adb = adbutils.adb_path()
        except Exception:  # noqa: BLE001
            adb = None
    if adb is None:
        return False, "no adb (Debian package 'adb' or pip install adbutils)"
    code, out = _run([adb, "devices"], timeout=15)
    if code != 0:
        return False, f"{adb} devices failed: {out[:160]}"
    p = subprocess.run([adb, "devices"], capture_output=True, text=True, timeout=15)
    devs = [ln.split()[0] for ln in p.stdout.splitlines()[1:] if ln.strip().endswith("device")]
    return (True, f"{adb}; devices: {', '.join(devs)}") if devs else (False, f"{adb} works but no device is attached")


def torch_info() -> tuple[bool, str]:
    ok, detail = module("torch")()
    if not ok:
        return ok, detail
    import torch

    cuda = f"CUDA {torch.version.cuda}, {torch.cuda.device_count()} GPU(s)" if torch.cuda.is_available() else "CPU only"
    return True, f"torch {torch.__version__}, {cuda}"


def postgres() -> tuple[bool, str]:
    url = os.environ.get("GUIGYM_PG_URL") or os.environ.get("GUIGYM_TEST_PG_URL")
    if not url:
        return False, "no GUIGYM_PG_URL set (SQLite is the default DataStore; PostgreSQL is for multi-node runs)"
    try:
        import sqlalchemy as sa

        with sa.create_engine(url, connect_args={"connect_timeout": 5}).connect() as c:
            return True, str(c.execute(sa.text("select version()")).scalar())[:80]
    except Exception as e:  # noqa: BLE001
        return False, f"cannot connect to GUIGYM_PG_URL: {type(e).__name__}: {e}"[:200]


def embedded_sites() -> tuple[bool, str]:
    from guigym.envs.web.webarena.sites import EMBEDDED, available

    can = available()
    lacking = {n: s.missing() for n, s in EMBEDDED.items() if n not in can}
    detail = f"runnable: {', '.join(can) or 'none'}" + "".join(f"; {n} lacks {', '.join(m)}" for n, m in lacking.items())
    return bool(can), detail


def vscode() -> tuple[bool, str]:
    """The local desktop's ``code``: the sandbox wrapper, usable when code-server is installed."""
    from guigym.envs.desktop.vscode import CODE_SERVER_VERSION, DEFAULT_PREFIX, code_server_bin, find_code_server

    wrapper = Path(__file__).parent / "envs" / "desktop" / "sandbox_bin" / "code"
    prefix = find_code_server()
    if prefix is None:
        return False, (f"no code-server at {os.environ.get('GUIGYM_CODE_SERVER_PREFIX') or DEFAULT_PREFIX}"
                       f" (needs node on PATH); the desktop has no `code`")
    _, out = _run([str(code_server_bin(prefix)), "--version"], timeout=20)
    version = out.split()[0] if out.split() else "?"
    note = "" if version == CODE_SERVER_VERSION else f" (scripts/install_code_server.sh pins {CODE_SERVER_VERSION})"
    return wrapper.is_file(), f"code-server {version} in {prefix}{note}; `code` = {wrapper}"


def _app(cmd: str, pkg: str) -> Check:
    return Check(f"app: {cmd}", program(cmd, version_arg=None),
                 f"{APT} {pkg} (or all of OSWorld's apps: GUIGYM_OSWORLD_APPS=1 bash scripts/install.sh)")


CHECKS: dict[str, Check] = {c.name: c for c in [
    Check("chromium", chromium, f"{APT} chromium (or: python -m playwright install chromium)"),
    Check("playwright", module("playwright"), "pip install playwright"),
    Check("bubblewrap + user namespaces", user_namespaces,
          f"{APT} bubblewrap; and sysctl kernel.unprivileged_userns_clone=1 where the kernel restricts it"),
    Check("desktop resource bounds", desktop_bounds,
          "run guigym as root (or with a writable cgroup) for cgroup bounds and the disk quota; "
          "without, the local desktop falls back to per-process rlimits (docs/security.md)"),
    Check("xvfb", program("Xvfb", version_arg=None), f"{APT} xvfb xauth"),
    Check("openbox", program("openbox"), f"{APT} openbox"),
    Check("at-spi", program("/usr/libexec/at-spi-bus-launcher", "at-spi-bus-launcher", version_arg=None),
          f"{APT} at-spi2-core"),
    Check("pyatspi (system python)", pyatspi_system, f"{APT} python3-pyatspi python3-gi gir1.2-atspi-2.0"),
    _app("soffice", "libreoffice-calc libreoffice-writer libreoffice-impress"),
    _app("gimp", "gimp"),
    _app("thunderbird", "thunderbird"),
    _app("vlc", "vlc"),
    _app("nautilus", "nautilus"),
    _app("gnome-terminal", "gnome-terminal"),
    _app("evince", "evince"),
    Check("app: code", vscode,
          "VS Code is not a Debian package: the local desktop's `code` runs code-server; "
          "install it with GUIGYM_VSCODE=1 bash scripts/install.sh"),
    Check("/dev/kvm", kvm, "enable virtualisation in the BIOS/hypervisor; usermod -aG kvm $USER"),
    Check("qemu", program("qemu-system-x86_64"), f"{APT} qemu-system-x86 qemu-utils"),
    Check("docker engine", docker_engine, "install Docker Engine (docs.docker.com/engine/install) and start dockerd"),
    Check("adb + device", adb_devices, f"{APT} adb (or pip install guigym[android]); attach a device or start an emulator"),
    Check("webarena embedded sites", embedded_sites,
          "scripts/install.sh (fossil, kiwix-tools, libjs-leaflet; pip install guigym[web-sites])"),
    Check("torch", torch_info, "pip install torch==2.13.0 (CPU) or a CUDA build"),
    Check("transformers", module("transformers"), "pip install guigym[train]"),
    Check("vllm", module("vllm"), "pip install vllm (GPU machines; the HF engine works without it)"),
    Check("ray", module("ray"), "pip install guigym[ray]"),
    Check("postgresql", postgres, "export GUIGYM_PG_URL=postgresql+psycopg://user:pw@host/db (pip install guigym[postgres])"),
]}

#: target -> (checks it requires, checks it can use)
NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "MiniWoB-v0": (("chromium", "playwright"), ()),
    "WebArena-v0": (("chromium", "playwright"), ("webarena embedded sites",)),
    "OSWorld-v0": (("bubblewrap + user namespaces", "xvfb", "openbox", "at-spi", "pyatspi (system python)"),
                   tuple(n for n in CHECKS if n.startswith("app: ")) + ("desktop resource bounds", "chromium", "/dev/kvm", "qemu", "docker engine")),
    "Android": (("adb + device",), ()),
    "train": (("torch", "transformers"), ("vllm", "ray", "postgresql")),
}
DEFAULT_TARGETS = ("MiniWoB-v0",)


def run_checks(targets: Sequence[str], only_targets: bool = False) -> list[Result]:
    """Every check (or only those ``targets`` need/use), classified against ``targets``."""
    required = {n for t in targets for n in NEEDS[t][0]}
    optional = {n for t in targets for n in NEEDS[t][1]}
    out = []
    for name, check in CHECKS.items():
        if only_targets and name not in required | optional:
            continue
        ok, detail = check.probe()
        status = "ok" if ok else ("missing" if name in required else "warn")
        out.append(Result(name, status, detail, "" if ok else check.hint))
    return out


def render(results: Sequence[Result], targets: Sequence[str]) -> None:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"guigym doctor (required for: {', '.join(targets)})", show_lines=False)
    for col in ("check", "status", "detail", "fix"):
        table.add_column(col, overflow="fold")
    colour = {"ok": "green", "missing": "red", "warn": "yellow"}
    for r in results:
        table.add_row(escape(r.name), f"[{colour[r.status]}]{r.status}[/]", escape(r.detail), escape(r.hint))
    Console(width=max(120, shutil.get_terminal_size((160, 20)).columns)).print(table)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="guigym doctor", description=__doc__.split("\n\n")[0])
    p.add_argument("--env", action="append", default=[], choices=sorted(NEEDS),
                   help="what you want to run (repeatable); its requirements decide the exit status "
                        f"(default: {', '.join(DEFAULT_TARGETS)})")
    p.add_argument("--only", action="store_true", help="show only the checks the chosen targets need or use")
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON")
    args = p.parse_args(argv)
    targets = args.env or list(DEFAULT_TARGETS)
    results = run_checks(targets, only_targets=args.only)
    render(results, targets)
    if args.json:
        tmp = Path(args.json + ".tmp")
        tmp.write_text(json.dumps([asdict(r) for r in results], indent=1))
        os.replace(tmp, args.json)
    missing = [r.name for r in results if r.status == "missing"]
    if missing:
        print(f"missing for {', '.join(targets)}: {', '.join(missing)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
