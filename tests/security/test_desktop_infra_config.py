"""The infra zone's own programs give an agent no way to run a command in the infra zone, and
the agent zone's mount view leaves out the infra's files (issue 10, item 1): checked on the real
programs (tmux, openbox's own rc.xml) and on the bwrap options, without starting a desktop."""
from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from guigym.envs.desktop.providers import local
from guigym.envs.desktop.providers.sandbox import SANDBOX_RUN, zone_argv_head
from guigym.envs.desktop.providers.sandbox_init import openbox_config

OB = "{http://openbox.org/3.4/rc}"


def test_terminal_tmux_has_no_key_that_runs_a_tmux_command(tmp_path):
    """Typed keys reach the infra's tmux server: with our config no key table has a binding
    (no prefix, no command prompt, no copy-mode commands) and the mouse is off."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    conf, sock = tmp_path / "tmux.conf", str(tmp_path / "t.sock")
    conf.write_text(local._TMUX_CONF)
    subprocess.run(["tmux", "-S", sock, "-f", str(conf), "new-session", "-d", "sleep 60"], check=True, timeout=10)
    try:
        keys = subprocess.run(["tmux", "-S", sock, "list-keys"], capture_output=True, text=True, timeout=10)
        opts = subprocess.run(["tmux", "-S", sock, "show-options", "-g"], capture_output=True, text=True, timeout=10)
    finally:
        subprocess.run(["tmux", "-S", sock, "kill-server"], capture_output=True, timeout=10)
    assert keys.stdout.strip() == ""
    options = dict(line.split(" ", 1) for line in opts.stdout.splitlines() if " " in line)
    assert options["prefix"] == "None" and options["prefix2"] == "None" and options["mouse"] == "off"


def test_openbox_config_runs_no_program_and_has_no_menu(tmp_path):
    """openbox is infra: its stock root menu has "Terminal emulator" (a shell in the infra zone
    at one click). The generated config keeps window handling but nothing that executes."""
    system_rc = Path("/etc/xdg/openbox/rc.xml")
    if not system_rc.exists():
        pytest.skip("openbox is not installed")
    stock = ET.parse(system_rc).getroot()
    assert any(a.get("name", "").lower() in ("execute", "showmenu") for a in stock.iter(f"{OB}action"))
    rc = ET.parse(openbox_config(str(tmp_path))).getroot()
    names = [a.get("name", "").lower() for a in rc.iter(f"{OB}action")]
    assert names and not {"execute", "showmenu", "exit", "restart", "reconfigure"} & set(names)
    assert {"focus", "move"} <= set(names)  # windows still focus and move
    (menu_file,) = [f.text for f in rc.iter(f"{OB}file")]
    assert list(ET.parse(menu_file).getroot()) == []


def test_agent_zone_mounts_none_of_the_infra_files():
    argv = zone_argv_head("bwrap", rebinds=["/tmp/venv"])
    pairs = list(zip(argv, argv[1:]))
    assert ("--tmpfs", "/run") in pairs and ("--as-pid-1", "--die-with-parent") in pairs
    tmpfs_run = pairs.index(("--tmpfs", "/run"))
    # nothing of /run/guigym is bound back except two read-only single files
    sources = [(flag, argv[i + 1], argv[i + 2]) for i, flag in enumerate(argv)
               if flag.startswith("--") and "bind" in flag and i + 2 < len(argv)]
    from_run = [s for s in sources if s[1].startswith(SANDBOX_RUN + "/")]
    assert {s[1] for s in from_run} == {f"{SANDBOX_RUN}/sudo.sha256", f"{SANDBOX_RUN}/Xauthority"}
    assert all(flag == "--ro-bind" and not dest.startswith(SANDBOX_RUN + "/") for flag, _, dest in from_run)
    assert all(argv.index(src) > tmpfs_run for _, src, _ in from_run)
    assert ("--bind", "/run/guigym-zone/tmp") in pairs and ("--ro-bind", "/tmp/venv") in pairs


@pytest.mark.parametrize("tz, ok", [("Europe/Paris", True), ("UTC", True), ("../../etc/shadow", False),
                                    ("/etc/localtime", False), (":Europe/Paris", False), ("EST5EDT,M3", False)])
def test_tz_reaches_the_desktop_only_as_a_zone_name(tz, ok):
    if not Path("/usr/share/zoneinfo/Europe/Paris").exists():
        pytest.skip("no tzdata")
    assert (local._valid_tz(tz) == tz) is ok
