"""Kueue: all-or-nothing admission of GPU jobs and their placement under one network domain (docs/scheduling.md).

What the platform renders, as data (``platform.Kueue`` applies it):

- the ``kueue`` chart's values: controller on system nodes, ``waitForPodsReady`` on (a job's pods all start
  within the stack's timeout or the job is evicted and requeued), the integrations the nccl-tests templates and
  the training example use (batch Job, kubeflow MPIJob, JobSet);
- one ``ResourceFlavor`` per GPU pool (its node labels, tolerations of its taints, its ``Topology``);
- one ``ClusterQueue`` per stack with GPU, CPU and memory quotas of every GPU pool (pool size times node facts);
- a ``LocalQueue`` in each workload namespace, and ``WorkloadPriorityClass`` objects mirroring the
  ``gpufleet-training`` / ``gpufleet-batch`` PriorityClasses so training preempts batch;
- one ``Topology`` per GPU pool whose levels are node labels that exist on that backend.

API version v1beta2: the storage version of every CRD of the pinned release (../shared/upstream/kueue-v0.19.2/crds).
"""

from __future__ import annotations

from typing import Any

import yaml

from gpufleet.catalog import GPUS
from gpufleet.catalog.charts import CHARTS
from gpufleet.catalog.clouds import AWS, AZURE, GCP
from gpufleet.infra.manifests import MANAGED_BY, PRIORITY_CLASSES
from gpufleet.infra.scheduling import (
    CONTROL_PLANE_TOLERATION,
    PLACE_LABELS,
    POOL_LABEL,
    SYSTEM_NODE_SELECTOR,
    host_place,
    node_taints,
    toleration,
)
from gpufleet.lock import Lock
from gpufleet.spec import ClusterSpec, NodePool

API = "kueue.x-k8s.io/v1beta2"
NAMESPACE = CHARTS["kueue"].namespace
#: Labels a job carries (Kueue docs, "Run a Kubernetes Job": queue-name; "Workload priority": priority-class).
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
#: Pod template annotations of Topology Aware Scheduling (https://kueue.sigs.k8s.io/docs/concepts/topology_aware_scheduling/).
REQUIRED_TOPOLOGY = "kueue.x-k8s.io/podset-required-topology"
PREFERRED_TOPOLOGY = "kueue.x-k8s.io/podset-preferred-topology"
#: The LocalQueue every workload namespace gets.
LOCAL_QUEUE = "gpu"
GPU_RESOURCE = "nvidia.com/gpu"
HOSTNAME_LABEL = "kubernetes.io/hostname"
#: Network topology labels the cloud itself puts on GPU nodes, outermost first, by level name.
#: - AWS: EC2 instance topology (``DescribeInstanceTopology``), three network-node layers, layer 3 being the
#:   switch the instance attaches to; EKS labels supported instance types (p4d, p5, p5e, p5en, p6) with them:
#:   https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-topology.html,
#:   https://docs.aws.amazon.com/eks/latest/userguide/ml-eks-k8s-device-plugin.html (Kueue's AWS TAS example).
#: - Google Cloud: GKE's compact-placement labels of A3/A4 nodes, cluster block and sub-block
#:   (https://cloud.google.com/ai-hypercomputer/docs/workloads/schedule-gke-workloads-tas); GKE's
#:   ``gce-topology-host`` is left out: on the full-host 8-GPU machine types it is one node, as the hostname is.
#: - Azure: AKS publishes no network topology labels for ND VMs (none in the AKS node label reference,
#:   https://learn.microsoft.com/azure/aks/use-labels): only the stack's ``place`` labels, else the hostname.
CLOUD_LEVELS: dict[str, tuple[tuple[str, str], ...]] = {
    "aws": (("block", "topology.k8s.aws/network-node-layer-1"), ("rack", "topology.k8s.aws/network-node-layer-2"),
            ("switch", "topology.k8s.aws/network-node-layer-3")),
    "gcp": (("block", "cloud.google.com/gce-topology-block"), ("rack", "cloud.google.com/gce-topology-subblock")),
}
#: Job kinds Kueue manages: the nccl-tests templates (batch Job, MPIJob) and the training example (JobSet).
FRAMEWORKS = ("batch/job", "kubeflow.org/mpijob", "jobset.x-k8s.io/jobset")
#: The chart's default image is a staging build (``release-0.19``, pullPolicy Always): the released image
#: at the chart's version is pinned instead (https://kueue.sigs.k8s.io/docs/installation/).
IMAGE_REPOSITORY = "registry.k8s.io/kueue/kueue"


class KueueError(ValueError):
    """A stack whose scheduling settings the pools cannot meet (the message names key and fix)."""


def _meta(name: str, namespace: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": dict(MANAGED_BY)}
    if namespace is not None:
        meta["namespace"] = namespace
    return meta


def controller_config(spec: ClusterSpec) -> dict[str, Any]:
    """Kueue's Configuration (``managerConfig.controllerManagerConfigYaml``): the chart's defaults that matter,
    plus waitForPodsReady and the integrations."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "health": {"healthProbeBindAddress": ":8081"},
        "metrics": {"bindAddress": ":8443"},
        "webhook": {"port": 9443},
        "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
        # All or nothing: a job whose pods do not all become ready within the timeout is evicted and requeued
        # with exponential backoff; blockAdmission admits the next job only once the admitted ones run, so two
        # half-started jobs never hold each other's GPUs (Kueue docs, "Sequential Admission with Ready Pods").
        "waitForPodsReady": {
            "timeout": f"{spec.scheduling.pods_ready_timeout_s}s",
            "blockAdmission": True,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffBaseSeconds": 60, "backoffMaxSeconds": 3600},
        },
        # Only jobs that name a queue are Kueue's: system workloads keep the default scheduler path.
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }


def kueue_values(spec: ClusterSpec, lock: Lock) -> dict[str, Any]:
    """Values of the ``kueue`` chart at ``lock.kueue``; every key exists in its values.yaml (tests/test_kueue.py)."""
    return {
        "controllerManager": {
            "manager": {"image": {"repository": IMAGE_REPOSITORY, "tag": f"v{lock.kueue}",
                                  "pullPolicy": "IfNotPresent"}},
            # Off GPU nodes, like every operator: the system pool, tolerating a control-plane taint only.
            "nodeSelector": dict(SYSTEM_NODE_SELECTOR),
            "tolerations": [dict(CONTROL_PLANE_TOLERATION)],
        },
        "managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(controller_config(spec), sort_keys=False)},
        # Its ServiceMonitor needs the Prometheus Operator CRDs: only where gpufleet installs them.
        "enablePrometheus": spec.monitoring.mode == "kube-prometheus-stack",
    }


def node_facts(spec: ClusterSpec, pool: NodePool) -> tuple[int, int, int]:
    """GPUs, CPUs and memory (GiB) of one node of a GPU pool: the stack's node_resources, else the cloud
    catalog's machine type; the GPU count from the machine type, else the GPU catalog's board."""
    machine: Any = None
    if pool.instance_type is not None:
        by_backend: dict[str, dict[str, Any]] = {"aws": dict(AWS.instance_types), "azure": dict(AZURE.vm_sizes),
                                                 "gcp": dict(GCP.machine_types)}
        machine = by_backend.get(spec.backend, {}).get(pool.instance_type)
    gpus = machine.gpus if machine is not None else GPUS[str(pool.gpu)].gpus_per_node
    if pool.node_resources is not None:
        return gpus, pool.node_resources.cpu, pool.node_resources.memory_gib
    if machine is None or machine.vcpus is None or machine.memory_gib is None:
        raise KueueError(f"pool {pool.name}: Kueue's CPU and memory quotas need the node's size; set "
                         f"pools[{pool.name}].node_resources (cpu, memory_gib)")
    return gpus, machine.vcpus, machine.memory_gib


def quota_nodes(pool: NodePool) -> int:
    """Nodes a pool's quota covers: its fixed count, else its autoscaling maximum (what it can grow to)."""
    return pool.count if pool.count is not None else (pool.max or 0)


def topology_levels(spec: ClusterSpec, pool: NodePool) -> list[tuple[str, str]]:
    """(level name, node label) of a pool's Topology, outermost first, the hostname last."""
    if spec.backend in CLOUD_LEVELS:
        levels = list(CLOUD_LEVELS[spec.backend])
    else:
        places = [host_place(pool, h) for h in pool.hosts] or [host_place(pool, None)]
        # A level is usable only when every node has it: Kueue ignores nodes that lack a level's label.
        common = [name for name in PLACE_LABELS if all(name in p for p in places)]
        partial = sorted({name for p in places for name in p} - set(common))
        if partial:
            raise KueueError(f"pool {pool.name}: place {', '.join(partial)} is set on some hosts only; set it "
                             f"on every host of the pool (or on the pool) or on none")
        levels = [(name, PLACE_LABELS[name]) for name in common]
    return [*levels, ("host", HOSTNAME_LABEL)]


def placement_level(spec: ClusterSpec, pool: NodePool) -> tuple[str, str]:
    """(level name, node label) a job's pods are kept under: the stack's topology_level, else the innermost
    level above the host (the leaf switch where known)."""
    levels = topology_levels(spec, pool)
    wanted = spec.scheduling.topology_level
    if wanted is None:
        return levels[-2] if len(levels) > 1 else levels[-1]
    for name, label in levels:
        if name == wanted:
            return name, label
    raise KueueError(f"gpufleet:scheduling.topology_level {wanted}: pool {pool.name} has no such level on "
                     f"backend {spec.backend} (levels: {', '.join(n for n, _ in levels)}); choose one of them "
                     "or set the pool's place")


def podset_annotations(spec: ClusterSpec, pool: NodePool) -> dict[str, str]:
    """Pod template annotation asking Kueue to keep a job's pods under one domain of the placement level."""
    key = REQUIRED_TOPOLOGY if spec.scheduling.topology_mode == "required" else PREFERRED_TOPOLOGY
    return {key: placement_level(spec, pool)[1]}


def job_labels(priority: str = "gpufleet-training") -> dict[str, str]:
    """Labels of a job Kueue admits from the namespace's LocalQueue at a WorkloadPriorityClass."""
    if priority not in PRIORITY_CLASSES:
        raise KueueError(f"priority {priority} is not one of {', '.join(PRIORITY_CLASSES)}")
    return {QUEUE_LABEL: LOCAL_QUEUE, PRIORITY_LABEL: priority}


def topology(spec: ClusterSpec, pool: NodePool) -> dict[str, Any]:
    return {"apiVersion": API, "kind": "Topology", "metadata": _meta(pool.name),
            "spec": {"levels": [{"nodeLabel": label} for _, label in topology_levels(spec, pool)]}}


def resource_flavor(pool: NodePool) -> dict[str, Any]:
    """The pool's flavor: admitted pods get its node selector and tolerations of its taints injected."""
    return {"apiVersion": API, "kind": "ResourceFlavor", "metadata": _meta(pool.name),
            "spec": {"nodeLabels": {POOL_LABEL: pool.name},
                     "tolerations": [toleration(t) for t in node_taints(pool)],
                     "topologyName": pool.name}}


def cluster_queue_name(spec: ClusterSpec) -> str:
    return spec.cluster_name


def cluster_queue(spec: ClusterSpec) -> dict[str, Any]:
    """One queue for the stack's GPU pools; each pool a flavor with its quota (tried in the stack's order)."""
    flavors = []
    for pool in spec.gpu_pools:
        gpus, cpus, mem = node_facts(spec, pool)
        n = quota_nodes(pool)
        flavors.append({"name": pool.name, "resources": [
            {"name": "cpu", "nominalQuota": n * cpus},
            {"name": "memory", "nominalQuota": f"{n * mem}Gi"},
            {"name": GPU_RESOURCE, "nominalQuota": n * gpus}]})
    cq: dict[str, Any] = {
        "namespaceSelector": {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In",
                                                    "values": list(spec.workload_namespaces)}]},
        "queueingStrategy": "BestEffortFIFO",
        # Training (higher WorkloadPriorityClass) preempts batch inside the queue.
        "preemption": {"withinClusterQueue": "LowerPriority"},
        "resourceGroups": [{"coveredResources": ["cpu", "memory", GPU_RESOURCE], "flavors": flavors}],
    }
    if spec.scheduling.cohort is not None:
        cq["cohortName"] = spec.scheduling.cohort
        cq["preemption"]["reclaimWithinCohort"] = "Any"
    return {"apiVersion": API, "kind": "ClusterQueue", "metadata": _meta(cluster_queue_name(spec)), "spec": cq}


def local_queues(spec: ClusterSpec) -> list[dict[str, Any]]:
    return [{"apiVersion": API, "kind": "LocalQueue", "metadata": _meta(LOCAL_QUEUE, ns),
             "spec": {"clusterQueue": cluster_queue_name(spec)}} for ns in spec.workload_namespaces]


def workload_priority_classes() -> list[dict[str, Any]]:
    """The PriorityClasses' names and values as Kueue's own priority (what admission and preemption use)."""
    return [{"apiVersion": API, "kind": "WorkloadPriorityClass", "metadata": _meta(name),
             "value": value, "description": desc} for name, (value, desc) in PRIORITY_CLASSES.items()]


def kueue_objects(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Every Kueue object of the stack, in apply order (a flavor names its Topology, the queue its flavors)."""
    if not spec.gpu_pools:
        return []
    return [*(topology(spec, p) for p in spec.gpu_pools), *(resource_flavor(p) for p in spec.gpu_pools),
            *workload_priority_classes(), cluster_queue(spec), *local_queues(spec)]


def plan_rows(spec: ClusterSpec) -> list[dict[str, Any]]:
    """Per GPU pool: flavor, quotas, topology levels and the placement level (``gpufleet plan``)."""
    rows = []
    for pool in spec.gpu_pools:
        gpus, cpus, mem = node_facts(spec, pool)
        n = quota_nodes(pool)
        rows.append({"pool": pool.name, "flavor": pool.name, "cluster_queue": cluster_queue_name(spec),
                     "local_queues": [f"{ns}/{LOCAL_QUEUE}" for ns in spec.workload_namespaces],
                     "quota": {GPU_RESOURCE: n * gpus, "cpu": n * cpus, "memory": f"{n * mem}Gi"},
                     "topology_levels": [label for _, label in topology_levels(spec, pool)],
                     "placement": {"level": placement_level(spec, pool)[1],
                                   "mode": spec.scheduling.topology_mode}})
    return rows
