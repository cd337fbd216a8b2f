"""Offline evaluation of the Pulumi program with the SDK's public mock API (``gpufleet plan``, tests).

This runs our program against ``pulumi.runtime.set_mocks`` inside ``@pulumi.runtime.test``: no Pulumi
CLI, no provider plugins, no cluster. It shows what the program declares (resources, parents, inputs,
dependencies) — it is NOT ``pulumi preview``, which diffs against real state and lets the providers check
the inputs.

Everything used is public SDK API: ``Mocks.new_resource`` sees each resource's type, name and resolved
inputs; a stack transformation (``pulumi.runtime.register_stack_transformation``, run by the SDK for every
resource) sees its parent and ``depends_on``.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass, field
from typing import Any

import pulumi

from gpufleet.lock import Lock
from gpufleet.spec import ClusterSpec

DISCLAIMER = "offline evaluation with mocks — this is not `pulumi preview`"
REDACTED = "[secret]"
PLACEHOLDER_KUBECONFIG = "offline-plan-placeholder-kubeconfig"
#: Inputs that hold secrets, by resource type: shown as REDACTED whatever the mock received.
SECRET_INPUTS: dict[str, tuple[str, ...]] = {
    "pulumi:providers:kubernetes": ("kubeconfig",),
    "kubernetes:core/v1:Secret": ("data", "stringData"),
}


@dataclass
class PlannedResource:
    type: str
    name: str
    urn: str
    #: Name of the parent resource (None for top-level ones) and its URN (names may repeat across types).
    parent: str | None
    parent_urn: str | None
    custom: bool
    inputs: dict[str, Any]
    #: URNs of the resources this one ``depends_on`` (explicitly, as the program declares it).
    depends_on: list[str] = field(default_factory=list)


@dataclass
class OfflinePlan:
    stack: str
    resources: list[PlannedResource]
    outputs: dict[str, Any]
    warnings: list[str] = field(default_factory=list)

    def of_type(self, type_: str) -> list[PlannedResource]:
        return [r for r in self.resources if r.type == type_]

    def named(self, name: str) -> PlannedResource:
        return next(r for r in self.resources if r.name == name)

    def by_urn(self, urn: str) -> PlannedResource:
        return next(r for r in self.resources if r.urn == urn)

    def depends(self, res: PlannedResource) -> set[str]:
        """URNs ``res`` waits for: its own depends_on and its ancestors', transitively (as the engine does)."""
        seen: set[str] = set()
        todo = [res]
        while todo:
            cur = todo.pop()
            nxt = list(cur.depends_on) + ([cur.parent_urn] if cur.parent_urn else [])
            for urn in nxt:
                if urn not in seen:
                    seen.add(urn)
                    todo.append(self.by_urn(urn))
        return seen


def redact(type_: str, inputs: dict[str, Any]) -> dict[str, Any]:
    secret = SECRET_INPUTS.get(type_, ())
    return {k: (REDACTED if k in secret else v) for k, v in inputs.items()}


#: Outputs a cloud assigns (endpoints, DNS names, versions), as obvious placeholders: the mock state is the
#: inputs plus these, so the program's derived values (kubeconfig, Lustre volume handles) can be shown.
COMPUTED: dict[str, Any] = {
    "aws:eks/cluster:Cluster": lambda n, i: {
        "endpoint": f"https://{n}.eks.offline.invalid", "certificateAuthority": {"data": "offline-ca"},
        "vpcConfig": {**(i.get("vpcConfig") or {}), "clusterSecurityGroupId": f"sg-{n}-cluster"},
        "kubernetesNetworkConfig": {"serviceIpv4Cidr": "172.20.0.0/16"}},
    "aws:fsx/lustreFileSystem:LustreFileSystem": lambda n, i: {
        "dnsName": f"{n}.fsx.offline.invalid", "mountName": f"{n.rsplit('-', 1)[-1]}mnt"},
    "aws:ec2/launchTemplate:LaunchTemplate": lambda n, i: {"latestVersion": 1},
    "aws:ec2/placementGroup:PlacementGroup": lambda n, i: {"name": i.get("name") or n},
    "aws:iam/role:Role": lambda n, i: {"arn": f"arn:aws:iam::000000000000:role/{n}", "name": n},
    # Azure: names are inputs under their own key; ids of the mock are "<name>-id".
    "azure-native:resources:ResourceGroup": lambda n, i: {"name": i.get("resourceGroupName")},
    "azure-native:network:VirtualNetwork": lambda n, i: {"name": i.get("virtualNetworkName")},
    # Its identity is a list of ids as an input and a map keyed by id as an output.
    "azure-native:containerservice:ManagedCluster": lambda n, i: {
        "name": i.get("resourceName"),
        "identity": {"type": "UserAssigned",
                     "userAssignedIdentities": {k: {} for k in (i.get("identity") or {}).get("userAssignedIdentities")
                                                or []}}},
    "azure-native:managedidentity:UserAssignedIdentity": lambda n, i: {"principalId": f"{n}-principal"},
    "azure-native:storagecache:AmlFilesystem": lambda n, i: {
        "clientInfo": {"mgsAddress": f"{n}.mgs.offline.invalid"}},
    # Google Cloud: the GKE endpoints and CA, the node service account's address, the Lustre mount point.
    "gcp:container/cluster:Cluster": lambda n, i: {
        "endpoint": f"{n}.gke.offline.invalid",
        "privateClusterConfig": {**(i.get("privateClusterConfig") or {}), "privateEndpoint": "172.16.0.2"},
        "masterAuth": {"clusterCaCertificate": "offline-ca"}},
    "gcp:serviceaccount/account:Account": lambda n, i: {
        "email": f"{i.get('accountId')}@offline.iam.gserviceaccount.com"},
    "gcp:lustre/instance:Instance": lambda n, i: {
        "mountPoint": f"{n}.lustre.offline.invalid@tcp:/{i.get('filesystem')}"},
    "gcp:compute/globalAddress:GlobalAddress": lambda n, i: {"name": i.get("name") or n},
    "gcp:compute/router:Router": lambda n, i: {"name": i.get("name") or n},
}
#: Results of provider functions the program calls, as placeholders (a kubeconfig is a secret either way).
CALLS: dict[str, Any] = {
    "azure-native:containerservice:listManagedClusterUserCredentials": lambda a: {
        "kubeconfigs": [{"name": "clusterUser",
                         "value": base64.b64encode(PLACEHOLDER_KUBECONFIG.encode()).decode()}]},
}


class _Mocks(pulumi.runtime.Mocks):
    """Returns each resource's inputs (plus ``COMPUTED`` placeholders) as its state and records them."""

    def __init__(self) -> None:
        self.inputs: dict[tuple[str, str], tuple[bool, dict[str, Any]]] = {}

    def new_resource(self, args: pulumi.runtime.MockResourceArgs) -> tuple[str | None, dict[Any, Any]]:
        self.inputs[(args.typ, args.name)] = (bool(args.custom), dict(args.inputs))
        computed = COMPUTED.get(args.typ)
        return f"{args.name}-id", {**args.inputs, **(computed(args.name, args.inputs) if computed else {})}

    def call(self, args: pulumi.runtime.MockCallArgs) -> tuple[dict[Any, Any], list[tuple[str, str]]]:
        result = CALLS.get(args.token)
        return (result(args.args) if result else {}), []


@dataclass
class _Declared:
    type: str
    name: str
    parent: tuple[str, str] | None
    depends_on: list[tuple[str, str]]


def _key(res: pulumi.Resource) -> tuple[str, str]:
    # A stack transformation sees resources before they are registered: type and name are what it was
    # given; resources are recorded under the same pair as the mock records them.
    return (getattr(res, "_gpufleet_type", ""), getattr(res, "_gpufleet_name", ""))


class _Record:
    """Stack transformation: records parent and depends_on of every resource, changes nothing."""

    def __init__(self) -> None:
        self.declared: list[_Declared] = []

    def __call__(self, args: pulumi.ResourceTransformationArgs) -> pulumi.ResourceTransformationResult | None:
        res = args.resource
        res._gpufleet_type = args.type_  # type: ignore[attr-defined]
        res._gpufleet_name = args.name  # type: ignore[attr-defined]
        opts = args.opts
        parent = _key(opts.parent) if opts.parent is not None and hasattr(opts.parent, "_gpufleet_type") else None
        deps = opts.depends_on or []
        deps_list = deps if isinstance(deps, list) else [deps]
        self.declared.append(_Declared(args.type_, args.name, parent,
                                       [_key(d) for d in deps_list if isinstance(d, pulumi.Resource)]))
        return None


class _Collect(logging.Handler):
    """Keeps the program's warnings (pulumi.log.warn) for the plan instead of printing them."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.warnings: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.warnings.append(record.getMessage())


def _urns(declared: list[_Declared], stack: str) -> dict[tuple[str, str], str]:
    """URNs as the engine forms them: the parent's type chain, then the type, then the name."""
    by_key = {(d.type, d.name): d for d in declared}
    out: dict[tuple[str, str], str] = {}

    def chain(d: _Declared) -> str:
        if d.parent is None or d.parent not in by_key:
            return d.type
        return chain(by_key[d.parent]) + "$" + d.type

    for d in declared:
        out[(d.type, d.name)] = f"urn:pulumi:{stack}::gpufleet::{chain(d)}::{d.name}"
    return out


def evaluate(spec: ClusterSpec, lock: Lock, *, operator_dcgm_exporter: bool = True,
             registered_nodes: frozenset[str] | None = None) -> OfflinePlan:
    """Run the program for ``spec`` against mocks and return what it declared (``registered_nodes``: the Nodes
    the cluster is taken to have; None, the default for a plan, labels every host)."""
    mocks = _Mocks()
    collect = _Collect()
    logger = logging.getLogger("gpufleet.offline")
    logger.propagate = False
    logger.handlers = [collect]
    pulumi.runtime.set_mocks(mocks, project="gpufleet", stack=spec.stack, preview=True, logger=logger)
    record = _Record()
    pulumi.runtime.register_stack_transformation(record)
    # Program modules are imported only now, after set_mocks, as the SDK's mock testing requires.
    from gpufleet.infra import program

    outputs: dict[str, Any] = {}

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def run() -> None:
        kubeconfig = pulumi.Output.secret(PLACEHOLDER_KUBECONFIG) if spec.backend == "existing" else None
        outputs.update(program.build(spec, lock, kubeconfig, operator_dcgm_exporter=operator_dcgm_exporter,
                                     registered_nodes=registered_nodes))

    run()
    urns = _urns(record.declared, spec.stack)
    resources = []
    for d in record.declared:
        custom, inputs = mocks.inputs.get((d.type, d.name), (False, {}))
        parent_urn = urns.get(d.parent) if d.parent else None
        resources.append(PlannedResource(
            type=d.type, name=d.name, urn=urns[(d.type, d.name)], parent=d.parent[1] if d.parent else None,
            parent_urn=parent_urn, custom=custom, inputs=redact(d.type, inputs),
            depends_on=[urns[k] for k in d.depends_on if k in urns]))
    return OfflinePlan(stack=spec.stack, resources=resources, outputs=outputs, warnings=collect.warnings)
