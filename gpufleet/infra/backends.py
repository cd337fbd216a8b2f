"""Backends: where a cluster's nodes and its Kubernetes API come from. All return :class:`BackendHandles`."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpufleet.errors import ConfigError, ConfigProblem
from gpufleet.infra.contract import BackendHandles, PoolHandle
from gpufleet.lock import Lock
from gpufleet.spec import ClusterSpec, Host, stack_file


def _host_entry(host: Host) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": host.name, "address": host.address, "connection": host.connection}
    if host.user:
        entry["user"] = host.user
    return entry


def inventory_source(spec: ClusterSpec) -> dict[str, list[dict[str, Any]]]:
    """The stack output the inventory writer reads: static hosts per pool."""
    return {p.name: [_host_entry(h) for h in p.hosts] for p in spec.pools}


class ExistingCluster(pulumi.ComponentResource):
    """An existing Kubernetes cluster on bare metal: we are given a kubeconfig and the hosts of each pool."""

    def __init__(self, name: str, spec: ClusterSpec, kubeconfig: pulumi.Input[str],
                 opts: pulumi.ResourceOptions | None = None,
                 registered_nodes: frozenset[str] | None = None) -> None:
        super().__init__("gpufleet:backend:ExistingCluster", name, None, opts)
        self.provider = k8s.Provider(
            f"{name}-k8s", kubeconfig=kubeconfig, enable_server_side_apply=True,
            opts=pulumi.ResourceOptions(parent=self))
        self.handles = BackendHandles(
            provider=self.provider,
            pools=[PoolHandle(p, tuple(p.hosts)) for p in spec.pools],
            inventory_source=inventory_source(spec),
            registered_nodes=registered_nodes,
        )
        self.register_outputs({"pools": [p.name for p in spec.pools]})


def local_handles(spec: ClusterSpec) -> BackendHandles:
    """The sandbox: containers made by ``gpufleet up``, not by Pulumi, so no Kubernetes provider and no
    hosts here (the sandbox writes its own inventory with container names)."""
    return BackendHandles(provider=None, pools=[PoolHandle(p) for p in spec.pools], inventory_source={})


#: Cloud backends: the module building them and the extra that installs its SDK (pyproject.toml).
CLOUD_SDKS = {"aws": ("gpufleet.infra.aws", "pulumi_aws", "aws"),
              "azure": ("gpufleet.infra.azure", "pulumi_azure_native", "azure"),
              "gcp": ("gpufleet.infra.gcp", "pulumi_gcp", "gcp")}


def require_sdk(spec: ClusterSpec) -> None:
    """Refuse a cloud stack whose SDK is not installed, naming the install command (before any resource)."""
    import importlib.util

    if spec.backend not in CLOUD_SDKS:
        return
    _, sdk, extra = CLOUD_SDKS[spec.backend]
    try:
        found = importlib.util.find_spec(sdk) is not None
    except (ImportError, ValueError):  # a broken or blocked install counts as missing
        found = False
    if not found:
        raise ConfigError([ConfigProblem(
            str(stack_file(spec.stack)), "gpufleet:backend", spec.backend,
            f"the {spec.backend} backend needs its Pulumi SDK ({sdk}), an optional extra that is not installed",
            f"pip install '.[{extra}]'  (pinned versions: requirements-clouds.lock)")])


def make_backend(spec: ClusterSpec, kubeconfig: pulumi.Input[str] | None,
                 lock: Lock | None = None, registered_nodes: frozenset[str] | None = None) -> BackendHandles:
    if spec.backend == "local":
        return local_handles(spec)
    if spec.backend == "existing":
        missing = [p.name for p in spec.pools if not p.hosts and p.host_management == "ansible"]
        if kubeconfig is None or missing:
            problems = []
            if kubeconfig is None:
                problems.append(ConfigProblem(
                    str(stack_file(spec.stack)), "gpufleet:kubeconfig", None,
                    "the existing backend needs the cluster's kubeconfig (a secret)",
                    f"pulumi config set --secret gpufleet:kubeconfig \"$(cat ~/.kube/config)\" "
                    f"--stack {spec.stack}"))
            for name in missing:
                idx = [p.name for p in spec.pools].index(name)
                problems.append(ConfigProblem(
                    str(stack_file(spec.stack)), f"gpufleet:pools[{idx}].hosts", [],
                    "an Ansible-managed pool of the existing backend needs its static hosts",
                    f"list the nodes of pool {name} as hosts: [{{name: ..., address: ...}}]"))
            raise ConfigError(problems)
        return ExistingCluster(spec.cluster_name, spec, kubeconfig, registered_nodes=registered_nodes).handles
    if spec.backend in CLOUD_SDKS and lock is not None:
        require_sdk(spec)
        if spec.backend == "azure":
            from gpufleet.infra.azure import AzureCluster

            return AzureCluster(spec.cluster_name, spec, lock).handles
        if spec.backend == "gcp":
            from gpufleet.infra.gcp import GcpCluster

            return GcpCluster(spec.cluster_name, spec, lock).handles
        from gpufleet.infra.aws import AwsCluster

        return AwsCluster(spec.cluster_name, spec, lock).handles
    # Every backend the spec accepts is handled above; a cloud one needs the lock (program.build passes it).
    raise ValueError(f"the {spec.backend} backend needs the stack's resolved lock")
