"""Issue 34, items 4 and 7, without starting an env: WebArena-v0's embedded suites from one flag
(``--embedded``) in ``tasks list``, ``tasks check`` and ``eval``, where "all" means all (a site
that cannot run is reported as skipped and the exit status is non-zero unless ``--available``);
``--agent package.module:Factory``; ``action_space.sample()`` giving short valid actions."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from guigym.cli import main as cli_main
from guigym.envs.web.webarena import check as wa_check
from guigym.envs.web.webarena import sites as S


def suite_ids(name: str) -> list[str]:
    return [f"webarena.{c['task_id']}" for c in json.loads(S.EMBEDDED[name].suite.read_text())]


@pytest.fixture
def kiwix_missing(monkeypatch):
    """kiwix cannot run here: its program is missing (what a machine without the extra sees)."""
    monkeypatch.setitem(S.EMBEDDED, "kiwix", S.EmbeddedSite("kiwix", S.EMBEDDED["kiwix"].target,
                                                            programs=("no-such-kiwix-serve",), hint="apt install kiwix-tools"))


def test_tasks_list_of_an_embedded_site_needs_no_config_file(capsys):
    assert cli_main(["tasks", "list", "--env", "WebArena-v0", "--embedded", "fossil"]) == 0
    assert capsys.readouterr().out.split() == suite_ids("fossil")


def test_embedded_all_reports_what_cannot_run_and_fails_unless_available(kiwix_missing, capsys, tmp_path):
    assert cli_main(["tasks", "list", "--env", "WebArena-v0", "--embedded", "all"]) == 2
    err = capsys.readouterr().err
    assert "skipped: embedded site kiwix (16 tasks)" in err and "no-such-kiwix-serve" in err
    assert "--available" in err
    assert cli_main(["tasks", "list", "--env", "WebArena-v0", "--embedded", "all", "--available"]) == 0
    out, err = capsys.readouterr()
    listed = set(out.split())
    assert "skipped: embedded site kiwix" in err
    assert not listed & set(suite_ids("kiwix")) and set(suite_ids("fossil")) <= listed
    # guigym eval refuses before any env starts: nothing is run or recorded
    out_dir = tmp_path / "run"
    assert cli_main(["eval", "--env", "WebArena-v0", "--embedded", "all", "--agent", "noop", "--quiet",
                     "--out", str(out_dir)]) == 2
    assert "skipped: embedded site kiwix" in capsys.readouterr().err
    assert not (out_dir / "results.jsonl").exists()


def test_eval_embedded_is_one_flag_that_becomes_the_env_option(tmp_path):
    from guigym.cli import _eval_config, build_parser

    args = build_parser().parse_args(["eval", "--env", "WebArena-v0", "--embedded", "fossil", "--tasks", "1001,1002",
                                      "--agent", "noop", "--out", str(tmp_path)])
    config = _eval_config(args)
    assert config.env_kwargs["embedded"] == ["fossil"] and config.task_ids == ["webarena.1001", "webarena.1002"]
    args = build_parser().parse_args(["eval", "--env", "MiniWoB-v0", "--embedded", "fossil", "--out", str(tmp_path)])
    with pytest.raises(Exception, match="only WebArena-v0 has embedded sites"):
        _eval_config(args)


def test_tasks_check_embedded_all_counts_skipped_sites_and_exits_2(kiwix_missing, monkeypatch, capsys):
    """The check of the runnable sites is replaced by all-ok rows: what is tested is that the
    sites left out are reported and counted, and decide the exit status."""
    checked: list[str] = []

    def all_ok(config_file, references, **kw):
        checked.append(config_file.parent.name)
        return [wa_check.Row(task=t, sites="x") for t in suite_ids(config_file.parent.name)]

    monkeypatch.setattr(wa_check, "run_check", all_ok)
    assert cli_main(["tasks", "check", "--env", "WebArena-v0", "--embedded", "all"]) == 2
    out, err = capsys.readouterr()
    assert "kiwix" not in checked and "fossil" in checked
    n_ok = sum(len(suite_ids(n)) for n in checked)
    assert f"tasks: {n_ok}, ok: {n_ok}, skipped: 16" in out
    assert "skipped: embedded site kiwix (16 tasks)" in err and "no-such-kiwix-serve" in err
    assert cli_main(["tasks", "check", "--env", "WebArena-v0", "--embedded", "all", "--available"]) == 0


# --------------------------------------------------------------------------- --agent module:Factory

AGENT_MODULE = textwrap.dedent('''
    class Parrot:
        """Says one fixed action; records what it was built with."""

        def __init__(self, seed=0, action="wait(seconds=0)"):
            self.seed, self.action, self.resets = seed, action, 0

        def reset(self, task_info):
            self.resets += 1

        def act(self, obs):
            return self.action


    def no_seed(action):
        return Parrot(action=action)


    class Bare:
        """No constructor arguments at all (not even the seed)."""

        def reset(self, task_info):
            pass

        def act(self, obs):
            return "done()"


    NOT_AN_AGENT = object()
''')


@pytest.fixture
def agent_module(tmp_path, monkeypatch):
    name = f"my_agents_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{name}.py").write_text(AGENT_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def test_agent_spec_module_factory_loads_any_agent(agent_module):
    from guigym.agents import make_agent

    agent = make_agent(f"{agent_module}:Parrot", seed=7, action="click(x=1, y=2)")
    assert type(agent).__name__ == "Parrot" and agent.seed == 7 and agent.act({}) == "click(x=1, y=2)"
    assert agent.name == f"{agent_module}:Parrot"  # the protocol's name, defaulted to the spec
    # a factory that takes no seed gets none; an option it does not take is named
    assert make_agent(f"{agent_module}:no_seed", seed=3, action="done()").act({}) == "done()"
    assert make_agent(f"{agent_module}:Bare", seed=3).act({}) == "done()"
    with pytest.raises(ValueError, match="takes no option 'colour'"):
        make_agent(f"{agent_module}:Parrot", seed=0, colour="red")
    with pytest.raises(ValueError, match="is not an agent"):
        make_agent(f"{agent_module}:NOT_AN_AGENT")
    with pytest.raises(ValueError, match="has no 'Missing'"):
        make_agent(f"{agent_module}:Missing")
    with pytest.raises(ValueError, match="cannot import module 'no_such_pkg.agents'"):
        make_agent("no_such_pkg.agents:Factory")
    assert type(make_agent("openai:http://127.0.0.1:9/v1")).__name__ == "OpenAIAgent"  # registered names win


def test_eval_refuses_a_bad_agent_module_before_any_env(agent_module, tmp_path, capsys):
    assert cli_main(["eval", "--tasks", "click-test", "--agent", f"{agent_module}:NOT_AN_AGENT",
                     "--out", str(tmp_path / "r")]) == 2
    assert "is not an agent" in capsys.readouterr().err
    assert not (tmp_path / "r" / "results.jsonl").exists()


# --------------------------------------------------------------------------- action_space.sample()

@pytest.mark.parametrize("dialect,platform", [
    ("canonical", "web"), ("webarena", "web"), ("browsergym", "web"), ("webrl", "web"), ("uitars", "desktop"),
    ("computer_13", "desktop"), ("pyautogui", "desktop"), ("androidlab", "android"), ("androidworld", "android")])
def test_action_space_sample_is_a_short_valid_action_of_the_dialect(dialect, platform):
    from guigym.core.dialect import parse_action
    from guigym.envs.spaces import ActionText

    space = ActionText(20_000, dialect=dialect, platform=platform, screen=(160, 210), seed=0)
    for _ in range(20):
        text = space.sample()
        assert space.contains(text) and len(text) <= 200, text
        action = parse_action(text, dialect)  # raises on an unparseable sample
        for xk, yk in (("x", "y"), ("x1", "y1"), ("x2", "y2")):
            x, y = getattr(action, xk, None), getattr(action, yk, None)
            if x is not None and y is not None and dialect not in ("computer_13",):
                assert 0 <= x < 160 and 0 <= y < 210, text


def test_env_action_space_samples_in_the_envs_dialect():
    import gymnasium as gym

    from guigym.core.dialect import parse_action

    env = gym.make("MiniWoB-v0", task="click-test", dialect="uitars")
    try:
        env.action_space.seed(0)
        for _ in range(10):
            parse_action(env.action_space.sample(), "uitars")
    finally:
        env.close()
