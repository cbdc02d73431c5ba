"""VS Code in the local desktop (issue 17): the sandbox's ``code`` runs code-server
(scripts/install_code_server.sh) with desktop VS Code's paths, so OSWorld's vs_code setups and
metrics work unchanged; without code-server there is no ``code`` at all (MissingToolError).

The desktop tests run when code-server is installed and skip with the reason otherwise."""
from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import time
import zipfile
from pathlib import Path

import pytest
from desktop_needs import need_desktop

from guigym.envs.desktop.vscode import (
    CODE_SERVER_VERSION,
    code_server_bin,
    find_code_server,
)

REPO = Path(__file__).resolve().parents[1]
SETTINGS = "/home/user/.config/Code/User/settings.json"


def _fake_prefix(root: Path) -> Path:
    launcher = code_server_bin(root)
    launcher.parent.mkdir(parents=True)
    launcher.write_text("#!/bin/sh\necho 9.9.9 abc with Code 1.0\n")
    launcher.chmod(0o755)
    return root


def test_find_code_server_follows_the_prefix_variable(tmp_path, monkeypatch):
    monkeypatch.setenv("GUIGYM_CODE_SERVER_PREFIX", str(tmp_path / "none"))
    assert find_code_server() is None
    prefix = _fake_prefix(tmp_path / "cs")
    monkeypatch.setenv("GUIGYM_CODE_SERVER_PREFIX", str(prefix))
    assert find_code_server() == prefix


def test_doctor_says_how_to_install_code_server(tmp_path, monkeypatch):
    from guigym import doctor

    monkeypatch.setenv("GUIGYM_CODE_SERVER_PREFIX", str(tmp_path / "none"))
    ok, detail = doctor.vscode()
    assert not ok and "no code-server" in detail
    assert "GUIGYM_VSCODE=1 bash scripts/install.sh" in doctor.CHECKS["app: code"].hint
    monkeypatch.setenv("GUIGYM_CODE_SERVER_PREFIX", str(_fake_prefix(tmp_path / "cs")))
    ok, detail = doctor.vscode()
    assert ok and "code-server 9.9.9" in detail and f"pins {CODE_SERVER_VERSION}" in detail


def test_install_script_skips_an_installed_pinned_version(tmp_path):
    """Idempotent: the marker the script writes last (pinned version) means nothing to do, so
    no apt-get or npm runs (an interrupted install, without the marker, is redone)."""
    (tmp_path / ".guigym-code-server").write_text(CODE_SERVER_VERSION + "\n")
    bin_dir = tmp_path / "bin"  # only what the check needs: npm/apt-get/sudo would fail here
    bin_dir.mkdir()
    for tool in ("cat", "id"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    env = {**os.environ, "PATH": str(bin_dir)}
    r = subprocess.run(["/bin/bash", str(REPO / "scripts/install_code_server.sh"), str(tmp_path)],
                       check=False, capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "already" in r.stdout, r.stderr


def test_bin_dir_without_code_keeps_the_other_shims(tmp_path):
    from guigym.envs.desktop.providers.local import SANDBOX_BIN_DIR, _stage_bin_dir

    staged = _stage_bin_dir(SANDBOX_BIN_DIR, tmp_path / "bin", skip=("code",))
    assert (SANDBOX_BIN_DIR / "code").is_file()
    assert not (staged / "code").exists()
    assert os.access(staged / "google-chrome", os.X_OK)


def _env(tasks):
    from guigym.envs.desktop.env import OSWorldEnv

    env = OSWorldEnv(tasks=tasks, provider="local", max_steps=100)
    env.observe_a11y = True
    return env


def _task(tid: str, config: list, evaluator: dict):
    from guigym.envs.desktop.tasks import parse_osworld_task

    return parse_osworld_task({"id": tid, "instruction": tid, "config": config, "evaluator": evaluator,
                               "related_apps": ["vscode"]}, source="tests/test_desktop_vscode.py")


def test_without_code_server_a_code_task_fails_naming_code(monkeypatch):
    need_desktop()
    from guigym.envs.desktop.providers import local
    from guigym.envs.desktop.setup import MissingToolError

    monkeypatch.setattr(local, "find_code_server", lambda: None)
    t = _task("no-code", [{"type": "launch", "parameters": {"command": ["code"]}}],
              {"func": "check_json_settings", "expected": {"type": "rule", "rules": {"expected": {}}},
               "result": {"type": "vm_file", "path": SETTINGS, "dest": "settings.json"}})
    env = _env([t])
    try:
        with pytest.raises(MissingToolError) as e:
            env.reset(options={"task": "no-code"})
        assert e.value.missing == "code"
    finally:
        env.close()


def _vsix(publisher: str, name: str) -> bytes:
    """A minimal extension package: [Content_Types].xml, extension.vsixmanifest, extension/."""
    pkg = {"name": name, "publisher": publisher, "version": "0.0.1", "engines": {"vscode": "^1.60.0"},
           "contributes": {"commands": [{"command": f"{name}.hello", "title": "hello"}]}}
    manifest = f"""<?xml version="1.0" encoding="utf-8"?>
<PackageManifest Version="2.0.0" xmlns="http://schemas.microsoft.com/developer/vsx-schema/2011">
 <Metadata><Identity Language="en-US" Id="{name}" Version="0.0.1" Publisher="{publisher}" />
  <DisplayName>{name}</DisplayName><Description xml:space="preserve">{name}</Description></Metadata>
 <Installation><InstallationTarget Id="Microsoft.VisualStudio.Code"/></Installation><Dependencies/>
 <Assets><Asset Type="Microsoft.VisualStudio.Code.Manifest" Path="extension/package.json" Addressable="true"/></Assets>
</PackageManifest>"""
    types = ('<?xml version="1.0" encoding="utf-8"?><Types xmlns="http://schemas.openxmlformats.org/'
             'package/2006/content-types"><Default Extension=".json" ContentType="application/json"/>'
             '<Default Extension=".vsixmanifest" ContentType="text/xml"/></Types>')
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("[Content_Types].xml", types)
        z.writestr("extension.vsixmanifest", manifest)
        z.writestr("extension/package.json", json.dumps(pkg))
    return buf.getvalue()


@pytest.fixture(scope="module")
def vscode_env():
    need_desktop()
    if find_code_server() is None:
        pytest.skip("code-server is not installed (GUIGYM_VSCODE=1 bash scripts/install.sh)")
    settings = {"func": "check_json_settings",
                "expected": {"type": "rule", "rules": {"expected": {"editor.wordWrapColumn": 50}}},
                "result": {"type": "vm_file", "path": SETTINGS, "dest": "settings.json"}}
    # OSWorld's 276cc624 (line length 50) as it is: activate_window waits for the window its
    # launch is still opening (setup.step_activate_window), so the test can act at once
    launch = [{"type": "launch", "parameters": {"command": ["code"]}},
              {"type": "activate_window", "parameters": {"window_name": "Visual Studio Code"}}]
    extension = {"func": "is_extension_installed",
                 "result": {"type": "vm_command_line",
                            "command": ["code", "--list-extensions", "|", "grep", "guigym-test.probe"]},
                 "expected": {"type": "rule", "rules": {"type": "contain", "expected": "guigym-test.probe"}}}
    env = _env([_task("vscode-settings", launch, settings), _task("vscode-extension", launch, extension)])
    yield env
    env.close()


def test_code_window_is_titled_visual_studio_code_in_the_a11y_tree(vscode_env):
    obs, _ = vscode_env.reset(options={"task": "vscode-settings"})
    for _ in range(20):  # the workbench names the page once it has loaded
        if '- Visual Studio Code"' in obs["a11y"]:
            break
        obs, *_ = vscode_env.step("wait(seconds=1)")
    assert '<frame name="' in obs["a11y"] and '- Visual Studio Code"' in obs["a11y"]
    assert "monaco-workbench" in obs["a11y"]  # VS Code's own UI is walked, not only Chromium's frame


def test_noop_scores_0_and_a_setting_changed_in_the_ui_scores_1(vscode_env):
    env = vscode_env
    env.reset(options={"task": "vscode-settings"})
    _, reward, *_ = env.step("done()")
    assert reward == 0.0
    env.reset(options={"task": "vscode-settings"})
    time.sleep(3)  # the workbench finishes its start-up (keybindings are live after that)
    for action in ("press(key=\"f1\")", "wait(seconds=1)", 'type(text="Preferences: Open User Settings (JSON)")',
                   "wait(seconds=1)", 'press(key="enter")', "wait(seconds=3)", 'hotkey(keys=["ctrl", "a"])',
                   'press(key="delete")', 'type(text="{\\"editor.wordWrapColumn\\": 50")', 'press(key="escape")',
                   'hotkey(keys=["ctrl", "s"])', "wait(seconds=2)"):
        env.step(action)
    text = env.client.execute(["cat", SETTINGS], timeout=20)["output"]
    _, reward, *_ = env.step("done()")
    assert reward == 1.0, text


def test_vsix_installs_offline_and_is_listed(vscode_env):
    env = vscode_env
    env.reset(options={"task": "vscode-extension"})
    _, reward, *_ = env.step("done()")
    assert reward == 0.0  # not installed yet
    env.reset(options={"task": "vscode-extension"})
    env.client.upload_file(_vsix("guigym-test", "probe"), "/home/user/probe.vsix")
    r = env.client.execute(["code", "--install-extension", "/home/user/probe.vsix"], timeout=120)
    assert r.get("returncode") == 0, r
    listed = env.client.execute(["code", "--list-extensions"], timeout=60)["output"]
    assert "guigym-test.probe" in listed.split()
    _, reward, *_ = env.step("done()")
    assert reward == 1.0
