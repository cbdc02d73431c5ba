"""The evaluators' registration, and the old import paths kept for one release (issue 33).

Fresh interpreters (subprocess) where what is already imported matters: this test process may
have imported every module long before.
"""
from __future__ import annotations

import importlib
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EV = "guigym.envs.desktop.evaluators"


def _fresh(code: str) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_load_all_imports_every_getter_and_metric_module_and_the_bottom_imports_none():
    out = _fresh(
        "import pkgutil, sys\n"
        f"import {EV}.base\n"
        f"early = sorted(m for m in sys.modules if m.startswith(('{EV}.getters.', '{EV}.metrics.')))\n"
        f"from {EV} import getters, metrics, load_all\n"
        "load_all()\n"
        "missing = [f'{p.__name__}.{m.name}' for p in (getters, metrics) for m in pkgutil.iter_modules(p.__path__)\n"
        "           if f'{p.__name__}.{m.name}' not in sys.modules]\n"
        "print(early, missing)\n")
    assert out.split() == ["[]", "[]"]  # base pulls in no family; load_all misses none


def test_registries_read_from_the_package_are_complete_in_a_fresh_interpreter():
    # one OSWorld name per family, from different modules (slides, table, apps, gimp; vlc, chrome)
    out = _fresh(f"from {EV} import GETTERS, METRICS\n"
                 "print(all(n in METRICS for n in ('compare_pptx_files', 'compare_table', "
                 "'check_thunderbird_prefs', 'check_image_mirror', 'exact_match')),"
                 " all(n in GETTERS for n in ('vlc_playing_info', 'default_search_engine', 'vm_file')))\n")
    assert out.split() == ["True", "True"]


SAME_MODULE = [
    ("guigym.envs.desktop.getters_chrome", f"{EV}.getters.chrome"),
    ("guigym.envs.desktop.getters_apps", f"{EV}.getters.vlc"),
    ("guigym.envs.desktop.metrics_gimp", f"{EV}.metrics.gimp"),
    ("guigym.envs.desktop.metrics_files", f"{EV}.metrics.file"),
    ("guigym.envs.desktop.office_rules", f"{EV}.metrics.table_rules"),
    ("guigym.envs.desktop.textsim", f"{EV}.textsim"),
    ("guigym.envs.desktop.setup_history", "guigym.envs.desktop.setup.history"),
    ("guigym.train.rollout.constrain", "guigym.models.constrain"),
    ("guigym.train.policy.logprobs", "guigym.models.logprobs"),
    ("guigym.train.policy.tiny", "guigym.models.tiny"),
    ("guigym.train.policy.hf_policy", "guigym.models.hf_policy"),
]


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
@pytest.mark.parametrize("old, new", SAME_MODULE)
def test_an_old_path_is_the_moved_module_itself(old, new):
    assert importlib.import_module(old) is importlib.import_module(new)


def test_an_old_desktop_path_warns_naming_the_new_one():
    code = ("import warnings\nwarnings.simplefilter('error')\n"
            "try:\n    import guigym.envs.desktop.metrics_slides\nexcept DeprecationWarning as w:\n    print(w)\n")
    assert f"{EV}.metrics.slides" in _fresh(code)


def test_the_split_modules_still_offer_their_old_names():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from guigym.envs.desktop import getters, metrics, office
    ev = importlib.import_module(EV)
    base = importlib.import_module(f"{EV}.base")
    assert metrics.evaluate is ev.evaluate and getters.get is ev.get
    assert metrics.METRICS is base.METRICS and "compare_pptx_files" in metrics.METRICS
    assert metrics.compare_table is importlib.import_module(f"{EV}.metrics.table").compare_table
    assert office.MetricDependencyError is base.MetricDependencyError
    assert getters.atomic_write is base.atomic_write and callable(getters.resolve_relative_time)
    with pytest.raises(AttributeError, match="moved to"):
        metrics.no_such_metric  # noqa: B018


def test_setup_keeps_its_import_path_as_a_package():
    from guigym.envs.desktop import setup
    from guigym.envs.desktop.setup.steps import run_setup

    assert setup.run_setup is run_setup and "update_browse_history" in setup.STEP_HANDLERS
    assert issubclass(setup.MissingToolError, setup.SetupUnavailableError)
