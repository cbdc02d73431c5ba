"""Attacks on the local desktop's trust zones (issue 10, items 1-4, 6), each performed the way an
agent would: actions typed into the desktop's terminal through ``gym.make("OSWorld-v0",
provider="local")``; the test then reads the observations and the host.

One env per module (a desktop takes seconds to start); each test resets it first.
"""
from __future__ import annotations

import os
import re
import secrets
import stat
import time
from pathlib import Path

import gymnasium as gym
import pytest

import guigym  # noqa: F401 - registers the envs
from guigym.core import actions as A
from guigym.envs.desktop.providers.local import _read_nofollow

from desktop_needs import need_desktop

pytestmark = pytest.mark.slow  # one real desktop for the module: ~70 s on a loaded 2-core box

SMALL = {"screen_size": (1024, 768)}
CANARY = "GUIGYM_SECRET_CANARY"
CANARY_VALUE = "canary-" + secrets.token_hex(12)


@pytest.fixture(scope="module")
def env():
    need_desktop()
    os.environ[CANARY] = CANARY_VALUE  # a secret of the host process, set before make()
    e = gym.make("OSWorld-v0", task="terminal-mkdir", provider="local", provider_kwargs=SMALL,
                 max_steps=400)
    try:
        yield e
    finally:
        e.close()
        os.environ.pop(CANARY, None)


def provider(env):
    return env.unwrapped.provider


def run_typed(env, command: str, timeout: float = 60.0) -> tuple[str, list[dict]]:
    """Type ``command`` into the desktop's terminal and press Enter; step (wait) until the
    marker it echoes last shows. Returns (terminal text after the command, observations)."""
    marker = f"END-{secrets.token_hex(4)}"
    env.step(A.Type(text=f"{command}; echo {marker[:4]}''{marker[4:]}"))
    obs, *_ = env.step(A.Press(key="enter"))
    seen = [obs]
    deadline = time.monotonic() + timeout
    while marker not in obs["terminal"]:
        assert time.monotonic() < deadline, f"{command!r} gave no {marker} in {timeout} s: {obs['terminal'][-500:]}"
        obs, *_ = env.step(A.Wait(seconds=0.3))
        seen.append(obs)
    text = obs["terminal"]
    return text[text.rfind(command[:40]):], seen


def host_processes(pattern: str) -> list[str]:
    """Command lines of host processes matching ``pattern`` (the test may read every /proc)."""
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                cmd = Path(f"/proc/{name}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if re.search(pattern, cmd):
                found.append(cmd)
    return found


def all_agent_text(obs_list: list[dict]) -> str:
    return "\n".join(o["terminal"] + o["a11y"] for o in obs_list)


def test_host_secret_env_var_reaches_no_observation_or_file(env):
    obs, _ = env.reset()
    out, seen = run_typed(env, "env | grep -c CANARY; cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' "
                               "| grep -c CANARY; env > ~/env-dump.txt")
    assert CANARY_VALUE not in all_agent_text([obs, *seen])
    counts = re.findall(r"^(\d+)\s*$", out, re.M)
    assert counts[:2] == ["0", "0"], out
    for path in provider(env).home_dir.rglob("*"):  # nothing the agent can write holds it
        if path.is_file() and not path.is_symlink():
            assert CANARY_VALUE.encode() not in path.read_bytes(), path


def test_etc_shadow_unreadable_when_the_suite_runs_as_root(env):
    if os.geteuid() != 0:
        pytest.skip("only meaningful when guigym runs as root (the sandbox uid once mapped to root)")
    first = Path("/etc/shadow").read_text().splitlines()[0]
    env.reset()
    out, _ = run_typed(env, "head -1 /etc/shadow; id -u; cat /proc/self/uid_map")
    assert "Permission denied" in out
    assert first not in out
    host_uid = int(re.search(r"^\s*1000\s+(\d+)\s+1\s*$", out, re.M).group(1))
    assert host_uid != 0  # uid 1000 inside is an unprivileged host uid


def test_token_sockets_and_task_files_unreachable(env):
    env.reset()
    p = provider(env)
    task_file = env.unwrapped.task.source
    out, _ = run_typed(env, "ls -a /run/guigym; cat /run/guigym/token; "
                            "timeout 120 find / \\( -name token -o -name ctl.sock -o -name server.sock "
                            "-o -name tmux.sock -o -name 'terminal-mkdir.json' \\) 2>/dev/null | head; "
                            f"cat {task_file}; python3 -c 'import guigym' 2>&1 | tail -1; "
                            "mkdir -p /run/guigym && ln -sf /tmp/evil /run/guigym/ctl.sock && echo planted",
                       timeout=180)
    assert p.token not in out
    listing = out.split("\n", 1)[1] if "\n" in out else out
    for name in ("/token", "/ctl.sock", "/server.sock", "/tmux.sock", "terminal-mkdir.json"):
        assert not re.search(rf"^/\S*{re.escape(name)}\s*$", listing, re.M), (name, out)
    assert "No such file or directory" in out and "ModuleNotFoundError" in out
    assert "planted" in out  # in its own view only: the infra's files are untouched
    for name in ("ctl.sock", "server.sock"):
        assert stat.S_ISSOCK(os.lstat(p.run_dir / name).st_mode)


LISTENER = (
    "python3 -c 'import socket,os,threading;os.makedirs(\"/run/guigym\",exist_ok=True);"
    "H=b\"HTTP/1.0 200 OK\\r\\nContent-Type: application/json\\r\\n\\r\\n{\\\"ok\\\": true, \\\"output\\\": "
    "\\\"FAKE-TERMINAL\\\"}\\n\";"
    "P=[d+n for d in (\"/run/guigym/\",\"/tmp/\",\"/home/user/\") for n in (\"ctl.sock\",\"server.sock\",\"tmux.sock\")];"
    "S=[socket.socket(socket.AF_UNIX) for p in P];[s.bind(p) or s.listen(9) for s,p in zip(S,P)];"
    "[threading.Thread(target=lambda s=s:[(c.recv(65536),c.sendall(H),c.close()) "
    "for c in iter(lambda:s.accept()[0],None)]).start() for s in S]' &"
)


def test_fake_sockets_and_keep_on_reset_do_not_survive_reset(env):
    env.reset()
    p = provider(env)
    out, _ = run_typed(env, LISTENER + " sleep 1; ls /run/guigym/ ~/*.sock; echo agent > ~/agent-file.txt; "
                            "GUIGYM_KEEP_ON_RESET=1 sleep 1001 & cp /bin/sleep ~/at-spi2-registryd && "
                            "~/at-spi2-registryd 1002 & sleep 0.5")
    assert "ctl.sock" in out  # the fakes listen (in the agent's own view)
    assert (p.home_dir / "agent-file.txt").exists()
    assert host_processes(r"^sleep 1001 $") and host_processes(r"at-spi2-registryd 1002 $")
    obs, _ = env.reset()
    assert not (p.home_dir / "agent-file.txt").exists()  # the real reset ran
    assert "FAKE-TERMINAL" not in obs["terminal"] and "FAKE-TERMINAL" not in (p.terminal_text() or "")
    assert not host_processes(r"^sleep 1001 $") and not host_processes(r"at-spi2-registryd 1002 $")
    assert not host_processes(r"import socket,os,threading")


def test_killing_everything_and_filling_home_still_scores(env):
    env.reset()
    run_typed(env, "fallocate -l 512M ~/big || dd if=/dev/zero of=~/big bs=1M count=512; ls -la ~/big")
    env.step(A.Type(text="kill -9 -1"))
    obs, reward, terminated, truncated, info = env.step(A.Press(key="enter"))
    for _ in range(5):  # the terminal is gone; observing still works
        obs, reward, terminated, truncated, info = env.step(A.Wait(seconds=0.2))
    assert obs["screenshot"].std() >= 0 and "terminal" in obs
    obs, reward, terminated, truncated, info = env.step(A.Done())
    assert terminated and reward in (0.0, 1.0)
    obs, _ = env.reset()  # and the next episode starts clean
    assert not (provider(env).home_dir / "big").exists()
    assert "$" in obs["terminal"]


def test_planted_log_symlink_is_not_followed(env, tmp_path):
    env.reset()
    p = provider(env)
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    planted = p.run_dir / "logs" / "planted.log"
    planted.symlink_to(secret)
    try:
        assert "host secret" not in p._log_tail("planted.log")
        with pytest.raises(OSError):
            _read_nofollow(planted)
    finally:
        planted.unlink()
