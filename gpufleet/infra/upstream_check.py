"""Checks of what we render against upstream's own definitions of the pinned releases.

- Helm values: every key we set must exist in the chart's ``values.yaml`` (a misspelled key is silently
  ignored by Helm, so it must fail here instead).
- NVIDIA custom resources: validated against the CRD's openAPIV3Schema with unknown fields rejected, as
  the API server does with strict field validation (``kubectl apply --validate=strict``).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import jsonschema  # type: ignore[import-untyped]
import yaml

#: Value keys whose content is a free-form Kubernetes map (labels, selectors, ...), not chart schema.
FREE_FORM_KEYS = frozenset({"nodeSelector", "labels", "annotations", "additionalLabels", "podLabels",
                            "podAnnotations", "affinity", "resources", "data", "featureGates"})


def unknown_value_keys(ours: dict[str, Any], upstream: dict[str, Any], *,
                       allowed: Iterable[str] = (), _prefix: str = "") -> list[str]:
    """Dotted paths of keys in ``ours`` that the chart's values do not define.

    ``allowed`` lists dotted paths upstream documents only in comments of values.yaml.
    A key whose upstream default is a scalar, a list or an empty map takes any content.
    """
    allowed = set(allowed)
    bad: list[str] = []
    for key, value in ours.items():
        path = f"{_prefix}{key}"
        if path in allowed:
            continue
        if key not in upstream:
            if not any(a.startswith(path + ".") for a in allowed):
                bad.append(path)
                continue
            if isinstance(value, dict):
                bad += unknown_value_keys(value, {}, allowed=allowed, _prefix=path + ".")
            continue
        theirs = upstream[key]
        if key in FREE_FORM_KEYS or not isinstance(theirs, dict) or not theirs:
            continue
        if isinstance(value, dict):
            bad += unknown_value_keys(value, theirs, allowed=allowed, _prefix=path + ".")
    return bad


def commented_keys_documented(values_text: str, dotted: str) -> bool:
    """True when every part of ``dotted`` appears as a commented-out key in values.yaml's text."""
    lines = [ln.strip() for ln in values_text.splitlines()]
    head, *rest = dotted.split(".")
    if f"{head}:" not in lines:
        return False
    return all(any(ln.lstrip("#").strip().startswith(f"{part}:") and ln.startswith("#") for ln in lines)
               for part in rest)


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if ("properties" in out and "additionalProperties" not in out
                and not out.get("x-kubernetes-preserve-unknown-fields")):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def crd_schema(crd_file: Path, version: str | None = None) -> dict[str, Any]:
    """The openAPIV3Schema of a CRD file, made strict (unknown fields rejected)."""
    crd = yaml.safe_load(crd_file.read_text())
    versions = crd["spec"]["versions"]
    chosen = next(v for v in versions if version is None or v["name"] == version)
    schema = copy.deepcopy(chosen["schema"]["openAPIV3Schema"])
    result: dict[str, Any] = _strict(schema)
    # metadata is ObjectMeta, validated by the API server itself rather than by the CRD's schema.
    result.setdefault("properties", {})["metadata"] = {"type": "object"}
    return result


def crd_errors(obj: dict[str, Any], crd_file: Path) -> list[str]:
    """Validation errors of a custom resource against its CRD (empty when valid)."""
    api_version = obj.get("apiVersion", "")
    schema = crd_schema(crd_file, api_version.split("/")[-1] or None)
    validator = jsonschema.Draft7Validator(schema)
    return sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
                  for e in validator.iter_errors(obj))
