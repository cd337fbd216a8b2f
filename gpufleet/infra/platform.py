"""The Kubernetes platform layer shared by every backend (ComponentResources, children ``parent=self``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpufleet.infra import charts, manifests, values
from gpufleet.infra.contract import BackendHandles
from gpufleet.lock import Lock
from gpufleet.spec import ClusterSpec


def _res_name(obj: dict[str, Any]) -> str:
    meta = obj["metadata"]
    ns = meta.get("namespace")
    return f"{obj['kind'].lower()}-{ns + '-' if ns else ''}{meta['name']}"


def apply(obj: dict[str, Any], opts: pulumi.ResourceOptions) -> pulumi.CustomResource:
    """One Kubernetes object (as rendered in ``manifests``/``values``) as a typed Pulumi resource."""
    name, kind, meta = _res_name(obj), obj["kind"], obj["metadata"]
    if kind == "Namespace":
        return k8s.core.v1.Namespace(name, metadata=meta, opts=opts)
    if kind == "ConfigMap":
        return k8s.core.v1.ConfigMap(name, metadata=meta, data=obj["data"], opts=opts)
    if kind == "PriorityClass":
        return k8s.scheduling.v1.PriorityClass(
            name, metadata=meta, value=obj["value"], global_default=obj["globalDefault"],
            preemption_policy=obj["preemptionPolicy"], description=obj["description"], opts=opts)
    if kind == "NetworkPolicy":
        return k8s.networking.v1.NetworkPolicy(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "StorageClass":
        return k8s.storage.v1.StorageClass(
            name, metadata=meta, provisioner=obj["provisioner"], reclaim_policy=obj["reclaimPolicy"],
            volume_binding_mode=obj["volumeBindingMode"], opts=opts)
    if kind == "PersistentVolume":
        return k8s.core.v1.PersistentVolume(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "PersistentVolumeClaim":
        return k8s.core.v1.PersistentVolumeClaim(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "Node":
        return k8s.core.v1.NodePatch(name, metadata=meta, spec=obj["spec"], opts=opts)
    if kind == "DaemonSet":
        return k8s.apps.v1.DaemonSetPatch(name, metadata=meta, spec=obj["spec"], opts=opts)
    return k8s.apiextensions.CustomResource(
        name, api_version=obj["apiVersion"], kind=kind, metadata=meta, spec=obj["spec"], opts=opts)


def _release(chart: charts.Chart, vals: dict[str, Any], opts: pulumi.ResourceOptions,
             namespace: str | None = None) -> k8s.helm.v3.Release:
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
    def __init__(self, name: str, spec: ClusterSpec, provider: k8s.Provider,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("Namespaces", name, provider, opts)
        self.namespaces = [apply(o, self.child()) for o in manifests.platform_namespaces(spec)]
        self.register_outputs({})


class PlaneSeparation(_Component):
    """GPU nodes labelled and tainted, system nodes labelled, PriorityClasses, and default-deny
    NetworkPolicies with explicit allows in every GPU workload namespace."""

    def __init__(self, name: str, spec: ClusterSpec, backend: BackendHandles, provider: k8s.Provider,
                 namespaces: Namespaces, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("PlaneSeparation", name, provider, opts)
        for handle in backend.pools:
            for host in handle.hosts:
                apply(manifests.node_patch(handle.pool, host), self.child())
        for obj in manifests.priority_classes():
            apply(obj, self.child())
        for ns in spec.workload_namespaces:
            for obj in manifests.network_policies(ns):
                apply(obj, self.child(namespaces.namespaces))
        self.register_outputs({})


class GpuOperator(_Component):
    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, provider: k8s.Provider,
                 namespaces: Namespaces, *, dcgm_exporter: bool = True,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("GpuOperator", name, provider, opts)
        csv = values.counters_csv() if dcgm_exporter else None
        chart = charts.gpu_operator(lock.gpu_operator)
        deps: list[pulumi.Resource] = list(namespaces.namespaces)
        if csv is not None:
            deps.append(apply(manifests.counters_configmap(csv, chart.namespace), self.child(deps)))
        elif dcgm_exporter:
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
                 namespaces: Namespaces, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("DcgmExporter", name, provider, opts)
        csv = values.counters_csv()
        chart = charts.dcgm_exporter(lock.dcgm_exporter_chart)
        deps: list[pulumi.Resource] = list(namespaces.namespaces)
        if csv is not None:
            deps.append(apply(manifests.counters_configmap(csv, chart.namespace), self.child(deps)))
        self.values = values.dcgm_exporter_values(spec, with_counters=csv is not None)
        self.release = _release(chart, self.values, self.child(deps))
        self.register_outputs({"chart": chart.name, "version": chart.version})


class NetworkOperator(_Component):
    def __init__(self, name: str, spec: ClusterSpec, provider: k8s.Provider, namespaces: Namespaces,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("NetworkOperator", name, provider, opts)
        chart = charts.network_operator()
        self.release = _release(chart, values.network_operator_values(), self.child(namespaces.namespaces))
        self.policy = apply(values.nic_cluster_policy(spec), self.child([self.release]))
        self.register_outputs({"chart": chart.name, "version": chart.version})


class LustreStorage(_Component):
    def __init__(self, name: str, spec: ClusterSpec, provider: k8s.Provider, namespaces: Namespaces,
                 opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("LustreStorage", name, provider, opts)
        chart = charts.lustre_csi()
        # The chart creates lustre-csi-system itself, so its release record lives in kube-system.
        self.release = _release(chart, {}, self.child(), namespace="kube-system")
        apply(manifests.lustre_node_tolerations_patch(spec), self.child([self.release]))
        storage_class = apply(manifests.lustre_storage_class(), self.child())
        for obj in manifests.lustre_volumes(spec):
            apply(obj, self.child([storage_class, *namespaces.namespaces]))
        self.register_outputs({"chart": chart.name, "version": chart.version})


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
        self.separation = PlaneSeparation("separation", spec, backend, provider, self.namespaces, mine)
        self.gpu_operator = GpuOperator("gpu-operator", spec, lock, provider, self.namespaces,
                                        dcgm_exporter=operator_dcgm_exporter, opts=mine)
        self.dcgm_exporter = (None if operator_dcgm_exporter
                              else DcgmExporter("dcgm-exporter", spec, lock, provider, self.namespaces, mine))
        self.network_operator = (
            NetworkOperator("network-operator", spec, provider, self.namespaces, mine)
            if any(p.fabric in ("infiniband", "roce") for p in spec.gpu_pools) else None)
        self.lustre = (LustreStorage("lustre", spec, provider, self.namespaces, mine)
                       if spec.storage.lustre is not None else None)
        self.register_outputs({})
