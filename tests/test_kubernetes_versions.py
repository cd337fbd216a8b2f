"""Managed Kubernetes versions as catalog data (gpufleet/catalog/kubernetes.yaml): every window cites its
source, the stack validation refuses a version out of standard support with the fix (a supported version, or
the cloud's long-term setting while that window is open), and the day is injected (GPUFLEET_TODAY), so no
assertion here expires with the calendar."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.catalog import kubernetes as kv
from gpufleet.errors import ConfigError
from gpufleet.spec import STACKS_DIR, load_spec


def _variant(tmp_path: Path, stack: str, cloud: str, **settings: Any) -> str:
    doc = yaml.safe_load((STACKS_DIR / f"Pulumi.{stack}.yaml").read_text())
    doc["config"][f"gpufleet:{cloud}"].update(settings)
    (tmp_path / f"Pulumi.{stack}-v.yaml").write_text(yaml.safe_dump(doc))
    return f"{stack}-v"


def test_every_version_window_is_sourced_and_ordered() -> None:
    for cloud in kv.catalog().values():
        assert cloud.long_term_source.startswith("https://")
        for entry in cloud.versions.values():
            assert entry.source.startswith("https://")
            assert entry.long_term_end is None or entry.long_term_end > entry.standard_end


def test_support_on_a_given_day() -> None:
    day = date(2026, 12, 4)
    assert kv.support("aws", "1.33", day).status == "unsupported"  # type: ignore[union-attr]
    ext = kv.support("aws", "1.33", day, long_term=True)
    assert ext is not None and (ext.status, ext.ends) == ("long-term", date(2027, 7, 29))
    assert kv.support("aws", "1.33", date(2026, 7, 29)).status == "standard"  # type: ignore[union-attr]
    assert kv.supported_versions("azure", day) == ["1.35"]
    assert kv.support("gcp", "1.35", day) is None


@pytest.mark.parametrize(("stack", "cloud", "fix"), [
    ("aws-p5", "aws", "set 1.35, or set aws.long_term_support: true (EKS extended support"),
    ("azure-ndv5", "azure", "set 1.35, or set azure.long_term_support: true (AKS long-term support"),
])
def test_version_out_of_standard_support_is_refused_with_the_fix(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stack: str, cloud: str, fix: str) -> None:
    monkeypatch.setenv("GPUFLEET_TODAY", "2026-12-04")
    name = _variant(tmp_path, stack, cloud, kubernetes_version="1.33")
    with pytest.raises(ConfigError) as e:
        load_spec(name, tmp_path)
    (problem,) = e.value.problems
    assert (problem.key, problem.value) == (f"gpufleet:{cloud}.kubernetes_version", "1.33")
    assert "out of standard support since" in problem.rule and "https://" in problem.rule
    assert problem.fix.startswith(fix)
    # Opting into the cloud's long-term support accepts it while that window is open ...
    load_spec(_variant(tmp_path, stack, cloud, kubernetes_version="1.33", long_term_support=True), tmp_path)
    # ... and not after it.
    monkeypatch.setenv("GPUFLEET_TODAY", "2027-08-01")
    with pytest.raises(ConfigError):
        load_spec(name, tmp_path)


def test_unknown_version_names_the_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_TODAY", "2026-12-04")
    with pytest.raises(ConfigError) as e:
        load_spec(_variant(tmp_path, "aws-p5", "aws", kubernetes_version="1.29"), tmp_path)
    assert "gpufleet/catalog/kubernetes.yaml" in e.value.problems[0].fix


def test_aks_pool_image_must_match_the_versions_node_os(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_TODAY", "2026-12-04")
    doc = yaml.safe_load((STACKS_DIR / "Pulumi.azure-ndv5.yaml").read_text())
    next(p for p in doc["config"]["gpufleet:pools"] if p["role"] == "gpu")["image"] = "Ubuntu2204"
    (tmp_path / "Pulumi.azure-img.yaml").write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as e:
        load_spec("azure-img", tmp_path)
    assert e.value.problems[0].fix == "set image: Ubuntu2404 (or remove image)"


def test_bundled_cloud_stacks_are_in_standard_support_on_the_catalogs_date(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_TODAY", "2026-12-04")
    for stack, cloud in (("aws-p5", "aws"), ("azure-ndv5", "azure")):
        spec = load_spec(stack)
        version = getattr(spec, cloud).kubernetes_version
        assert kv.support(cloud, version, kv.today()).status == "standard"  # type: ignore[union-attr]
