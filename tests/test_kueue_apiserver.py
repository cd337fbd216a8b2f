"""The platform's Kueue objects and its own objects applied to a real kube-apiserver (../shared/k8s).

Server-side apply with strict field validation, after the pinned CRDs: the Kueue CRDs' CEL rules
(``x-kubernetes-validations``) are evaluated, unknown fields are rejected, defaulting runs. Pods of the taint
Jobs are created with ``dryRun=All`` so Pod Security admission judges them. One API server (and one etcd) per
module: starting it takes 10-20 s. See /work/shared/k8s/README.md for how it is started.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet.infra import kueue, manifests, values
from gpufleet.lock import Lock, resolve_lock
from gpufleet.monitoring.rules import render_prometheus_rule
from gpufleet.spec import ClusterSpec, load_spec
from tests.apiserver import SKIP_REASON, UPSTREAM, Api, ApiError, NotReady, running_apiserver

KUEUE_CRDS = UPSTREAM / "kueue-v0.19.2" / "crds"
OTHER_CRDS = [UPSTREAM / "kube-prometheus-stack-88.5.3" / "crds" / "crd-prometheusrules.yaml",
              UPSTREAM / "network-operator-v25.7.0" / "crds" / "mellanox.com_nicclusterpolicies.yaml"]
STACKS = ["onprem-h100", "aws-p5", "gcp-a3mega", "azure-ndv5"]

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    try:
        with running_apiserver(tmp_path_factory.mktemp("apiserver")) as client:
            crds = [*sorted(KUEUE_CRDS.glob("*.yaml")), *OTHER_CRDS]
            for f in crds:
                client.apply(yaml.safe_load(f.read_text()))
            for f in crds:
                name = yaml.safe_load(f.read_text())["metadata"]["name"]
                crd = {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                       "metadata": {"name": name}}
                while not any(c["type"] == "Established" and c["status"] == "True"
                              for c in client.get(crd).get("status", {}).get("conditions", [])):
                    time.sleep(0.2)
            yield client
    except NotReady as e:
        pytest.fail(str(e))


def _stack(name: str) -> tuple[ClusterSpec, Lock]:
    spec = load_spec(name)
    return spec, resolve_lock(spec)


@pytest.mark.parametrize("stack", STACKS)
def test_kueue_objects_are_accepted_and_stored_as_rendered(api: Api, stack: str) -> None:
    spec, _ = _stack(stack)
    for ns in manifests.platform_namespaces(spec):
        api.apply(ns)
    objs = kueue.kueue_objects(spec)
    assert {o["kind"] for o in objs} == {"Topology", "ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue",
                                         "LocalQueue"}
    for obj in objs:
        api.apply(obj)
    cq = api.get(kueue.cluster_queue(spec))
    stored = {f["name"]: {r["name"]: r["nominalQuota"] for r in f["resources"]}
              for f in cq["spec"]["resourceGroups"][0]["flavors"]}
    assert set(stored) == {p.name for p in spec.gpu_pools}
    for row in kueue.plan_rows(spec):
        assert stored[row["pool"]] == row["quota"]
        topo = api.get(kueue.topology(spec, next(p for p in spec.gpu_pools if p.name == row["pool"])))
        assert [lv["nodeLabel"] for lv in topo["spec"]["levels"]] == row["topology_levels"]
    for lq in kueue.local_queues(spec):
        assert api.get(lq)["spec"]["clusterQueue"] == spec.cluster_name
        # Every stack's LocalQueue is training/gpu, and its clusterQueue is immutable: the next stack's
        # test starts without it.
        api.delete(lq)


def test_a_typo_and_a_broken_cel_rule_are_refused(api: Api) -> None:
    spec, _ = _stack("onprem-h100")
    cq = kueue.cluster_queue(spec)
    typo = json.loads(json.dumps(cq))
    flavor = typo["spec"]["resourceGroups"][0]["flavors"][0]
    flavor["resources"][0]["nominalQuotas"] = flavor["resources"][0].pop("nominalQuota")
    with pytest.raises(ApiError) as e:
        api.apply(typo)
    assert 'resources[name="cpu"].nominalQuotas: field not declared in schema' in e.value.body["message"]
    short = json.loads(json.dumps(cq))
    short["metadata"]["name"] = "cel-check"
    short["spec"]["resourceGroups"][0]["flavors"][0]["resources"].pop()
    with pytest.raises(ApiError) as e:
        api.apply(short)
    assert "flavors must have the same number of resources as the coveredResources" in e.value.body["message"]


def test_platform_objects_are_accepted(api: Api) -> None:
    """Namespaces, PriorityClasses, node label patches of existing nodes, the taint RBAC, the PrometheusRule
    and the NicClusterPolicy (with their CRDs), and the taint Jobs' Pods under the namespace's Pod Security."""
    spec, lock = _stack("onprem-h100")
    for obj in [*manifests.platform_namespaces(spec), *manifests.priority_classes(), *manifests.taint_rbac(),
                manifests.taint_script_configmap()]:
        api.apply(obj)
    for pool in spec.pools:
        for host in pool.hosts:
            # Nodes are the kubelet's: registered first (a bare Node here), then the program's label patch.
            api.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": host.name}})
            patch = manifests.node_patch(pool, host)
            got = api.apply(patch)["metadata"]["labels"]
            assert {k: got[k] for k in patch["metadata"]["labels"]} == patch["metadata"]["labels"]
    rule = render_prometheus_rule(namespace="monitoring")
    api.apply(rule)
    api.apply(values.nic_cluster_policy(spec, lock))
    gpufleet_ns = next(n for n in manifests.platform_namespaces(spec) if n["metadata"]["name"] == "gpufleet")
    assert gpufleet_ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    for pool in spec.gpu_pools:
        job = manifests.taint_job(pool, list(pool.hosts))
        assert job is not None
        api.apply(job)
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": f"{job['metadata']['name']}-probe", "namespace": job["metadata"]["namespace"]},
               "spec": job["spec"]["template"]["spec"]}
        # Pod Security "restricted" is enforced in the namespace: a violation would be a 403 here.
        api.dry_run_create(pod)
    bad = {**pod, "spec": {**pod["spec"], "securityContext": {}}}
    bad["spec"]["containers"] = [{**c, "securityContext": {}} for c in pod["spec"]["containers"]]
    with pytest.raises(ApiError) as e:
        api.dry_run_create(bad)
    assert e.value.code == 403 and "violates PodSecurity" in e.value.body["message"]


def test_drift_cronjob_pod_with_its_init_container_is_admitted(api: Api) -> None:
    """Issue 30 point 5 (b): the drift CronJob's Pod, init container (root with CHOWN and FOWNER) and hostPath
    included, is admitted in the gpufleet namespace at the level the program gives it when drift is on, and
    refused at the restricted level it has without drift."""
    from gpufleet.spec import Drift

    spec = load_spec("onprem-h100")
    with_drift = spec.model_copy(update={"drift": Drift(image="registry.example.com/gpufleet:0.1.0")})
    for obj in [*manifests.platform_namespaces(with_drift), *manifests.drift_objects(with_drift)]:
        api.apply(obj)
    cron = next(o for o in manifests.drift_objects(with_drift) if o["kind"] == "CronJob")
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "drift-probe", "namespace": cron["metadata"]["namespace"]},
           "spec": cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]}
    stored = api.dry_run_create(pod)
    assert [c["name"] for c in stored["spec"]["initContainers"]] == ["textfile-dir"]
    try:
        for ns in manifests.platform_namespaces(spec):  # back to restricted: the Pod is refused
            api.apply(ns)
        with pytest.raises(ApiError) as e:
            api.dry_run_create(pod)
        assert e.value.code == 403 and "violates PodSecurity" in e.value.body["message"]
    finally:
        for ns in manifests.platform_namespaces(spec):
            api.apply(ns)


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="the program lists Nodes with kubectl")
def test_label_patches_of_absent_nodes_create_nothing(api: Api, tmp_path: Path) -> None:
    """Issue 30 point 5 (c): the program lists the cluster's Nodes through the stack's kubeconfig (kubectl, as
    in ``gpufleet up``) and declares label patches for registered hosts only; applying every NodePatch it
    declared (server-side, as the provider does) leaves the absent hosts absent instead of creating bare Nodes."""
    from gpufleet.infra.offline import evaluate
    from gpufleet.infra.registered_nodes import registered_nodes_of

    spec, lock = _stack("onprem-h100")
    absent = {"sys-0", "gpu-a-1"}
    for host in (h for p in spec.pools for h in p.hosts):
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": host.name}}
        if host.name in absent:
            try:
                api.delete(node)
            except ApiError as e:
                assert e.code == 404
        else:
            try:
                api.call("POST", "/api/v1/nodes", node)
            except ApiError as e:
                assert e.code == 409
    kubeconfig = yaml.safe_dump(api.kubeconfig())
    registered = registered_nodes_of(spec, kubeconfig)
    hosts = {h.name for p in spec.pools for h in p.hosts}
    assert registered & hosts == hosts - absent
    plan = evaluate(spec, lock, registered_nodes=registered)
    patches = [r.inputs for r in plan.of_type("kubernetes:core/v1:NodePatch")]
    assert sorted(p["metadata"]["name"] for p in patches) == sorted(hosts - absent)
    for name in sorted(absent):
        assert any(w.startswith(f"node {name} (pool ") and "not registered" in w for w in plan.warnings)
    for patch in patches:
        api.apply({"apiVersion": "v1", "kind": "Node", **patch})
    for name in absent:
        with pytest.raises(ApiError) as e:
            api.get({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
        assert e.value.code == 404
    # What the old program did: the same patch for an absent host creates a bare Node with our labels and
    # without the pool's GPU taint (only the API server's own not-ready taint).
    pool = next(p for p in spec.pools if p.name == "h100-a")
    host = next(h for h in pool.hosts if h.name == "gpu-a-1")
    created = api.apply(manifests.node_patch(pool, host))
    assert created["metadata"]["name"] == "gpu-a-1"
    assert "nvidia.com/gpu" not in [t["key"] for t in created["spec"].get("taints", [])]
    api.delete(created)


def _workload_objects(api: Api) -> tuple[ClusterSpec, dict[str, int]]:
    """The on-prem stack's namespaces and Kueue objects on the server (the doc example and bench jobs are its)."""
    spec, _ = _stack("onprem-h100")
    for obj in [*manifests.platform_namespaces(spec), *kueue.kueue_objects(spec)]:
        api.apply(obj)
    return spec, {w["metadata"]["name"]: w["value"] for w in kueue.workload_priority_classes()}


def _resolve_level(api: Api, workload: dict[str, Any], level: str) -> list[str]:
    """Follow the stored objects from the Workload's queue to the Topology of each flavor that offers GPUs, and
    return the flavors whose Topology has ``level``."""
    ns = workload["metadata"]["namespace"]
    lq = api.get({"apiVersion": kueue.API, "kind": "LocalQueue",
                  "metadata": {"name": workload["spec"]["queueName"], "namespace": ns}})
    cq = api.get({"apiVersion": kueue.API, "kind": "ClusterQueue", "metadata": {"name": lq["spec"]["clusterQueue"]}})
    assert ns in cq["spec"]["namespaceSelector"]["matchExpressions"][0]["values"]
    found = []
    for flavor in cq["spec"]["resourceGroups"][0]["flavors"]:
        rf = api.get({"apiVersion": kueue.API, "kind": "ResourceFlavor", "metadata": {"name": flavor["name"]}})
        topo = api.get({"apiVersion": kueue.API, "kind": "Topology", "metadata": {"name": rf["spec"]["topologyName"]}})
        if level in [lv["nodeLabel"] for lv in topo["spec"]["levels"]]:
            found.append(flavor["name"])
    return found


def test_doc_training_job_and_its_workload_are_accepted(api: Api) -> None:
    """Issue 30 point 4: docs/scheduling.md's training Job is accepted by the API server (dry run, strict), and the
    Workload Kueue builds from it (tests/kueue_workload.py) is stored under the pinned Workload CRD, CEL rules
    evaluated, with its pod set's topology request; its queue resolves through the stored LocalQueue and
    ClusterQueue to flavors whose Topology has the requested level. Kueue's controller does not run here: that it
    creates this Workload, admits it and places the pods is not proven (docs/scheduling.md)."""
    from tests.kueue_workload import JOB_INDEX_LABEL, workload_of
    from tests.test_kueue_jobs import doc_training_job

    spec, prio = _workload_objects(api)
    job = doc_training_job()
    try:
        stored_job = api.dry_run_create(job)
        assert stored_job["spec"]["suspend"] is True
        assert stored_job["metadata"]["labels"][kueue.QUEUE_LABEL] == kueue.LOCAL_QUEUE
        workload = workload_of(job, prio)
        stored = api.apply(workload)["spec"]
        level = job["spec"]["template"]["metadata"]["annotations"][kueue.PREFERRED_TOPOLOGY]
        assert stored["podSets"][0]["topologyRequest"] == {"preferred": level, "podIndexLabel": JOB_INDEX_LABEL}
        assert stored["podSets"][0]["count"] == 2 and stored["priority"] == prio["gpufleet-training"]
        assert _resolve_level(api, workload, level) == [p.name for p in spec.gpu_pools]
        # The CRD's CEL rules run on it: a priority class without its value, a minCount above the count.
        bad = json.loads(json.dumps(workload))
        bad["metadata"]["name"] += "-cel"
        del bad["spec"]["priority"]
        with pytest.raises(ApiError) as e:
            api.apply(bad)
        assert "priority should not be nil when priorityClassRef is set" in e.value.body["message"]
        bad["spec"]["priority"] = 1
        bad["spec"]["podSets"][0]["minCount"] = 3
        with pytest.raises(ApiError) as e:
            api.apply(bad)
        assert "minCount should be positive and less or equal to count" in e.value.body["message"]
    finally:
        for lq in kueue.local_queues(spec):
            api.delete(lq)


def test_bench_pair_workload_is_accepted_with_the_workers_topology_request(api: Api, tmp_path: Path) -> None:
    """The nccl-tests pair job (MPIJob) of the on-prem stack: its Workload (launcher and worker pod sets) is stored,
    the workers' topology request at the leaf switch, the queue resolving to flavors whose Topology has it. The
    MPIJob itself is not applied: no MPIJob CRD is pinned here."""
    from typer.testing import CliRunner

    from gpufleet.cli.validate import app
    from tests.kueue_workload import MPI_INDEX_LABEL, workload_of

    spec, prio = _workload_objects(api)
    try:
        r = CliRunner().invoke(app, ["bench-render", "--stack", "onprem-h100", "--out", str(tmp_path)])
        assert r.exit_code == 0, r.output
        pair = yaml.safe_load((tmp_path / "kubernetes" / "nccl-pair-gpu-a-0-gpu-a-1.yaml").read_text())
        workload = workload_of(pair, prio)
        stored = {ps["name"]: ps for ps in api.apply(workload)["spec"]["podSets"]}
        level = kueue.placement_level(spec, spec.gpu_pools[0])[1]
        assert stored["worker"]["count"] == 2
        assert stored["worker"]["topologyRequest"] == {"preferred": level, "podIndexLabel": MPI_INDEX_LABEL}
        assert "topologyRequest" not in stored["launcher"]
        assert _resolve_level(api, workload, level) == [p.name for p in spec.gpu_pools]
    finally:
        for lq in kueue.local_queues(spec):
            api.delete(lq)
