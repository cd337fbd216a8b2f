"""The health watcher's Kubernetes objects (issue 31 point 2), deployed when the stack sets ``gpufleet:healthWatch``.

* A node agent DaemonSet per GPU pool (:mod:`gpufleet.validation.node_agent`): no API token, no shell (the
  image's Python runs the module), non-root, read-only root filesystem, no capabilities; one read-only
  hostPath (``/var/log``, for the kernel log's Xid lines); ``nvidia-smi`` from the NVIDIA container runtime
  (runtime class ``nvidia``, which the GPU Operator creates: its chart's ``operator.runtimeClass``). It
  tolerates its pool's taints and the health taint (every effect): a node tainted ``NoExecute`` must still
  be checked, or it could never be cleared.
* One controller Deployment on system nodes (:mod:`gpufleet.validation.watcher`), restricted Pod Security,
  whose RBAC is: Nodes get and patch (read the record, write the taint), Events create in ``default`` (where
  core/v1 keeps Events about cluster-scoped objects), and Pods list in this namespace (to find the agents and
  the node each runs on). No list of Nodes, no Secrets, nothing else.
* NetworkPolicies: only the controller reaches the agents' port; only the monitoring namespace the
  controller's metrics port. A Service and ServiceMonitor for the metrics (``gpufleet_health_*``).

Pod Security: the hostPath puts the gpufleet namespace at ``privileged`` when the watcher is on
(``manifests.gpufleet_namespace_level``), as the drift CronJob's textfile hostPath does; every pod there
still sets the restricted profile's fields itself.
"""

from __future__ import annotations

from typing import Any

from gpufleet.infra import charts
from gpufleet.infra.manifests import MANAGED_BY, RESTRICTED_CONTAINER, RESTRICTED_POD, system_placement
from gpufleet.infra.scheduling import POOL_LABEL, node_taints, toleration
from gpufleet.spec import ClusterSpec, NodePool
from gpufleet.validation.node_agent import AGENT_PORT
from gpufleet.validation.watcher import (
    AGENT_NAME,
    APP_LABEL,
    CONTROLLER_NAME,
    EVENTS_NAMESPACE,
    METRICS_PORT,
)
from gpufleet.validation.xid import HEALTH_TAINT_KEY

NS = charts.GPUFLEET_NAMESPACE
#: Where the image holds this repository and its venv (the drift image's layout: gpufleet/drift/deploy).
WORKDIR = "/opt/gpufleet"
PYTHON = ".venv/bin/python"
#: The GPU Operator's RuntimeClass (chart value operator.runtimeClass, default "nvidia"): the NVIDIA container
#: runtime mounts nvidia-smi and NVML into the container for NVIDIA_DRIVER_CAPABILITIES=utility.
RUNTIME_CLASS = "nvidia"
#: Group ``adm`` on Debian and Ubuntu, which owns /var/log/kern.log (syslog:adm 0640): read it without root.
LOG_GROUP = 4
HOST_LOG = "/host/var/log"


def _meta(name: str, namespace: str | None = NS, **labels: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "labels": {**MANAGED_BY, **labels}}
    if namespace:
        meta["namespace"] = namespace
    return meta


def agent_tolerations(pool: NodePool) -> list[dict[str, Any]]:
    """The pool's taints, and the health taint with any value and effect."""
    return [*(toleration(t) for t in node_taints(pool)), {"key": HEALTH_TAINT_KEY, "operator": "Exists"}]


def agent_daemonset(spec: ClusterSpec, pool: NodePool) -> dict[str, Any]:
    assert spec.health_watch is not None
    labels = {APP_LABEL: AGENT_NAME, POOL_LABEL: pool.name}
    container = {
        "name": "agent", "image": spec.health_watch.image, "imagePullPolicy": "IfNotPresent",
        "workingDir": WORKDIR,
        "command": [PYTHON, "-m", "gpufleet.validation.node_agent", "--port", str(AGENT_PORT),
                    "--kernel-log-file", f"{HOST_LOG}/kern.log",
                    # An Xid counts for four intervals: seen by at least one cycle even if one is slow.
                    "--kernel-log-window-s", str(4 * spec.health_watch.interval_s)],
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
                {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"},
                {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}],
        "ports": [{"name": "bundle", "containerPort": AGENT_PORT, "protocol": "TCP"}],
        "readinessProbe": {"httpGet": {"path": "/healthz", "port": AGENT_PORT}, "periodSeconds": 30},
        "securityContext": dict(RESTRICTED_CONTAINER),
        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}, "limits": {"memory": "256Mi"}},
        "volumeMounts": [{"name": "varlog", "mountPath": HOST_LOG, "readOnly": True}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": _meta(f"{AGENT_NAME}-{pool.name}", **labels),
        "spec": {
            "selector": {"matchLabels": labels},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {"metadata": {"labels": {**MANAGED_BY, **labels}}, "spec": {
                "serviceAccountName": AGENT_NAME, "automountServiceAccountToken": False,
                "enableServiceLinks": False, "runtimeClassName": RUNTIME_CLASS,
                "nodeSelector": {POOL_LABEL: pool.name},
                "tolerations": agent_tolerations(pool),
                "securityContext": {**RESTRICTED_POD, "supplementalGroups": [LOG_GROUP]},
                "containers": [container],
                # Directory: never created on a node that lacks it (a read-only mount of nothing says so).
                "volumes": [{"name": "varlog", "hostPath": {"path": "/var/log", "type": "Directory"}}]}}}}


def controller_deployment(spec: ClusterSpec) -> dict[str, Any]:
    watch = spec.health_watch
    assert watch is not None
    labels = {APP_LABEL: CONTROLLER_NAME}
    container = {
        "name": "controller", "image": watch.image, "imagePullPolicy": "IfNotPresent", "workingDir": WORKDIR,
        "command": [PYTHON, "-m", "gpufleet.validation.watcher", "--stack", spec.stack,
                    "--namespace", NS, "--interval-s", str(watch.interval_s),
                    "--max-share", repr(watch.max_share), "--healthy-streak", str(watch.healthy_streak),
                    "--agent-port", str(AGENT_PORT), "--metrics-port", str(METRICS_PORT)],
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "PYTHONDONTWRITEBYTECODE", "value": "1"}],
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        "livenessProbe": {"httpGet": {"path": "/healthz", "port": METRICS_PORT}, "periodSeconds": 60},
        "securityContext": dict(RESTRICTED_CONTAINER),
        "resources": {"requests": {"cpu": "50m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(CONTROLLER_NAME, **labels),
        "spec": {
            # One controller at a time, never two during a rollout: each would count the rate limit alone.
            "replicas": 1, "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": {**MANAGED_BY, **labels}}, "spec": {
                "serviceAccountName": CONTROLLER_NAME, "enableServiceLinks": False,
                **system_placement(),
                "securityContext": dict(RESTRICTED_POD), "containers": [container],
                "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}}]}}}}


def rbac() -> list[dict[str, Any]]:
    rbac_api = "rbac.authorization.k8s.io/v1"
    subject = [{"kind": "ServiceAccount", "name": CONTROLLER_NAME, "namespace": NS}]
    events_role = f"{CONTROLLER_NAME}-events"
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "automountServiceAccountToken": False,
         "metadata": _meta(AGENT_NAME)},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(CONTROLLER_NAME)},
        {"apiVersion": rbac_api, "kind": "ClusterRole", "metadata": _meta(CONTROLLER_NAME, None),
         "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]}]},
        {"apiVersion": rbac_api, "kind": "ClusterRoleBinding", "metadata": _meta(CONTROLLER_NAME, None),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": CONTROLLER_NAME},
         "subjects": subject},
        {"apiVersion": rbac_api, "kind": "Role", "metadata": _meta(CONTROLLER_NAME),
         "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]}]},
        {"apiVersion": rbac_api, "kind": "RoleBinding", "metadata": _meta(CONTROLLER_NAME),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CONTROLLER_NAME},
         "subjects": subject},
        {"apiVersion": rbac_api, "kind": "Role", "metadata": _meta(events_role, EVENTS_NAMESPACE),
         "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]},
        {"apiVersion": rbac_api, "kind": "RoleBinding", "metadata": _meta(events_role, EVENTS_NAMESPACE),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": events_role},
         "subjects": subject},
    ]


def network_policies() -> list[dict[str, Any]]:
    def pol(name: str, target: str, peer: dict[str, Any], port: int) -> dict[str, Any]:
        return {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": _meta(name),
                "spec": {"podSelector": {"matchLabels": {APP_LABEL: target}}, "policyTypes": ["Ingress"],
                         "ingress": [{"from": [peer], "ports": [{"protocol": "TCP", "port": port}]}]}}

    return [pol(AGENT_NAME, AGENT_NAME, {"podSelector": {"matchLabels": {APP_LABEL: CONTROLLER_NAME}}}, AGENT_PORT),
            pol(CONTROLLER_NAME, CONTROLLER_NAME, {"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": charts.MONITORING_NAMESPACE}}}, METRICS_PORT)]


def metrics_objects(monitor_labels: dict[str, str]) -> list[dict[str, Any]]:
    labels = {APP_LABEL: CONTROLLER_NAME}
    return [
        {"apiVersion": "v1", "kind": "Service", "metadata": _meta(CONTROLLER_NAME, **labels),
         "spec": {"selector": labels, "ports": [{"name": "metrics", "port": METRICS_PORT,
                                                 "targetPort": "metrics", "protocol": "TCP"}]}},
        {"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
         "metadata": _meta(CONTROLLER_NAME, **labels, **monitor_labels),
         "spec": {"selector": {"matchLabels": labels}, "namespaceSelector": {"matchNames": [NS]},
                  "endpoints": [{"port": "metrics", "interval": "60s"}]}},
    ]


def health_watch_objects(spec: ClusterSpec, monitor_labels: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """Every object of the watcher, in apply order; [] when the stack does not set healthWatch."""
    if spec.health_watch is None or not spec.gpu_pools:
        return []
    return [*rbac(), *network_policies(), controller_deployment(spec),
            *(agent_daemonset(spec, p) for p in spec.gpu_pools), *metrics_objects(monitor_labels or {})]
