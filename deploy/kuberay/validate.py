#!/usr/bin/env python3
"""Check RayCluster manifests against KubeRay's RayCluster CRD schema (no cluster needed).

    python deploy/kuberay/validate.py [deploy/kuberay/raycluster.yaml ...]     # exit 1 on errors
    python deploy/kuberay/validate.py --from-crd ray.io_rayclusters.yaml        # regenerate the schema

The schema, ``raycluster.schema.json`` beside this file, is the ``openAPIV3Schema`` of the ``v1``
version of KubeRay's CRD ``rayclusters.ray.io`` as released in KubeRay v1.7.0
(``ray-operator/config/crd/bases/ray.io_rayclusters.yaml`` at tag ``v1.7.0`` of
ray-project/kuberay), with every ``description`` removed (they are ~90% of the file and do not
take part in validation). Nothing else is changed; ``--from-crd`` regenerates it from a newer CRD.

How a manifest is checked (what ``kubectl apply --validate=strict`` would reject, offline):

* JSON Schema (Draft 7, the ``jsonschema`` package) of the CRD: types, enums, ``required``,
  ``int-or-string`` quantities (the CRD spells them ``anyOf: [integer, string]``), patterns.
* Unknown fields: the API server prunes a field that a structural schema does not declare, and
  strict field validation reports it as an error. Here every object schema that declares
  ``properties`` and neither ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields:
  true`` is closed (``additionalProperties: false``), so a misspelled field fails. Objects
  without declared properties (``metadata`` of pod templates, free-form maps) stay open, as the
  API server treats them.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path
from typing import Any, Iterable

HERE = Path(__file__).resolve().parent
SCHEMA_PATH = HERE / "raycluster.schema.json"
KUBERAY_VERSION = "v1.7.0"
CRD_SOURCE = (f"ray-project/kuberay {KUBERAY_VERSION}: ray-operator/config/crd/bases/ray.io_rayclusters.yaml, "
              "spec.versions[name=v1].schema.openAPIV3Schema, descriptions removed")


def _strip_descriptions(node: Any) -> Any:
    if isinstance(node, dict):
        # "description" is a keyword only in schema objects; a property *named* description
        # lives under "properties" and is kept (it is a key there, not a keyword)
        return {k: ({p: _strip_descriptions(s) for p, s in v.items()} if k == "properties" else _strip_descriptions(v))
                for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip_descriptions(v) for v in node]
    return node


def schema_from_crd(crd_text: str, version: str = "v1") -> dict[str, Any]:
    """The openAPIV3Schema of ``version`` in a CRD YAML text, without descriptions, tagged with
    its source (``$comment``)."""
    import yaml

    crd = yaml.safe_load(crd_text)
    kind = crd.get("spec", {}).get("names", {}).get("kind")
    if crd.get("kind") != "CustomResourceDefinition" or kind != "RayCluster":
        raise ValueError("not the RayCluster CustomResourceDefinition (ray.io_rayclusters.yaml)")
    for v in crd["spec"]["versions"]:
        if v["name"] == version:
            schema = _strip_descriptions(v["schema"]["openAPIV3Schema"])
            return {"$comment": CRD_SOURCE, **schema}
    raise ValueError(f"the CRD has no version {version!r}")


def strict(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` where objects with declared ``properties`` reject undeclared fields
    (unless they already say ``additionalProperties`` or preserve unknown fields)."""
    out = copy.deepcopy(schema)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    walk(out)
    return out


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    """The shipped schema, closed against unknown fields (:func:`strict`)."""
    return strict(json.loads(path.read_text()))


def errors(manifest: dict[str, Any], schema: dict[str, Any] | None = None) -> list[str]:
    """Validation errors of one RayCluster object, each ``<json path>: <message>`` (empty = valid)."""
    import jsonschema

    schema = load_schema() if schema is None else schema
    if not isinstance(manifest, dict):
        return [f"$: a manifest must be a mapping, got {type(manifest).__name__}"]
    out = []
    if manifest.get("apiVersion") != "ray.io/v1":
        out.append(f"$.apiVersion: expected 'ray.io/v1', got {manifest.get('apiVersion')!r}")
    if manifest.get("kind") != "RayCluster":
        out.append(f"$.kind: expected 'RayCluster', got {manifest.get('kind')!r}")
    validator = jsonschema.Draft7Validator(schema)
    for err in sorted(validator.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path))):
        out.append(f"{err.json_path}: {err.message}")
    return out


def check_files(paths: Iterable[Path]) -> dict[str, list[str]]:
    """Errors per ``file#document-index`` for every RayCluster document in ``paths``."""
    import yaml

    result: dict[str, list[str]] = {}
    for path in paths:
        for k, doc in enumerate(yaml.safe_load_all(Path(path).read_text())):
            if doc is None or (isinstance(doc, dict) and doc.get("kind") not in (None, "RayCluster")):
                continue  # other kinds in the same file (none today) are not ours to check
            result[f"{path}#{k}"] = errors(doc)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="*", type=Path, default=[HERE / "raycluster.yaml"])
    ap.add_argument("--from-crd", type=Path, help="write raycluster.schema.json from this CRD YAML and exit")
    args = ap.parse_args(argv)
    if args.from_crd:
        schema = schema_from_crd(args.from_crd.read_text())
        SCHEMA_PATH.write_text(json.dumps(schema, sort_keys=True, separators=(",", ":")) + "\n")
        print(f"wrote {SCHEMA_PATH}")
        return 0
    bad = 0
    results = check_files(args.files)
    if not results:
        print("no RayCluster documents found", file=sys.stderr)
        return 1
    for where, errs in results.items():
        print(f"{where}: {'ok' if not errs else f'{len(errs)} error(s)'} (KubeRay {KUBERAY_VERSION} RayCluster CRD)")
        for e in errs:
            print(f"  {e}")
        bad += bool(errs)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
