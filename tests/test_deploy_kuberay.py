"""deploy/kuberay: the RayCluster spec is valid against KubeRay's RayCluster CRD schema (v1.7.0,
shipped as JSON beside it), and the check rejects broken specs (typos, wrong types, missing fields)."""
from __future__ import annotations

import copy
import importlib.util
import json
import re
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML reads the manifests (train extra)")
pytest.importorskip("jsonschema", reason="the CRD check needs the jsonschema package (installed with the ray extra)")

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy" / "kuberay"


def _load_validator():
    spec = importlib.util.spec_from_file_location("kuberay_validate", DEPLOY / "validate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


V = _load_validator()


@pytest.fixture(scope="module")
def schema():
    return V.load_schema()


@pytest.fixture()
def cluster():
    return yaml.safe_load((DEPLOY / "raycluster.yaml").read_text())


def _group(c, name):
    return next(g for g in c["spec"]["workerGroupSpecs"] if g["groupName"] == name)


def test_schema_is_kuberays_crd_and_says_where_it_came_from():
    raw = json.loads((DEPLOY / "raycluster.schema.json").read_text())
    assert "kuberay v1.7.0" in raw["$comment"] and "ray.io_rayclusters.yaml" in raw["$comment"]
    spec = raw["properties"]["spec"]["properties"]
    assert {"headGroupSpec", "workerGroupSpecs", "rayVersion"} <= set(spec)
    assert set(spec["workerGroupSpecs"]["items"]["required"]) >= {"groupName", "template"}
    assert "description" not in json.dumps(raw["properties"]["spec"]["properties"]["rayVersion"])


def test_shipped_spec_is_valid(cluster, schema):
    assert V.errors(cluster, schema) == []
    assert V.main([str(DEPLOY / "raycluster.yaml")]) == 0


def test_shipped_spec_has_the_groups_guigym_needs(cluster):
    head = cluster["spec"]["headGroupSpec"]
    assert head["rayStartParams"]["num-cpus"] == "0"  # no env actors or trainer on the head
    envs, gpu = _group(cluster, "envs"), _group(cluster, "gpu")
    assert int(envs["resources"]["desktop"]) >= 1  # the recipe's ray.resources: {desktop: 1}
    env_box = envs["template"]["spec"]["containers"][0]
    assert env_box["resources"]["limits"]["devices.kubevirt.io/kvm"] == "1"  # /dev/kvm for the qemu VMs
    assert env_box["command"][:4] == ["guigym", "doctor", "--env", "OSWorld-v0"]
    gpu_box = gpu["template"]["spec"]["containers"][0]
    assert gpu_box["resources"]["limits"]["nvidia.com/gpu"] == "1"
    images = {c["image"] for g in [head, envs, gpu] for c in g["template"]["spec"]["containers"]}
    assert len(images) == 1  # one guigym image everywhere (Ray versions must match across nodes)
    pin = re.search(r'ray\[default\]==([0-9.]+)', (DEPLOY / "Dockerfile").read_text()).group(1)
    assert cluster["spec"]["rayVersion"] == pin


@pytest.mark.parametrize("name, break_it, where", [
    ("misspelled top-level spec field", lambda c: c["spec"].update(workerGroupSpec=c["spec"].pop("workerGroupSpecs")),
     "workerGroupSpec"),
    ("misspelled group field", lambda c: _group(c, "envs").update(replica=_group(c, "envs").pop("replicas")),
     "replica"),
    ("misspelled container field", lambda c: _group(c, "gpu")["template"]["spec"]["containers"][0].update(
        imagee="x"), "imagee"),
    ("replicas is not an integer", lambda c: _group(c, "envs").update(replicas="four"), "replicas"),
    ("custom resource is not a string", lambda c: _group(c, "envs")["resources"].update(desktop=8), "desktop"),
    ("rayStartParams value is not a string", lambda c: c["spec"]["headGroupSpec"]["rayStartParams"].update(
        **{"num-cpus": 0}), "num-cpus"),
    ("group without groupName", lambda c: c["spec"]["workerGroupSpecs"][1].pop("groupName"), "groupName"),
    ("pod without containers", lambda c: c["spec"]["headGroupSpec"]["template"]["spec"].pop("containers"),
     "containers"),
    ("wrong kind", lambda c: c.update(kind="RayClusterr"), "kind"),
])
def test_broken_specs_fail(cluster, schema, name, break_it, where):
    broken = copy.deepcopy(cluster)
    break_it(broken)
    errs = V.errors(broken, schema)
    assert errs, f"{name}: accepted"
    assert any(where in e for e in errs), errs


def test_open_objects_stay_open(cluster, schema):
    """Free-form places (labels, annotations, pod template metadata) take any keys, as the API
    server accepts them: the strictness must not reject a valid manifest."""
    ok = copy.deepcopy(cluster)
    ok["metadata"]["annotations"] = {"example.com/anything": "yes"}
    _group(ok, "envs")["template"]["metadata"]["annotations"] = {"prometheus.io/scrape": "true"}
    _group(ok, "envs")["rayStartParams"]["object-store-memory"] = "1000000000"
    assert V.errors(ok, schema) == []


def test_strict_closes_only_declared_objects_without_preserve():
    s = {"type": "object", "properties": {
        "a": {"type": "object", "properties": {"x": {"type": "integer"}}},
        "b": {"type": "object", "x-kubernetes-preserve-unknown-fields": True, "properties": {"y": {"type": "string"}}},
        "c": {"type": "object", "additionalProperties": {"type": "string"}},
        "d": {"type": "object"}}}
    out = V.strict(s)
    assert out["additionalProperties"] is False and out["properties"]["a"]["additionalProperties"] is False
    assert "additionalProperties" not in out["properties"]["b"]
    assert out["properties"]["c"]["additionalProperties"] == {"type": "string"}
    assert "additionalProperties" not in out["properties"]["d"]
    assert "additionalProperties" not in s  # the input is not modified


def test_cli_reports_a_broken_file(tmp_path, cluster, capsys):
    bad = copy.deepcopy(cluster)
    _group(bad, "envs")["maxReplica"] = 3
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    assert V.main([str(path)]) == 1
    out = capsys.readouterr().out
    assert "maxReplica" in out and "1 error" in out
