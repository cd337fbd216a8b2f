"""Issue 30 point 4, offline: the jobs that use Kueue. The nccl-tests templates of ``gpufleet bench`` (every example
stack) and the training-job example of docs/scheduling.md carry the queue label and the topology annotation, the
queue is a LocalQueue the stack renders in the job's namespace, the annotation's level is a level of the pool's
Topology (the one the stack names), the job fits one flavor's quota whole, and the Workload Kueue would build from
it validates against the pinned Workload CRD (tests/kueue_workload.py). The real API server checks are in
tests/test_kueue_apiserver.py."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.infra import kueue
from gpufleet.spec import ClusterSpec, NodePool, load_spec
from gpufleet.validation.bench import validate_manifest
from tests.kueue_workload import JOB_INDEX_LABEL, MPI_INDEX_LABEL, workload_of

KUEUE = REPO_ROOT.parent / "shared" / "upstream" / "kueue-v0.19.2"
WORKLOAD_CRD = KUEUE / "crds" / "kueue.x-k8s.io_workloads.yaml"
needs_upstream = pytest.mark.skipif(not KUEUE.is_dir(), reason=f"upstream reference data absent: {KUEUE}")
STACKS = ["onprem-h100", "aws-p5", "gcp-a3mega", "azure-ndv5"]
DOC = REPO_ROOT / "docs" / "scheduling.md"
#: The stack the documented example is written for (its topology label is the on-prem one).
DOC_STACK = "onprem-h100"


def doc_training_job(text: str | None = None) -> dict[str, Any]:
    """The one YAML block of docs/scheduling.md's "A training job" section."""
    text = DOC.read_text() if text is None else text
    section = re.search(r"^## A training job\n(.*?)(?=^## )", text, flags=re.M | re.S)
    assert section is not None, f"{DOC}: no '## A training job' section"
    blocks = re.findall(r"^```yaml\n(.*?)^```", section.group(1), flags=re.M | re.S)
    assert len(blocks) == 1, f"{DOC}: 'A training job' holds {len(blocks)} YAML blocks, expected one"
    job: dict[str, Any] = yaml.safe_load(blocks[0])
    return job


@functools.cache
def _workload_validator() -> Any:
    import jsonschema  # type: ignore[import-untyped]

    from gpufleet.infra.upstream_check import crd_schema

    return jsonschema.Draft7Validator(crd_schema(WORKLOAD_CRD, kueue.API.rsplit("/", 1)[-1]))


def workload_errors(workload: dict[str, Any]) -> list[str]:
    """crd_errors against the pinned Workload CRD, its schema read once (the file is large)."""
    return sorted(f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
                  for e in _workload_validator().iter_errors(workload))


def priorities() -> dict[str, int]:
    return {w["metadata"]["name"]: w["value"] for w in kueue.workload_priority_classes()}


def topology_request_of(template: dict[str, Any]) -> tuple[str, str]:
    """(annotation key, level label) of a pod template: exactly one of required/preferred."""
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    keys = [k for k in (kueue.REQUIRED_TOPOLOGY, kueue.PREFERRED_TOPOLOGY) if k in annotations]
    assert len(keys) == 1, f"pod template annotations {annotations}: expected one Kueue topology annotation"
    return keys[0], annotations[keys[0]]


def local_queues(spec: ClusterSpec) -> set[tuple[str, str]]:
    return {(q["metadata"]["namespace"], q["metadata"]["name"]) for q in kueue.local_queues(spec)}


def topology_labels(spec: ClusterSpec, pool: NodePool) -> list[str]:
    return [lv["nodeLabel"] for lv in kueue.topology(spec, pool)["spec"]["levels"]]


def gpu_quota(spec: ClusterSpec, pool: NodePool) -> int:
    flavor = next(f for f in kueue.cluster_queue(spec)["spec"]["resourceGroups"][0]["flavors"]
                  if f["name"] == pool.name)
    return int(next(r["nominalQuota"] for r in flavor["resources"] if r["name"] == kueue.GPU_RESOURCE))


def requested_resources(workload: dict[str, Any]) -> set[str]:
    """Resource names the pod sets request (limits stand for requests where none are given)."""
    return {name for ps in workload["spec"]["podSets"] for c in ps["template"]["spec"]["containers"]
            for part in ("requests", "limits") for name in ((c.get("resources") or {}).get(part) or {})}


def covered(spec: ClusterSpec) -> set[str]:
    # Kueue finds no flavor for a pod set requesting a resource its ClusterQueue does not cover ("resource ...
    # unavailable in ClusterQueue", kubernetes-sigs/kueue pkg/scheduler/flavorassigner): the job is never admitted.
    return set(kueue.cluster_queue(spec)["spec"]["resourceGroups"][0]["coveredResources"])


def workload_gpus(workload: dict[str, Any]) -> int:
    return sum(ps["count"] * sum(int((c.get("resources") or {}).get("limits", {}).get(kueue.GPU_RESOURCE, 0))
                                 for c in ps["template"]["spec"]["containers"])
               for ps in workload["spec"]["podSets"])


def test_doc_example_is_extracted_and_a_missing_one_is_reported() -> None:
    assert doc_training_job()["kind"] == "Job"
    with pytest.raises(AssertionError, match="no '## A training job' section"):
        doc_training_job("# Scheduling\n\n## Other\n")


@needs_upstream
def test_doc_training_job_is_valid_and_names_the_stacks_queue_priority_and_level() -> None:
    spec = load_spec(DOC_STACK)
    job = doc_training_job()
    assert validate_manifest(job) == []
    labels = job["metadata"]["labels"]
    assert (job["metadata"]["namespace"], labels[kueue.QUEUE_LABEL]) in local_queues(spec)
    assert labels[kueue.PRIORITY_LABEL] in priorities()
    # Kueue admits a suspended Job only (it unsuspends it once the whole job is admitted).
    assert job["spec"]["suspend"] is True
    key, level = topology_request_of(job["spec"]["template"])
    assert key == (kueue.REQUIRED_TOPOLOGY if spec.scheduling.topology_mode == "required"
                   else kueue.PREFERRED_TOPOLOGY)
    workload = workload_of(job, priorities())
    for pool in spec.gpu_pools:
        # The level gpufleet names for the pool (gpufleet plan's placement), one of its Topology's levels.
        assert level == kueue.placement_level(spec, pool)[1]
        assert level in topology_labels(spec, pool)
        # Admitted whole: the job's GPUs fit one flavor's quota, and it asks for nothing the queue lacks.
        assert workload_gpus(workload) <= gpu_quota(spec, pool)
        assert requested_resources(workload) <= covered(spec)
    assert workload_errors(workload) == []
    assert workload["spec"]["podSets"][0]["topologyRequest"] == {"preferred": level, "podIndexLabel": JOB_INDEX_LABEL}


def _bench(stack: str, out: Path) -> dict[str, dict[str, Any]]:
    from typer.testing import CliRunner

    from gpufleet.cli.validate import app

    r = CliRunner().invoke(app, ["bench-render", "--stack", stack, "--out", str(out)])
    assert r.exit_code == 0, r.output
    return {p.stem: yaml.safe_load(p.read_text()) for p in sorted((out / "kubernetes").glob("*.yaml"))}


def _pool_of(spec: ClusterSpec, job: dict[str, Any]) -> NodePool:
    if job["kind"] == "Job":
        nodes = [job["spec"]["template"]["spec"]["nodeSelector"]["kubernetes.io/hostname"]]
    else:
        worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        nodes = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"][0]["matchExpressions"][0]["values"]
    for pool in spec.gpu_pools:
        names = [h.name for h in pool.hosts] or [f"{pool.name}-{i}" for i in range(pool.size)]
        if set(nodes) <= set(names):
            return pool
    raise AssertionError(f"{job['metadata']['name']}: nodes {nodes} are in no GPU pool")


@needs_upstream
@pytest.mark.parametrize("stack", STACKS)
def test_bench_jobs_carry_queue_and_the_pools_topology_level(stack: str, tmp_path: Path) -> None:
    """Every nccl-tests job of every stack: queue label naming a LocalQueue of its namespace, the GPU pods'
    annotation at the pool's placement level (a level of the pool's Topology), the pair job's Workload whole in one
    flavor's GPU quota with its worker pod set's topology request."""
    spec = load_spec(stack)
    jobs = _bench(stack, tmp_path)
    pairs = [j for j in jobs.values() if j["kind"] == "MPIJob"]
    assert pairs and len(pairs) < len(jobs), sorted(jobs)
    mode = kueue.REQUIRED_TOPOLOGY if spec.scheduling.topology_mode == "required" else kueue.PREFERRED_TOPOLOGY
    for name, job in jobs.items():
        pool = _pool_of(spec, job)
        labels = job["metadata"]["labels"]
        assert (job["metadata"]["namespace"], labels[kueue.QUEUE_LABEL]) in local_queues(spec), name
        assert labels[kueue.PRIORITY_LABEL] in priorities(), name
        gpu_template = (job["spec"]["template"] if job["kind"] == "Job"
                        else job["spec"]["mpiReplicaSpecs"]["Worker"]["template"])
        key, level = topology_request_of(gpu_template)
        assert (key, level) == (mode, kueue.placement_level(spec, pool)[1]), name
        assert level in topology_labels(spec, pool), name
        workload = workload_of(job, priorities())
        assert workload_errors(workload) == [], name
        assert workload_gpus(workload) <= gpu_quota(spec, pool), name
        assert requested_resources(workload) <= covered(spec), name
        if job["kind"] == "MPIJob":
            sets = {ps["name"]: ps for ps in workload["spec"]["podSets"]}
            assert sets["worker"]["count"] == 2
            field = "required" if mode == kueue.REQUIRED_TOPOLOGY else "preferred"
            assert sets["worker"]["topologyRequest"] == {field: level, "podIndexLabel": MPI_INDEX_LABEL}
            # The launcher holds no GPU and asks for no placement: only the ranks are kept under one domain.
            assert "topologyRequest" not in sets["launcher"]


@needs_upstream
def test_a_typo_in_the_topology_annotation_is_caught() -> None:
    """The checks above fail on a misspelt annotation: Kueue would build no topology request from it."""
    job = doc_training_job()
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    level = annotations.pop(kueue.PREFERRED_TOPOLOGY)
    annotations["kueue.x-k8s.io/podset-prefered-topology"] = level
    with pytest.raises(AssertionError, match="expected one Kueue topology annotation"):
        topology_request_of(job["spec"]["template"])
    assert "topologyRequest" not in workload_of(job, priorities())["spec"]["podSets"][0]
