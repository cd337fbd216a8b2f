"""Issue 14's platform layer, evaluated offline with the public Pulumi mocks: ownership of taints, install
order (CRD consumers after their providers), namespaces and Pod Security, the monitoring component against
the pinned kube-prometheus-stack / Prometheus Operator / Network Operator data, the drift CronJob's
hardening, and a property test over generated stacks: every GPU-node DaemonSet tolerates every GPU taint."""

from __future__ import annotations

import copy
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpufleet import REPO_ROOT
from gpufleet.catalog.charts import CHARTS, IMAGES
from gpufleet.drift.metrics import DEFAULT_TEXTFILE
from gpufleet.infra import health_watch, kueue, manifests, values
from gpufleet.infra.offline import OfflinePlan, PlannedResource, evaluate
from gpufleet.infra.scheduling import gpu_node_tolerations, node_taints
from gpufleet.infra.upstream_check import crd_errors, unknown_value_keys
from gpufleet.lock import resolve_lock
from gpufleet.spec import ClusterSpec, Drift, HealthWatch, Monitoring, NodePool, Taint, load_spec
from gpufleet.validation.health import NodeAction, taint_for
from gpufleet.validation.xid import HEALTH_TAINT_KEY

UPSTREAM = REPO_ROOT.parent / "shared" / "upstream"
KPS = UPSTREAM / "kube-prometheus-stack-88.5.3"
NETOP = UPSTREAM / "network-operator-v25.7.0"
needs_upstream = pytest.mark.skipif(not UPSTREAM.is_dir(), reason=f"upstream reference data absent: {UPSTREAM}")
RELEASE = "kubernetes:helm.sh/v3:Release"
IMAGE = "registry.example.com/gpufleet:0.1.0"


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


@pytest.fixture(scope="module")
def onprem_spec() -> ClusterSpec:
    spec = load_spec("onprem-h100")
    return spec.model_copy(update={"drift": Drift(image=IMAGE)})


@pytest.fixture(scope="module")
def onprem(onprem_spec: ClusterSpec) -> OfflinePlan:
    return evaluate(onprem_spec, resolve_lock(onprem_spec))


def _release(plan: OfflinePlan, chart: str) -> PlannedResource:
    return next(r for r in plan.of_type(RELEASE) if r.inputs["chart"] == chart)


def _objects(plan: OfflinePlan) -> list[PlannedResource]:
    return [r for r in plan.resources if r.custom and r.inputs.get("metadata")]


# --- taints ------------------------------------------------------------------------------------------


def test_no_resource_patches_spec_taints(onprem: OfflinePlan) -> None:
    for r in onprem.resources:
        if r.type.endswith("Patch"):
            assert "taints" not in (r.inputs.get("spec") or {}), r.name


# --- install order -----------------------------------------------------------------------------------


def test_every_crd_consumer_depends_on_its_provider(onprem: OfflinePlan) -> None:
    kps, gpu_op, net_op = (_release(onprem, c) for c in ("kube-prometheus-stack", "gpu-operator", "network-operator"))
    # kind of custom resource -> the release installing its CRD
    providers = {"PrometheusRule": kps, "ServiceMonitor": kps, "NicClusterPolicy": net_op,
                 "NVIDIADriver": gpu_op, "ClusterPolicy": gpu_op}
    consumers = [r for r in onprem.resources if r.inputs.get("kind") in providers]
    assert {r.inputs["kind"] for r in consumers} >= {"PrometheusRule", "NicClusterPolicy"}
    for r in consumers:
        assert providers[r.inputs["kind"]].urn in onprem.depends(r), r.name
    # Releases whose templates hold CRD consumers: the operator's dcgm-exporter ServiceMonitor needs the
    # Prometheus Operator CRDs; the Network Operator's NodeFeatureRule needs the NFD CRDs of gpu-operator.
    assert kps.urn in onprem.depends(gpu_op)
    assert gpu_op.urn in onprem.depends(net_op)


def test_standalone_exporter_waits_for_the_servicemonitor_crd(onprem_spec: ClusterSpec) -> None:
    plan = evaluate(onprem_spec, resolve_lock(onprem_spec), operator_dcgm_exporter=False)
    assert _release(plan, "kube-prometheus-stack").urn in plan.depends(_release(plan, "dcgm-exporter"))


def test_breaking_an_edge_is_caught(onprem: OfflinePlan) -> None:
    """The dependency check is not vacuous: drop the edge and it fails."""
    net_op = copy.deepcopy(_release(onprem, "network-operator"))
    net_op.depends_on = [u for u in net_op.depends_on if not u.endswith("::gpu-operator")]
    plan = OfflinePlan(onprem.stack, [net_op if r.urn == net_op.urn else r for r in onprem.resources], {})
    assert _release(onprem, "gpu-operator").urn not in plan.depends(net_op)


# --- namespaces and Pod Security ---------------------------------------------------------------------


def test_every_namespace_used_is_created_or_declared_external(onprem: OfflinePlan,
                                                             onprem_spec: ClusterSpec) -> None:
    created = {r.inputs["metadata"]["name"] for r in onprem.of_type("kubernetes:core/v1:Namespace")}
    used = {r.inputs["metadata"]["namespace"] for r in _objects(onprem) if r.inputs["metadata"].get("namespace")}
    used |= {r.inputs["namespace"] for r in onprem.of_type(RELEASE)}
    assert used - created <= manifests.external_namespaces(onprem_spec)
    assert "gpufleet" in created  # the drift CronJob's and the taint Jobs' namespace


def test_every_namespace_carries_a_pod_security_level(onprem: OfflinePlan) -> None:
    levels = {}
    for r in [*onprem.of_type("kubernetes:core/v1:Namespace"), *onprem.of_type("kubernetes:core/v1:NamespacePatch")]:
        labels = r.inputs["metadata"]["labels"]
        levels[r.inputs["metadata"]["name"]] = (labels.get("pod-security.kubernetes.io/enforce"),
                                                labels["pod-security.kubernetes.io/warn"])
    assert levels == {
        "gpu-operator": ("privileged", "privileged"),
        "monitoring": ("privileged", "privileged"),
        "nvidia-network-operator": ("privileged", "privileged"),
        "lustre-csi-system": ("privileged", "privileged"),
        # Kueue's controller meets restricted (non-root, RuntimeDefault seccomp, no capabilities)
        "kueue-system": ("restricted", "restricted"),
        # hostPath for the drift textfile: baseline would refuse the CronJob's pods
        "gpufleet": ("privileged", "privileged"),
        # workloads: restricted, warn (and audit) only unless the stack enforces it
        "training": (None, "restricted"),
    }


def test_workload_pod_security_is_the_stacks_choice(onprem_spec: ClusterSpec) -> None:
    spec = onprem_spec.model_copy(update={"pod_security": onprem_spec.pod_security.model_copy(
        update={"level": "baseline", "enforce": True}), "drift": None})
    ns = {o["metadata"]["name"]: o["metadata"]["labels"] for o in manifests.platform_namespaces(spec)}
    assert ns["training"]["pod-security.kubernetes.io/enforce"] == "baseline"
    assert ns["gpufleet"]["pod-security.kubernetes.io/enforce"] == "restricted"


# --- the drift CronJob (issue 12 point 7) ------------------------------------------------------------


def test_drift_cronjob_is_hardened(onprem: OfflinePlan) -> None:
    cron = onprem.of_type("kubernetes:batch/v1:CronJob")[0].inputs
    sa = next(r.inputs for r in onprem.of_type("kubernetes:core/v1:ServiceAccount")
              if r.inputs["metadata"]["name"] == "gpufleet-drift")
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "gpufleet-drift" and sa["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is False
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] != 0
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "GPUFLEET_STACK", "value": "onprem-h100"} in container["env"]
    secrets = {v["secret"]["secretName"] for v in pod["volumes"] if "secret" in v}
    assert secrets == {"gpufleet-ssh", "gpufleet-ssh-known-hosts"}
    ssh_args = next(e["value"] for e in container["env"] if e["name"] == "ANSIBLE_SSH_ARGS")
    assert "StrictHostKeyChecking=yes" in ssh_args and "/etc/gpufleet/known_hosts/known_hosts" in ssh_args
    assert pod["nodeSelector"] == {"gpufleet.io/role": "system", "gpufleet.io/drift-metrics": "true"}
    assert pod["tolerations"] == [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                                   "effect": "NoSchedule"}]
    # The node the CronJob is pinned to exists: the program labels the first system host.
    labelled = [r.inputs["metadata"]["name"] for r in onprem.of_type("kubernetes:core/v1:NodePatch")
                if r.inputs["metadata"]["labels"].get("gpufleet.io/drift-metrics") == "true"]
    assert labelled == ["sys-0"]
    for obj in manifests.drift_objects(load_spec("onprem-h100").model_copy(update={"drift": Drift(image=IMAGE)})):
        kubernetes_validate.validate(obj, manifests.K8S_SCHEMA_VERSION, strict=True)


def test_drift_cronjob_file_pins_no_image_and_writes_where_node_exporter_reads() -> None:
    text = manifests.CRONJOB_FILE.read_text()
    assert ":latest" not in text and f"image: {manifests.DRIFT_IMAGE_PLACEHOLDER}" in text
    cron = yaml.safe_load(text)
    host_paths = [v["hostPath"]["path"] for v in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["volumes"]
                  if "hostPath" in v]
    kps = values.kube_prometheus_stack_values(load_spec("onprem-h100"))
    mounts = kps["prometheus-node-exporter"]["extraHostVolumeMounts"]
    assert host_paths == [m["hostPath"] for m in mounts]


def _drift_pod(spec: ClusterSpec) -> dict[str, Any]:
    cron = next(o for o in manifests.drift_objects(spec) if o["kind"] == "CronJob")
    pod: dict[str, Any] = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    return pod


def test_drift_cronjob_makes_its_textfile_directory_writable(onprem_spec: ClusterSpec) -> None:
    """Issue 30 point 5 (b): nothing else creates node_exporter's textfile directory or gives uid/gid 65532
    write access to it; the hostPath creates it when missing and an init container of the same image makes it
    group-writable for gid 65532, as root with CHOWN and FOWNER only."""
    pod = _drift_pod(onprem_spec)
    (volume,) = [v for v in pod["volumes"] if v["name"] == "textfile"]
    assert volume["hostPath"] == {"path": str(DEFAULT_TEXTFILE.parent), "type": "DirectoryOrCreate"}
    (init,) = pod["initContainers"]
    (drift,) = pod["containers"]
    assert init["image"] == drift["image"] == IMAGE
    assert init["volumeMounts"] == [{"name": "textfile", "mountPath": "/textfile"}]
    assert init["securityContext"] == {
        "runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False, "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True, "capabilities": {"drop": ["ALL"], "add": ["CHOWN", "FOWNER"]}}
    assert pod["securityContext"]["runAsGroup"] == 65532
    # The namespace admits it (a hostPath and a root container need the privileged level).
    ns = next(n for n in manifests.platform_namespaces(onprem_spec) if n["metadata"]["name"] == "gpufleet")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    kubernetes_validate.validate(next(o for o in manifests.drift_objects(onprem_spec) if o["kind"] == "CronJob"),
                                 manifests.K8S_SCHEMA_VERSION, strict=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="chgrp to gid 65532 needs root")
def test_drift_init_script_gives_the_group_write_and_keeps_the_rest(onprem_spec: ClusterSpec,
                                                                     tmp_path: Path) -> None:
    """The init container's own script, run on a directory as the kubelet makes it (root:root 0755) and on one
    that already has a sticky bit: group 65532 with rwx, owner and other bits unchanged, and again is the same."""
    (init,) = _drift_pod(onprem_spec)["initContainers"]
    assert init["command"] == [".venv/bin/python", "-c"]
    for mode in (0o755, 0o1755):
        d = tmp_path / f"textfile-{mode:o}"
        d.mkdir()
        os.chown(d, 0, 0)
        d.chmod(mode)
        script = init["args"][0].replace('"/textfile"', repr(str(d)))
        for _ in range(2):
            subprocess.run([sys.executable, "-c", script], check=True)
            st = d.stat()
            assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 65532, mode | 0o070)


@pytest.mark.parametrize("image", ["registry.example.com/gpufleet:latest", "registry.example.com/gpufleet"])
def test_drift_image_must_be_pinned(image: str) -> None:
    with pytest.raises(ValueError, match=r"pinned|pattern"):
        Drift(image=image)


# --- monitoring --------------------------------------------------------------------------------------


@needs_upstream
def test_kube_prometheus_stack_values_exist_upstream(onprem_spec: ClusterSpec) -> None:
    assert _yaml(KPS / "Chart.yaml")["version"] == CHARTS["kube-prometheus-stack"].default
    upstream = _yaml(KPS / "values.yaml")
    ours = values.kube_prometheus_stack_values(onprem_spec)
    allowed = values.SUBCHART_KEYS["kube-prometheus-stack"]
    assert unknown_value_keys(ours, upstream, allowed=allowed) == []
    bad = copy.deepcopy(ours)
    bad["grafana"]["sidecar"]["dashboard"] = {"enabled": True}
    bad["prometheus"]["prometheusSpec"]["ruleSelectorNilUsesHelmValue"] = False
    assert sorted(unknown_value_keys(bad, upstream, allowed=allowed)) == [
        "grafana.sidecar.dashboard", "prometheus.prometheusSpec.ruleSelectorNilUsesHelmValue"]
    # The chart's own node-exporter arguments are kept (a list value replaces the chart's).
    assert list(values.KPS_NODE_EXPORTER_ARGS) == upstream["prometheus-node-exporter"]["extraArgs"]
    assert upstream["grafana"]["sidecar"]["dashboards"]["label"] == values.DASHBOARD_LABEL[0]


@needs_upstream
def test_prometheus_rule_and_service_monitor_validate_against_the_crds(onprem: OfflinePlan) -> None:
    rule = onprem.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")[0].inputs
    crd = KPS / "crds" / "crd-prometheusrules.yaml"
    assert crd_errors(rule, crd) == []
    assert crd_errors({**rule, "spec": {"groups": [{"name": "x", "rulez": []}]}}, crd) != []
    # The ServiceMonitor the standalone dcgm-exporter chart renders from our values (its template).
    sm_values = values.dcgm_exporter_values(load_spec("onprem-h100"), with_counters=True)["serviceMonitor"]
    sm = {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
          "metadata": {"name": "dcgm-exporter", "labels": sm_values["additionalLabels"]},
          "spec": {"selector": {"matchLabels": {"app.kubernetes.io/name": "dcgm-exporter"}},
                   "endpoints": [{"port": "metrics", "interval": sm_values["interval"]}]}}
    assert crd_errors(sm, KPS / "crds" / "crd-servicemonitors.yaml") == []


def test_dashboard_is_a_grafana_sidecar_configmap(onprem: OfflinePlan) -> None:
    cm = next(r.inputs for r in onprem.of_type("kubernetes:core/v1:ConfigMap")
              if r.inputs["metadata"]["name"] == "gpufleet-gpu-dashboard")
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["data"]["gpufleet-gpus.json"] == values.DASHBOARD_FILE.read_text()
    kubernetes_validate.validate({k: v for k, v in cm.items()}, manifests.K8S_SCHEMA_VERSION, strict=True)


def test_existing_prometheus_is_selected_by_label() -> None:
    spec = load_spec("onprem-h100").model_copy(
        update={"monitoring": Monitoring(mode="existing", selector={"release": "prom"})})
    plan = evaluate(spec, resolve_lock(spec))
    assert "kube-prometheus-stack" not in {r.inputs["chart"] for r in plan.of_type(RELEASE)}
    rule = plan.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")[0].inputs
    assert rule["metadata"]["labels"]["release"] == "prom"
    op = _release(plan, "gpu-operator").inputs["values"]["dcgmExporter"]["serviceMonitor"]
    assert op == {"enabled": True, "interval": "15s", "additionalLabels": {"release": "prom"}}
    created = {r.inputs["metadata"]["name"] for r in plan.of_type("kubernetes:core/v1:Namespace")}
    assert "monitoring" not in created and "monitoring" in manifests.external_namespaces(spec)
    with pytest.raises(ValueError, match="selector"):
        Monitoring(mode="existing")


# --- Network Operator --------------------------------------------------------------------------------


@needs_upstream
def test_network_operator_values_and_nic_cluster_policy_against_upstream(onprem_spec: ClusterSpec) -> None:
    lock = resolve_lock(onprem_spec)
    ours = values.network_operator_values(onprem_spec)
    allowed = values.SUBCHART_KEYS["network-operator"]
    assert unknown_value_keys(ours, _yaml(NETOP / "values.yaml"), allowed=allowed) == []
    # The control-plane label explicitly, never the removed node-role.kubernetes.io/master.
    assert "node-role.kubernetes.io/master" not in yaml.safe_dump(ours)
    crd = NETOP / "crds" / "mellanox.com_nicclusterpolicies.yaml"
    ncp = values.nic_cluster_policy(onprem_spec, lock)
    assert crd_errors(ncp, crd) == []
    bad = copy.deepcopy(ncp)
    bad["spec"]["rdmaSharedDevicePlugin"]["imageTag"] = "x"
    assert crd_errors(bad, crd) != []


# --- chart catalog -----------------------------------------------------------------------------------


def test_every_chart_version_cites_its_source() -> None:
    for chart in CHARTS.values():
        for version, entry in chart.versions.items():
            assert re.match(r"^https://\S+", entry.source), (chart.name, version)
            if entry.upstream is not None and UPSTREAM.is_dir():
                assert (UPSTREAM / entry.upstream).is_dir(), entry.upstream
    assert all(not i.ref.endswith(":latest") for i in IMAGES.values())


# --- Ansible-managed pools in a mixed stack (issue 12 point 3) -----------------------------------------


def test_ansible_pools_in_a_mixed_stack_are_labelled_out_of_operator_components() -> None:
    spec = load_spec("onprem-h100")
    pools = [p.model_copy(update={"host_management": "operator"}) if p.name == "h100-b" else p for p in spec.pools]
    mixed = spec.model_copy(update={"pools": pools})
    plan = evaluate(mixed, resolve_lock(mixed))
    labels = {r.inputs["metadata"]["name"]: r.inputs["metadata"]["labels"]
              for r in plan.of_type("kubernetes:core/v1:NodePatch")}
    assert labels["gpu-a-0"]["nvidia.com/gpu.deploy.container-toolkit"] == "false"
    assert labels["gpu-a-0"]["nvidia.com/gpu.deploy.driver"] == "false"
    assert "nvidia.com/gpu.deploy.container-toolkit" not in labels["gpu-b-0"]  # operator-managed
    assert "nvidia.com/gpu.deploy.container-toolkit" not in labels["sys-0"]
    # An all-Ansible stack has the operator's driver and toolkit off: no label needed.
    plain = evaluate(spec, resolve_lock(spec))
    assert all("nvidia.com/gpu.deploy.container-toolkit" not in r.inputs["metadata"]["labels"]
               for r in plain.of_type("kubernetes:core/v1:NodePatch"))


# --- property: every GPU-node DaemonSet tolerates every GPU-pool taint ---------------------------------

_keys = st.sampled_from(["gpufleet.io/dedicated", "example.com/team", "nvidia.com/gpu", "reserved"])
_taints = st.lists(st.builds(Taint, key=_keys, value=st.sampled_from(["", "a", "b"]),
                             effect=st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute"])),
                   max_size=3)
_fabric = st.sampled_from(["infiniband", "roce", "none"])


@st.composite
def _stacks(draw: st.DrawFn) -> ClusterSpec:
    base = load_spec("onprem-h100")
    n = draw(st.integers(min_value=1, max_value=3))
    gpu_pools = [NodePool(name=f"gpu-{i}", role="gpu", gpu="h100-sxm5-80gb", count=1, fabric=draw(_fabric),
                          taints=draw(_taints)) for i in range(n)]
    return base.model_copy(update={"pools": [base.pools[0], *gpu_pools]})


def _tolerates(tolerations: list[dict[str, Any]], taint: dict[str, str]) -> bool:
    for t in tolerations:
        if t.get("effect") not in (None, "", taint["effect"]):
            continue
        if t.get("operator") == "Exists" and t.get("key") in (None, taint["key"]):
            return True
        if t.get("key") == taint["key"] and t.get("value", "") == taint.get("value", ""):
            return True
    return False


def _gpu_daemonset_tolerations(spec: ClusterSpec) -> dict[str, list[dict[str, Any]]]:
    lock = resolve_lock(spec)
    op = values.gpu_operator_values(spec, lock, with_counters=True)
    out = {"gpu-operator operands": op["daemonsets"]["tolerations"],
           "nfd worker": op["node-feature-discovery"]["worker"]["tolerations"],
           "dcgm-exporter (standalone)": values.dcgm_exporter_values(spec, with_counters=True)["tolerations"],
           "node-exporter": values.kube_prometheus_stack_values(spec)["prometheus-node-exporter"]["tolerations"],
           "lustre csi node": manifests.lustre_node_tolerations_patch(spec)["spec"]["template"]["spec"]["tolerations"]}
    if any(p.fabric in ("infiniband", "roce") for p in spec.gpu_pools):
        out["network-operator daemonsets"] = values.network_operator_values(spec)["operator"]["tolerations"]
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_stacks())
def test_every_gpu_daemonset_tolerates_every_gpu_pool_taint(spec: ClusterSpec) -> None:
    lock = resolve_lock(spec)
    for name, tolerations in _gpu_daemonset_tolerations(spec).items():
        for pool in spec.gpu_pools:
            for taint in node_taints(pool):
                assert _tolerates(tolerations, taint), (name, pool.name, taint)
    ncp = values.nic_cluster_policy(spec, lock)
    rdma = [p for p in spec.gpu_pools if p.fabric in ("infiniband", "roce")]
    assert all(_tolerates(ncp["spec"]["tolerations"], t) for p in rdma for t in node_taints(p))
    for driver in values.nvidia_drivers(spec, lock):
        pool = next(p for p in spec.gpu_pools if p.name == driver["spec"]["nodeSelector"]["gpufleet.io/pool"])
        assert all(_tolerates(driver["spec"]["tolerations"], t) for t in node_taints(pool))
    # Kueue (issue 30): the controller stays off GPU nodes; each pool's flavor tolerates that pool's taints
    # (Kueue injects them into the pods it admits there).
    manager = kueue.kueue_values(spec, lock)["controllerManager"]
    assert manager["nodeSelector"] == {"gpufleet.io/role": "system"}
    assert not any(_tolerates(manager["tolerations"], t) for p in spec.gpu_pools for t in node_taints(p))
    for pool in spec.gpu_pools:
        flavor = kueue.resource_flavor(pool)["spec"]
        assert flavor["nodeLabels"] == {"gpufleet.io/pool": pool.name}
        assert all(_tolerates(flavor["tolerations"], t) for t in node_taints(pool))
    # Lustre is mounted by GPU workloads: the CSI node plugin runs on GPU nodes only, tolerating their taints.
    lustre = manifests.lustre_node_tolerations_patch(spec)["spec"]["template"]["spec"]
    assert lustre["nodeSelector"] == {"gpufleet.io/role": "gpu"}
    # The health watcher's node agent (issue 31): a DaemonSet per pool, tolerating that pool's taints and every
    # health taint (a node tainted NoExecute still needs its checks, or it is never cleared).
    watched = spec.model_copy(update={"health_watch": HealthWatch(image=IMAGE)})
    health = [{"key": HEALTH_TAINT_KEY, "value": a.value, "effect": t.effect}
              for a in NodeAction if (t := taint_for(a)) is not None]
    assert {t["effect"] for t in health} == {"NoExecute", "NoSchedule"}
    for pool in spec.gpu_pools:
        agent = health_watch.agent_daemonset(watched, pool)["spec"]["template"]["spec"]
        assert agent["nodeSelector"] == {"gpufleet.io/pool": pool.name}
        assert all(_tolerates(agent["tolerations"], t) for t in [*node_taints(pool), *health])


def test_the_property_fails_when_a_taint_is_missed() -> None:
    spec = load_spec("onprem-h100")
    extra = {"key": "gpufleet.io/dedicated", "value": "x", "effect": "NoExecute"}
    assert not _tolerates(gpu_node_tolerations(spec.gpu_pools), extra)


def test_system_components_run_on_system_nodes(onprem_spec: ClusterSpec) -> None:
    """Operators, NFD master/gc, monitoring and gpufleet's own Jobs: system nodes, control-plane tolerated."""
    lock = resolve_lock(onprem_spec)
    op = values.gpu_operator_values(onprem_spec, lock, with_counters=True)
    kps = values.kube_prometheus_stack_values(onprem_spec)
    placed = [op["operator"], op["node-feature-discovery"]["master"], op["node-feature-discovery"]["gc"],
              values.network_operator_values(onprem_spec)["operator"], kps["prometheusOperator"],
              kps["prometheus"]["prometheusSpec"], kps["alertmanager"]["alertmanagerSpec"], kps["grafana"],
              kps["kube-state-metrics"]]
    pool = load_spec("onprem-h100").pools[1]
    job = manifests.taint_job(pool, pool.hosts)
    assert job is not None
    placed.append(job["spec"]["template"]["spec"])
    for p in placed:
        assert p["nodeSelector"] == {"gpufleet.io/role": "system"}
        assert {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists",
                "effect": "NoSchedule"} in p["tolerations"]
