"""The policy pack on what the providers' documentation asks of the bundled cloud stacks (issue 32): each test
takes the bundled stack's resources as the program declares them (offline, Pulumi's mocks), breaks one the way a
hand edit would, and sees the policy refuse it; the unbroken stack passes every policy."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from gpufleet.infra.offline import OfflinePlan
from tests.cloud_plan import CloudStack, resources, violations

Items = list[tuple[str, dict[str, Any]]]
STACKS = {"aws": CloudStack("aws-p5", "pulumi_aws", "aws"),
          "azure": CloudStack("azure-ndv5", "pulumi_azure_native", "azure"),
          "gcp": CloudStack("gcp-a3mega", "pulumi_gcp", "gcp")}
_PLANS: dict[str, OfflinePlan] = {}


def _items(cloud: str) -> Items:
    stack = STACKS[cloud]
    pytest.importorskip(stack.sdk, reason=f"{cloud} extra not installed (pip install -r requirements-clouds.lock): "
                                          "missing reference data")
    if cloud not in _PLANS:
        _PLANS[cloud] = stack.plan()
    return resources(_PLANS[cloud])


def _first(items: Items, type_: str, where: Callable[[dict[str, Any]], bool] = lambda p: True) -> dict[str, Any]:
    return next(p for t, p in items if t == type_ and where(p))


def _gpu(p: dict[str, Any]) -> bool:
    where = (p.get("tags"), p.get("nodeLabels"), (p.get("nodeConfig") or {}).get("labels"))
    return any(isinstance(labels, dict) and labels.get("gpufleet.io/role") == "gpu" for labels in where)


LT = "aws:ec2/launchTemplate:LaunchTemplate"
GKE_POOL = "gcp:container/nodePool:NodePool"


def _efa_on_one_card(items: Items) -> None:
    for nic in _first(items, LT, _gpu)["networkInterfaces"]:
        nic["networkCardIndex"] = 0


def _no_placement(items: Items) -> None:
    _first(items, LT, _gpu).pop("placement")


def _efa_rule_from_anywhere(items: Items) -> None:
    rule = _first(items, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
                  lambda p: "referencedSecurityGroupId" in p)
    rule.pop("referencedSecurityGroupId")
    rule["cidrIpv4"] = "0.0.0.0/0"


def _public_subnet(items: Items) -> None:
    _first(items, "aws:ec2/subnet:Subnet")["mapPublicIpOnLaunch"] = True


def _open_eks_endpoint(items: Items) -> None:
    cluster = _first(items, "aws:eks/cluster:Cluster")
    cluster["vpcConfig"]["endpointPublicAccess"] = True
    cluster["vpcConfig"].pop("publicAccessCidrs", None)


def _ib_pool_over_zones(items: Items) -> None:
    _first(items, "azure-native:containerservice:AgentPool", _gpu)["availabilityZones"] = ["1", "2", "3"]


def _gpu_vpc_default_mtu(items: Items) -> None:
    _first(items, "gcp:compute/network:Network", lambda p: "tcpxo" in str(p.get("name")))["mtu"] = 1460


def _one_vpc_for_every_nic(items: Items) -> None:
    for net in _first(items, GKE_POOL, _gpu)["networkConfig"]["additionalNodeNetworkConfigs"]:
        net["network"] = "gcp-a3mega-tcpxo-1"


def _gpudirect_on_ubuntu(items: Items) -> None:
    _first(items, GKE_POOL, _gpu)["nodeConfig"]["imageType"] = "UBUNTU_CONTAINERD"


def _one_fsname(items: Items) -> None:
    for t, p in items:
        if t == "gcp:lustre/instance:Instance":
            p["filesystem"] = "lustrefs"


CASES = [
    ("aws", _efa_on_one_card, "efa-interfaces-on-every-card"),
    ("aws", _no_placement, "gpu-launch-template-in-cluster-placement"),
    ("aws", _efa_rule_from_anywhere, "efa-group-references-itself"),
    ("aws", _public_subnet, "no-public-ip-on-launch"),
    ("aws", _open_eks_endpoint, "eks-endpoint-not-open-to-the-world"),
    ("azure", _ib_pool_over_zones, "infiniband-pool-in-one-zone"),
    ("gcp", _gpu_vpc_default_mtu, "gcp-gpu-vpcs-jumbo-mtu"),
    ("gcp", _one_vpc_for_every_nic, "gke-gpu-networks-distinct"),
    ("gcp", _gpudirect_on_ubuntu, "gpudirect-pool-on-cos"),
    ("gcp", _one_fsname, "lustre-fsnames-distinct"),
]


@pytest.mark.parametrize(("cloud", "break_it", "policy"), CASES, ids=[c[2] for c in CASES])
def test_policy_refuses_the_broken_resource(cloud: str, break_it: Callable[[Items], None], policy: str) -> None:
    items = _items(cloud)
    assert violations(items) == {}  # the bundled stack passes
    break_it(items)
    found = violations(items)
    assert policy in found, found
    assert all(msg for msg in found[policy])


@pytest.mark.parametrize("cloud", sorted(STACKS))
def test_bundled_stacks_pass_every_policy(cloud: str) -> None:
    assert violations(_items(cloud)) == {}
