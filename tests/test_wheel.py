"""The installable package: ``python -m build`` makes a wheel and an sdist; the wheel, installed into
a fresh venv outside the checkout, runs a MiniWoB episode and a local-desktop task from its own
files (package data: JS assets, prompt templates, embedded suites, sandbox shims, the in-desktop
server). This catches anything that only works from a checkout (paths computed from the repository
root, data files left out of the package).

The venv sees the already-installed dependencies through a plain path entry (a ``.pth`` line
naming this interpreter's site-packages), which does not run the editable install's import hook,
so ``import guigym`` can only find the wheel's copy; the script asserts that it did.
"""
from __future__ import annotations

import json
import shutil
import site
import subprocess
import sys
import textwrap
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent('''
    import json, os, sys
    import guigym
    here = os.path.dirname(guigym.__file__)
    assert here.startswith(sys.prefix), ("guigym imported from", here)
    out = {"file": guigym.__file__, "version": guigym.__version__}

    import gymnasium as gym
    from guigym.agents.oracle.miniwob import MiniWoBOracle
    env = gym.make("MiniWoB-v0", tasks=["click-button"])
    agent = MiniWoBOracle()
    obs, info = env.reset(seed=3)
    agent.reset(info)
    for _ in range(5):
        obs, reward, term, trunc, info = env.step(agent.act(obs))
        if term or trunc:
            break
    env.close()
    out["miniwob_reward"] = float(reward)

    from guigym.cli import main
    # --adversarial: a scripted attacker also looks for the task files (answers) inside the sandbox,
    # which here live in the same venv as the interpreter the sandbox must keep visible
    rc = main(["tasks", "check", "--suite", "embedded", "--task", "terminal-mkdir", "--adversarial",
               "--json", "desktop.json"])
    rows = json.load(open("desktop.json"))
    out["desktop"] = [rc, rows[0]["noop"], rows[0]["reference"], rows[0].get("adversarial")]
    out["desktop_reason"] = rows[0].get("reason", "")
    rc = main(["tasks", "check", "--env", "WebArena-v0", "--embedded", "fossil", "--task", "1001",
               "--json", "web.json"])
    rows = json.load(open("web.json"))
    out["webarena"] = [rc, rows[0]["noop"], rows[0]["reference"]]
    out["webarena_reason"] = rows[0].get("reason", "")
    print("RESULT " + json.dumps(out))
''')


def test_the_wheel_installs_in_a_fresh_venv_and_runs_from_its_own_files(tmp_path):
    dist = tmp_path / "dist"
    # default build: the sdist first, then the wheel from the unpacked sdist (so the wheel holds only
    # what the sdist ships); --no-isolation: the build backend already installed here, no download
    p = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(ROOT)],
                       capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    wheels, sdists = list(dist.glob("guigym-*.whl")), list(dist.glob("guigym-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1
    import guigym  # the version comes from one place, guigym/__init__.py

    assert wheels[0].name.startswith(f"guigym-{guigym.__version__}-")

    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    py = env_dir / "bin" / "python"
    purelib = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                  capture_output=True, text=True, check=True).stdout.strip())
    # dependencies: this interpreter's site-packages as plain path entries (no .pth hooks run from them)
    (purelib / "zz_guigym_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    p = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                        "--target", str(purelib), str(wheels[0])], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    p = subprocess.run([str(py), "-c", SCRIPT], cwd=work, capture_output=True, text=True, timeout=900,
                       env={"PATH": f"{env_dir / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home()),
                            "LANG": "C.UTF-8"})
    line = next((ln for ln in p.stdout.splitlines() if ln.startswith("RESULT ")), None)
    assert line is not None, p.stdout[-3000:] + p.stderr[-3000:]
    out = json.loads(line[len("RESULT "):])
    assert out["file"].startswith(str(purelib)) and out["version"] == guigym.__version__
    assert out["miniwob_reward"] > 0
    assert out["desktop"] == [0, 0.0, 1.0, 0.0], out
    if shutil.which("fossil"):
        assert out["webarena"] == [0, 0.0, 1.0], out
