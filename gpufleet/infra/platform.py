"""The Kubernetes platform layer shared by every backend (ComponentResources, children ``parent=self``).

Install order is explicit: every consumer of a CRD ``depends_on`` the release that installs it
(docs/pulumi.md, "Install order"; ``tests/test_infra_program.py`` asserts the edges):

- monitoring (kube-prometheus-stack: the Prometheus Operator CRDs) before the GPU Operator, whose
  dcgm-exporter ServiceMonitor the operator silently skips without the CRD, before the standalone
  dcgm-exporter chart, and before our PrometheusRules;
- the GPU Operator (it installs NFD and its CRDs) before the Network Operator, whose NodeFeatureRule
  needs them; the Network Operator release (its CRDs) before the NicClusterPolicy;
- the GPU Operator before the NVIDIADriver objects; node labels before the taint Jobs that select by them;
- the Kueue release (its CRDs) before its Topology, ResourceFlavor, ClusterQueue and LocalQueue objects.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpufleet.infra import charts, health_watch, kueue, manifests, registered_nodes, values
from gpufleet.infra.contract import BackendHandles
from gpufleet.lock import Lock
from gpufleet.monitoring.rules import render_prometheus_rule
from gpufleet.spec import ClusterSpec

#: kind -> typed resource class (a patch: only the fields given are ours, by server-side apply).
_KINDS: dict[tuple[str, bool], Any] = {
    ("Namespace", False): k8s.core.v1.Namespace,
    ("Namespace", True): k8s.core.v1.NamespacePatch,
    ("ConfigMap", False): k8s.core.v1.ConfigMap,
    ("ResourceQuota", False): k8s.core.v1.ResourceQuota,
    ("ServiceAccount", False): k8s.core.v1.ServiceAccount,
    ("PriorityClass", False): k8s.scheduling.v1.PriorityClass,
    ("NetworkPolicy", False): k8s.networking.v1.NetworkPolicy,
    ("StorageClass", False): k8s.storage.v1.StorageClass,
    ("PersistentVolume", False): k8s.core.v1.PersistentVolume,
    ("PersistentVolumeClaim", False): k8s.core.v1.PersistentVolumeClaim,
    ("Node", True): k8s.core.v1.NodePatch,
    ("DaemonSet", True): k8s.apps.v1.DaemonSetPatch,
    ("ClusterRole", False): k8s.rbac.v1.ClusterRole,
    ("ClusterRoleBinding", False): k8s.rbac.v1.ClusterRoleBinding,
    ("Job", False): k8s.batch.v1.Job,
    ("Role", False): k8s.rbac.v1.Role,
    ("RoleBinding", False): k8s.rbac.v1.RoleBinding,
    ("Service", False): k8s.core.v1.Service,
    ("Deployment", False): k8s.apps.v1.Deployment,
    ("DaemonSet", False): k8s.apps.v1.DaemonSet,
    ("CronJob", False): k8s.batch.v1.CronJob,
}


def _res_name(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{obj['kind'].lower()}-{ns + '-' if ns else ''}{meta['name']}"


def _snake(key: str) -> str:
    return re.sub(r"(?<!^)([A-Z])", r"_\1", key).lower()


def apply(obj: dict[str, Any], opts: pulumi.ResourceOptions, *, patch: bool = False) -> pulumi.CustomResource:
    """One Kubernetes object (as rendered in ``manifests``/``values``) as a typed Pulumi resource."""
    name, kind = _res_name(obj), obj["kind"]
    fields = {_snake(k): v for k, v in obj.items() if k not in ("apiVersion", "kind")}
    cls = _KINDS.get((kind, patch))
    if cls is not None:
        res: pulumi.CustomResource = cls(name + ("-patch" if patch and kind == "Namespace" else ""), **fields,
                                         opts=opts)
        return res
    if set(fields) - {"metadata", "spec"}:
        # Custom resources with top-level fields besides spec (Kueue's WorkloadPriorityClass: value,
        # description), which apiextensions.CustomResource does not take: registered with the same type token.
        return pulumi.CustomResource(f"kubernetes:{obj['apiVersion']}:{kind}", name, dict(obj), opts)
    return k8s.apiextensions.CustomResource(name, api_version=obj["apiVersion"], kind=kind, **fields, opts=opts)


def _release(chart: charts.Chart, vals: dict[str, Any], opts: pulumi.ResourceOptions,
             namespace: str | None = None) -> k8s.helm.v3.Release:
    if chart.repo.startswith("oci://"):
        # An OCI chart is named by its full reference; there is no repository index to point at.
        return k8s.helm.v3.Release(
            chart.name, name=chart.name, chart=f"{chart.repo}/{chart.name}", version=chart.version,
            namespace=namespace or chart.namespace, values=vals, opts=opts)
    return k8s.helm.v3.Release(
        chart.name, name=chart.name, chart=chart.name, version=chart.version,
        namespace=namespace or chart.namespace,
        repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo), values=vals, opts=opts)


class _Component(pulumi.ComponentResource):
    def __init__(self, kind: str, name: str, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None) -> None:
        super().__init__(f"gpufleet:platform:{kind}", name, None, opts)
        self._provider = provider

    def child(self, depends_on: Sequence[pulumi.Resource] = ()) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self._provider, depends_on=list(depends_on))


class Namespaces(_Component):
    """Every namespace the program creates, with the Pod Security level its pods need."""

    def __init__(self, name: str, spec: ClusterSpec, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("Namespaces", name, provider, opts)
        self.namespaces = [apply(o, self.child()) for o in manifests.platform_namespaces(spec)]
        self.register_outputs({})


class PlaneSeparation(_Component):
    """Node labels (a server-side-apply patch), taints of registered nodes (read-modify-write Jobs),
    PriorityClasses, and default-deny NetworkPolicies with explicit allows in every workload namespace."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, backend: BackendHandles,
                 provider: k8s.Provider, namespaces: Namespaces,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("PlaneSeparation", name, provider, opts)
        operator_components = lock.operator_components
        # Only registered Nodes are labelled: a server-side apply of an absent one would create a bare Node
        # (gpufleet/infra/registered_nodes.py). Absent hosts are named in a warning and left to the next run.
        absent = registered_nodes.absent_hosts(((p.pool, p.hosts) for p in backend.pools),
                                               backend.registered_nodes)
        for pool, host in absent:
            pulumi.log.warn(registered_nodes.absent_message(pool, host))
        skipped = {h.name for _, h in absent}
        present = [(handle, [h for h in handle.hosts if h.name not in skipped]) for handle in backend.pools]
        first_system = next((h.name for p, hosts in present if p.pool.role == "system" for h in hosts), None)
        rbac: list[pulumi.Resource] = []
        for handle, hosts in present:
            labelled = [apply(manifests.node_patch(handle.pool, host, operator_components=operator_components,
                                                   drift_metrics=spec.drift is not None
                                                   and host.name == first_system),
                              self.child(), patch=True)
                        for host in hosts]
            # Cloud node groups register their nodes with the taints; nothing patches them afterwards.
            if not hosts or handle.taints_at_registration:
                continue
            job = manifests.taint_job(handle.pool, hosts)
            if job is None:
                continue
            if not rbac:
                rbac = [apply(o, self.child(namespaces.namespaces)) for o in manifests.taint_rbac()]
            apply(job, self.child([*namespaces.namespaces, *rbac, *labelled]))
        for obj in manifests.priority_classes():
            apply(obj, self.child())
        for ns in spec.workload_namespaces:
            for obj in manifests.network_policies(ns):
                apply(obj, self.child(namespaces.namespaces))
        self.register_outputs({})


class Monitoring(_Component):
    """kube-prometheus-stack on system nodes (or an existing Prometheus, selected by label), our
    PrometheusRules and the Grafana dashboard. ``crds`` is what CRD consumers depend on."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, provider: k8s.Provider,
                 namespaces: Namespaces, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("Monitoring", name, provider, opts)
        ns = charts.MONITORING_NAMESPACE
        self.crds: list[pulumi.Resource] = []
        self.release: k8s.helm.v3.Release | None = None
        if spec.monitoring.mode == "kube-prometheus-stack":
            chart = charts.kube_prometheus_stack(lock)
            self.values = values.kube_prometheus_stack_values(spec)
            self.release = _release(chart, self.values, self.child(namespaces.namespaces))
            self.crds = [self.release]
        rule = render_prometheus_rule(namespace=ns)
        rule["metadata"]["labels"].update(values.monitor_labels(spec))
        apply(rule, self.child([*namespaces.namespaces, *self.crds]))
        apply(manifests.dashboard_configmap(ns, values.DASHBOARD_FILE.read_text()),
              self.child(namespaces.namespaces))
        self.register_outputs({"mode": spec.monitoring.mode})


class GpuOperator(_Component):
    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, provider: k8s.Provider,
                 namespaces: Namespaces, monitoring: Monitoring, *, dcgm_exporter: bool = True,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("GpuOperator", name, provider, opts)
        csv = values.counters_csv() if dcgm_exporter else None
        chart = charts.gpu_operator(lock)
        deps: list[pulumi.Resource] = [*namespaces.namespaces, *monitoring.crds]
        if csv is not None:
            deps.append(apply(manifests.counters_configmap(csv, chart.namespace), self.child(namespaces.namespaces)))
        if spec.backend == "gcp":
            deps.append(apply(manifests.critical_pods_quota(chart.namespace), self.child(namespaces.namespaces)))
        if csv is None and dcgm_exporter:
            pulumi.log.warn(f"{values.COUNTERS_FILE} is missing: dcgm-exporter keeps its built-in counters")
        self.values = values.gpu_operator_values(spec, lock, with_counters=csv is not None,
                                                 dcgm_exporter=dcgm_exporter)
        self.release = _release(chart, self.values, self.child(deps))
        for obj in values.nvidia_drivers(spec, lock):
            apply(obj, self.child([self.release]))
        self.register_outputs({"chart": chart.name, "version": chart.version})


class DcgmExporter(_Component):
    """Standalone exporter: only for clusters where the GPU Operator's own exporter is off."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, provider: k8s.Provider,
                 namespaces: Namespaces, monitoring: Monitoring,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("DcgmExporter", name, provider, opts)
        csv = values.counters_csv()
        chart = charts.dcgm_exporter(lock)
        deps: list[pulumi.Resource] = [*namespaces.namespaces, *monitoring.crds]
        if csv is not None:
            deps.append(apply(manifests.counters_configmap(csv, chart.namespace), self.child(namespaces.namespaces)))
        self.values = values.dcgm_exporter_values(spec, with_counters=csv is not None)
        self.release = _release(chart, self.values, self.child(deps))
        self.register_outputs({"chart": chart.name, "version": chart.version})


class NetworkOperator(_Component):
    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, provider: k8s.Provider,
                 namespaces: Namespaces, gpu_operator: GpuOperator,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("NetworkOperator", name, provider, opts)
        chart = charts.network_operator(lock)
        # Its NodeFeatureRule needs the NFD CRDs, which the gpu-operator chart installs.
        self.release = _release(chart, values.network_operator_values(spec),
                                self.child([*namespaces.namespaces, gpu_operator.release]))
        self.policy = apply(values.nic_cluster_policy(spec, lock), self.child([self.release]))
        self.register_outputs({"chart": chart.name, "version": chart.version})


class LustreStorage(_Component):
    """The Lustre CSI driver (the platform's chart, unless the backend's cloud runs its own: ``backend``'s
    ``lustre_csi_driver``), the StorageClass and the datasets/checkpoints volumes of every workload namespace."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, provider: k8s.Provider,
                 namespaces: Namespaces, opts: pulumi.ResourceOptions | None = None,
                 backend: BackendHandles | None = None) -> None:
        super().__init__("LustreStorage", name, provider, opts)
        driver = backend.lustre_csi_driver if backend is not None else None
        self.release: k8s.helm.v3.Release | None = None
        outputs: dict[str, Any] = {"driver": driver}
        if driver is None:
            chart = charts.lustre_csi(lock)
            # The chart creates lustre-csi-system itself, so its release record lives in kube-system and the
            # namespace gets its Pod Security labels by a patch once the chart made it.
            self.release = _release(chart, {}, self.child(), namespace="kube-system")
            apply(manifests.lustre_namespace_patch(), self.child([self.release]), patch=True)
            apply(manifests.lustre_node_tolerations_patch(spec), self.child([self.release]), patch=True)
            outputs = {"chart": chart.name, "version": chart.version}
        storage_class = apply(manifests.lustre_storage_class(), self.child())
        for obj in manifests.lustre_volumes(spec, backend.lustre_volume_handles if backend else None,
                                            driver=driver,
                                            attributes=backend.lustre_volume_attributes if backend else None):
            apply(obj, self.child([storage_class, *namespaces.namespaces]))
        self.register_outputs(outputs)


class Kueue(_Component):
    """Kueue on system nodes, then its queues, flavors, topologies and priorities (they need its CRDs)."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, provider: k8s.Provider, namespaces: Namespaces,
                 monitoring: Monitoring, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("Kueue", name, provider, opts)
        chart = charts.kueue(lock)
        self.values = kueue.kueue_values(spec, lock)
        # Its ServiceMonitor needs the Prometheus Operator CRDs (monitoring.crds) when enablePrometheus is on.
        self.release = _release(chart, self.values, self.child([*namespaces.namespaces, *monitoring.crds]))
        done: list[pulumi.Resource] = [self.release, *namespaces.namespaces]
        for obj in kueue.kueue_objects(spec):
            # In order: a flavor names its Topology, the ClusterQueue its flavors, a LocalQueue the ClusterQueue.
            done.append(apply(obj, self.child(done)))
        self.register_outputs({"chart": chart.name, "version": chart.version})


class DriftCheck(_Component):
    """The drift CronJob with its own token-less ServiceAccount (when the stack sets gpufleet:drift)."""

    def __init__(self, name: str, spec: ClusterSpec, provider: k8s.Provider, namespaces: Namespaces,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("DriftCheck", name, provider, opts)
        deps: list[pulumi.Resource] = list(namespaces.namespaces)
        for obj in manifests.drift_objects(spec):
            deps.append(apply(obj, self.child(deps)))
        self.register_outputs({})


class HealthWatch(_Component):
    """The health watcher: node agent DaemonSets per GPU pool and the controller that taints with the rate
    limit (gpufleet/infra/health_watch.py), when the stack sets gpufleet:healthWatch. Its ServiceMonitor
    needs the Prometheus Operator CRDs (monitoring.crds)."""

    def __init__(self, name: str, spec: ClusterSpec, provider: k8s.Provider, namespaces: Namespaces,
                 monitoring: Monitoring, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("HealthWatch", name, provider, opts)
        done: list[pulumi.Resource] = list(namespaces.namespaces)
        for obj in health_watch.health_watch_objects(spec, values.monitor_labels(spec)):
            deps = [*done, *monitoring.crds] if obj["kind"] == "ServiceMonitor" else done
            # In order: identities and their grants before the pods that use them.
            done = [*done, apply(obj, self.child(deps))]
        self.register_outputs({})


class Platform(pulumi.ComponentResource):
    """Everything a GPU cluster needs on top of Kubernetes, whichever backend made it."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, backend: BackendHandles,
                 *, operator_dcgm_exporter: bool = True, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:platform:Platform", name, None, opts)
        if backend.provider is None:
            raise ValueError("the platform layer needs a Kubernetes provider (the local backend has none)")
        provider = backend.provider
        mine = pulumi.ResourceOptions(parent=self)
        self.namespaces = Namespaces("namespaces", spec, provider, mine)
        self.separation = PlaneSeparation("separation", spec, lock, backend, provider, self.namespaces, mine)
        self.monitoring = Monitoring("monitoring", spec, lock, provider, self.namespaces, mine)
        self.gpu_operator = GpuOperator("gpu-operator", spec, lock, provider, self.namespaces, self.monitoring,
                                        dcgm_exporter=operator_dcgm_exporter, opts=mine)
        self.dcgm_exporter = (None if operator_dcgm_exporter
                              else DcgmExporter("dcgm-exporter", spec, lock, provider, self.namespaces,
                                                self.monitoring, mine))
        self.network_operator = (
            NetworkOperator("network-operator", spec, lock, provider, self.namespaces, self.gpu_operator, mine)
            if any(p.fabric in ("infiniband", "roce") for p in spec.gpu_pools) else None)
        self.lustre = (LustreStorage("lustre", spec, lock, provider, self.namespaces, mine, backend=backend)
                       if spec.storage.lustre is not None else None)
        self.kueue = (Kueue("kueue", spec, lock, provider, self.namespaces, self.monitoring, mine)
                      if spec.gpu_pools else None)
        self.drift = (DriftCheck("drift", spec, provider, self.namespaces, mine)
                      if spec.drift is not None else None)
        self.health_watch = (HealthWatch("health-watch", spec, provider, self.namespaces, self.monitoring, mine)
                             if spec.health_watch is not None and spec.gpu_pools else None)
        self.register_outputs({})
