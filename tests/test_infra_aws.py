"""The aws backend, evaluated offline with Pulumi's public mocks (no AWS account, no network): what the program
declares for the bundled stack aws-p5 and variants of it, the stack validation, the inventory hand-off, the
plan summary and the policy pack on cloud resources."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

# Without the extra these skip locally; CI fails instead (the reason says "reference data": tests/conftest.py).
pytest.importorskip("pulumi_aws", reason="aws extra not installed (pip install -r requirements-clouds.lock): "
                                         "missing reference data")

from gpufleet.catalog.clouds import AWS
from gpufleet.errors import ConfigError
from gpufleet.infra.offline import OfflinePlan
from gpufleet.inputs import load_yaml
from gpufleet.inventory import write_inventory
from gpufleet.lock import resolve_lock
from gpufleet.spec import load_spec
from tests.cloud_plan import (
    JOB,
    K8S_PROVIDER,
    NODE_PATCH,
    PV,
    RELEASE,
    CloudStack,
    evaluate_spec,
    gpu_pool,
    one,
    resources,
    violations,
)

STACK = CloudStack("aws-p5", "pulumi_aws", "aws")
LT = "aws:ec2/launchTemplate:LaunchTemplate"
NG = "aws:eks/nodeGroup:NodeGroup"
FSX = "aws:fsx/lustreFileSystem:LustreFileSystem"
ADDON = "aws:eks/addon:Addon"
INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
EGRESS = "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule"
SUBNET = "aws:ec2/subnet:Subnet"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
ASSOC = "aws:ec2/routeTableAssociation:RouteTableAssociation"


@pytest.fixture(scope="module")
def plan() -> OfflinePlan:
    return STACK.plan()


def _user_data(lt: Any) -> str:
    return base64.b64decode(lt.inputs["userData"]).decode()


# --- node pools ------------------------------------------------------------------------------------------


def test_gpu_launch_template_attaches_every_efa_interface(plan: OfflinePlan) -> None:
    lt = plan.named("aws-p5-p5")
    lt = next(r for r in plan.of_type(LT) if r.name == "aws-p5-p5")
    assert lt.inputs["instanceType"] == "p5.48xlarge"
    nics = lt.inputs["networkInterfaces"]
    efa = [n for n in nics if n["interfaceType"] == "efa-only"]
    # p5.48xlarge: 32 EFA (catalog, from the EC2 instance type specifications), one per network card.
    assert AWS.instance_types["p5.48xlarge"].efa_interfaces == 32
    assert len(efa) == 32
    assert sorted(int(n["networkCardIndex"]) for n in efa) == list(range(32))
    primary = [n for n in nics if n["interfaceType"] == "interface"]
    assert [(int(n["networkCardIndex"]), int(n["deviceIndex"])) for n in primary] == [(0, 0)]
    assert {(int(n["networkCardIndex"]), int(n["deviceIndex"])) for n in efa} == \
        {(0, 1)} | {(c, 0) for c in range(1, 32)}
    assert all(n["associatePublicIpAddress"] == "false" for n in nics)
    # Every interface carries the EFA group (self-referencing) and the cluster's group.
    assert all(n["securityGroups"] == ["aws-p5-efa-id", "sg-aws-p5-cluster"] for n in nics)
    assert "vpcSecurityGroupIds" not in lt.inputs  # EC2 refuses both with network interfaces
    placement = next(r for r in plan.of_type("aws:ec2/placementGroup:PlacementGroup"))
    assert placement.inputs["strategy"] == "cluster"
    assert lt.inputs["placement"] == {"groupName": "aws-p5-p5"}
    assert lt.inputs["metadataOptions"]["httpTokens"] == "required"
    assert lt.inputs["tagSpecifications"][0]["tags"] == {
        "gpufleet.io/cluster": "aws-p5", "gpufleet.io/pool": "p5", "gpufleet.io/role": "gpu"}


def test_gpu_node_group_taints_labels_image_and_zone(plan: OfflinePlan) -> None:
    ng = next(r for r in plan.of_type(NG) if r.name == "aws-p5-p5")
    assert ng.inputs["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert ng.inputs["labels"] == {"gpufleet.io/role": "gpu", "gpufleet.io/pool": "p5", "gpufleet.io/fabric": "efa"}
    assert ng.inputs["amiType"] == "AL2023_x86_64_STANDARD"
    assert ng.inputs["capacityType"] == "ON_DEMAND"
    assert "instanceTypes" not in ng.inputs  # the launch template names it
    assert ng.inputs["launchTemplate"] == {"id": "aws-p5-p5-id", "version": "1"}
    assert ng.inputs["scalingConfig"] == {"desiredSize": 2, "minSize": 2, "maxSize": 2}
    # One zone for GPU nodes: the placement group is zonal.
    assert ng.inputs["subnetIds"] == ["aws-p5-private-us-east-1a-id"]
    lt = next(r for r in plan.of_type(LT) if r.name == "aws-p5-p5")
    assert "imageId" not in lt.inputs
    script = _user_data(lt)
    efa = AWS.efa_installer
    assert f"curl -fsSLo efa.tar.gz {efa.url}" in script
    assert f"echo '{efa.sha256}  efa.tar.gz' | sha256sum -c -" in script
    assert "dnf install -y lustre-client" in script
    assert "node.eks.aws" not in script  # EKS bootstraps its own AMI (nodeadm part merged by EKS)


def test_system_node_group_is_cpu_untainted_over_all_zones(plan: OfflinePlan) -> None:
    ng = next(r for r in plan.of_type(NG) if r.name == "aws-p5-system")
    lt = next(r for r in plan.of_type(LT) if r.name == "aws-p5-system")
    assert lt.inputs["instanceType"] == "m7i.2xlarge" and "networkInterfaces" not in lt.inputs
    assert ng.inputs["taints"] == [] and ng.inputs["labels"] == {"gpufleet.io/role": "system",
                                                                 "gpufleet.io/pool": "system"}
    assert ng.inputs["subnetIds"] == ["aws-p5-private-us-east-1a-id", "aws-p5-private-us-east-1b-id"]
    assert "efa_installer" not in _user_data(lt)


def test_user_ami_gets_nodeadm_config_with_taints_and_labels(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["image"] = "ami-0123456789abcdef0"

    plan = evaluate_spec(STACK.variant(tmp_path, change))
    lt = next(r for r in plan.of_type(LT) if r.name == "aws-p5-p5")
    ng = next(r for r in plan.of_type(NG) if r.name == "aws-p5-p5")
    assert lt.inputs["imageId"] == "ami-0123456789abcdef0" and ng.inputs["amiType"] == "CUSTOM"
    data = _user_data(lt)
    config = json.loads(data.split("Content-Type: application/node.eks.aws\n\n", 1)[1].split("\n--", 1)[0])
    assert config["spec"]["cluster"] == {"name": "aws-p5", "apiServerEndpoint": "https://aws-p5.eks.offline.invalid",
                                         "certificateAuthority": "offline-ca", "cidr": "172.20.0.0/16"}
    assert "--register-with-taints=nvidia.com/gpu=present:NoSchedule" in config["spec"]["kubelet"]["flags"]
    assert "--node-labels=gpufleet.io/role=gpu,gpufleet.io/pool=p5" in config["spec"]["kubelet"]["flags"]


def test_capacity_block_and_reservation(tmp_path: Path) -> None:
    def block(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["capacity"] = {"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"}

    plan = evaluate_spec(STACK.variant(tmp_path, block))
    lt = next(r for r in plan.of_type(LT) if r.name == "aws-p5-p5")
    ng = next(r for r in plan.of_type(NG) if r.name == "aws-p5-p5")
    assert ng.inputs["capacityType"] == "CAPACITY_BLOCK"
    assert lt.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
    assert lt.inputs["capacityReservationSpecification"] == {
        "capacityReservationTarget": {"capacityReservationId": "cr-0123456789abcdef0"}}

    def odcr(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["capacity"] = {"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}

    plan = evaluate_spec(STACK.variant(tmp_path, odcr, "aws-odcr"))
    lt = next(r for r in plan.of_type(LT) if r.name == "aws-p5-p5")
    assert "instanceMarketOptions" not in lt.inputs
    assert next(r for r in plan.of_type(NG) if r.name == "aws-p5-p5").inputs["capacityType"] == "ON_DEMAND"


# --- networking ------------------------------------------------------------------------------------------


def test_nodes_live_in_private_subnets_behind_nat(plan: OfflinePlan) -> None:
    subnets = {r.name: r.inputs for r in plan.of_type(SUBNET)}
    assert all(s["mapPublicIpOnLaunch"] is False for s in subnets.values())
    private = {n for n in subnets if "-private-" in n}
    node_subnets = {s for r in plan.of_type(NG) for s in r.inputs["subnetIds"]}
    assert node_subnets == {f"{n}-id" for n in private}
    tables = {r.name: r.inputs for r in plan.of_type(ROUTE_TABLE)}
    for zone in ("us-east-1a", "us-east-1b"):
        assert tables[f"aws-p5-private-{zone}"]["routes"] == [
            {"cidrBlock": "0.0.0.0/0", "natGatewayId": f"aws-p5-nat-{zone}-id"}]
    cluster = plan.of_type("aws:eks/cluster:Cluster")[0].inputs
    assert cluster["vpcConfig"]["endpointPrivateAccess"] is True
    assert cluster["vpcConfig"]["endpointPublicAccess"] is False
    assert cluster["accessConfig"]["authenticationMode"] == "API"
    assert sorted(cluster["vpcConfig"]["subnetIds"]) == sorted(f"{n}-id" for n in private)


def test_eks_version_in_standard_support_and_upgrade_policy_follows_the_opt_in(plan: OfflinePlan,
                                                                             tmp_path: Path) -> None:
    cluster = plan.of_type("aws:eks/cluster:Cluster")[0].inputs
    # EKS's default is EXTENDED (billed once standard support ends): gpufleet asks for STANDARD unless the stack
    # opts in (https://docs.aws.amazon.com/eks/latest/userguide/extended-support-control.html).
    assert (cluster["version"], cluster["upgradePolicy"]) == ("1.35", {"supportType": "STANDARD"})

    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:aws"].update(kubernetes_version="1.33", long_term_support=True)

    lts = evaluate_spec(STACK.variant(tmp_path, change)).of_type("aws:eks/cluster:Cluster")[0].inputs
    assert (lts["version"], lts["upgradePolicy"]) == ("1.33", {"supportType": "EXTENDED"})


def test_efa_security_group_allows_all_traffic_within_itself(plan: OfflinePlan) -> None:
    ingress = [r.inputs for r in plan.of_type(INGRESS) if r.inputs["securityGroupId"] == "aws-p5-efa-id"]
    egress = [r.inputs for r in plan.of_type(EGRESS) if r.inputs["securityGroupId"] == "aws-p5-efa-id"]
    assert ingress == [{"securityGroupId": "aws-p5-efa-id", "ipProtocol": "-1",
                        "referencedSecurityGroupId": "aws-p5-efa-id"}]
    assert {"securityGroupId": "aws-p5-efa-id", "ipProtocol": "-1",
            "referencedSecurityGroupId": "aws-p5-efa-id"} in egress


def test_access_entries(plan: OfflinePlan) -> None:
    entry = plan.of_type("aws:eks/accessEntry:AccessEntry")[0].inputs
    assoc = plan.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")[0].inputs
    assert entry["principalArn"] == "arn:aws:iam::111122223333:role/gpufleet-admins"
    assert assoc["policyArn"] == "arn:aws:eks::aws:cluster-access-policy/AmazonEKSClusterAdminPolicy"
    assert assoc["accessScope"] == {"type": "cluster"}


# --- storage ---------------------------------------------------------------------------------------------


def test_fsx_lustre_file_systems_security_group_and_pvs(plan: OfflinePlan) -> None:
    fs = {r.name: r.inputs for r in plan.of_type(FSX)}
    assert fs["aws-p5-datasets"]["deploymentType"] == "PERSISTENT_2"
    assert fs["aws-p5-datasets"]["perUnitStorageThroughput"] == 250
    assert fs["aws-p5-datasets"]["storageCapacity"] == 24000
    assert fs["aws-p5-checkpoints"]["perUnitStorageThroughput"] == 500
    assert fs["aws-p5-checkpoints"]["storageCapacity"] == 9600
    assert all(f["subnetIds"] == "aws-p5-private-us-east-1a-id" for f in fs.values())
    assert all(f["securityGroupIds"] == ["aws-p5-fsx-id"] for f in fs.values())
    dra = plan.of_type("aws:fsx/dataRepositoryAssociation:DataRepositoryAssociation")[0].inputs
    assert dra["dataRepositoryPath"] == "s3://example-training-datasets/corpus"
    assert dra["fileSystemId"] == "aws-p5-datasets-id"
    # Lustre ports from the nodes' group (AWS's documented FSx for Lustre rules).
    lustre_in = {(r.inputs["fromPort"], r.inputs["toPort"]) for r in plan.of_type(INGRESS)
                 if r.inputs["securityGroupId"] == "aws-p5-fsx-id"
                 and r.inputs["referencedSecurityGroupId"] == "aws-p5-efa-id"}
    assert lustre_in == {(988, 988), (1018, 1023)}
    pvs = {r.inputs["metadata"]["name"]: r.inputs for r in plan.of_type(PV)}
    ds = pvs["lustre-datasets-training"]
    assert ds["spec"]["csi"]["readOnly"] is True
    assert ds["metadata"]["annotations"]["gpufleet.io/mount-path"] == "/lustre/datasets"
    ck = pvs["lustre-checkpoints-training"]
    assert ck["metadata"]["annotations"]["gpufleet.io/mount-path"] == "/lustre/checkpoints"


def test_fsx_pvs_are_in_the_fsx_csi_drivers_static_format(plan: OfflinePlan) -> None:
    # AWS's FSx for Lustre CSI driver (static provisioning, its examples/kubernetes/static_provisioning): the
    # volumeHandle is the file system id, dnsname and mountname say what to mount. HPE's driver name and its
    # <nid>:/<fsname> handle (the code before issue 32) fail here.
    pvs = {r.inputs["metadata"]["name"]: r.inputs for r in plan.of_type(PV)}
    for kind, mount in (("datasets", "datasetsmnt"), ("checkpoints", "checkpointsmnt")):
        csi = pvs[f"lustre-{kind}-training"]["spec"]["csi"]
        assert csi == {"driver": "fsx.csi.aws.com", "readOnly": kind == "datasets",
                       "volumeHandle": f"aws-p5-{kind}-id",
                       "volumeAttributes": {"dnsname": f"aws-p5-{kind}.fsx.offline.invalid",
                                            "mountname": mount}}
    assert AWS.fsx_lustre.csi.driver == "fsx.csi.aws.com"


def test_fsx_csi_driver_is_the_eks_add_on_at_the_pinned_version_with_pod_identity(plan: OfflinePlan) -> None:
    csi = AWS.fsx_lustre.csi
    addon = one(plan, ADDON, "aws-p5-aws-fsx-csi-driver")
    assert addon.inputs["addonName"] == "aws-fsx-csi-driver" and addon.inputs["clusterName"] == "aws-p5"
    assert addon.inputs["addonVersion"] == csi.addon_version
    # The controller's role reaches its service account through EKS Pod Identity (the add-on requires its agent).
    (assoc,) = addon.inputs["podIdentityAssociations"]
    assert assoc == {"roleArn": "arn:aws:iam::000000000000:role/aws-p5-fsx-csi",
                     "serviceAccount": csi.service_account}
    agent = one(plan, ADDON, "aws-p5-eks-pod-identity-agent")
    assert agent.inputs["addonName"] == "eks-pod-identity-agent"
    assert {u.rsplit("::", 1)[1] for u in addon.depends_on} >= {"aws-p5-eks-pod-identity-agent", "aws-p5-p5"}
    role = one(plan, "aws:iam/role:Role", "aws-p5-fsx-csi").inputs
    trust = json.loads(role["assumeRolePolicy"])["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert trust["Action"] == ["sts:AssumeRole", "sts:TagSession"]
    policy = one(plan, "aws:iam/rolePolicyAttachment:RolePolicyAttachment", "aws-p5-fsx-csi-AmazonFSxFullAccess")
    assert policy.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonFSxFullAccess"


def test_no_hpe_lustre_driver_on_eks(plan: OfflinePlan) -> None:
    # The platform layer's HPE chart (and its namespace patches) is for on-prem NIDs only.
    assert not [r for r in plan.of_type(RELEASE) if r.name == "lustre-csi-driver"]
    assert not [r for r in plan.of_type(PV) if r.inputs["spec"]["csi"]["driver"] == "lustre-csi.hpe.com"]
    assert not [r for r in plan.resources if "lustre-csi-system" in json.dumps(r.inputs)]


def test_fsx_volumes_mount_a_file_systems_root(tmp_path: Path) -> None:
    # The FSx CSI driver mounts <dnsname>@tcp:/<mountname>: a subdir would silently be ignored.
    problem = STACK.problem(tmp_path, lambda c: c["gpufleet:storage"]["lustre"]["datasets"].update(
        subdir="/corpus"), "gpufleet:storage.lustre.datasets.subdir")
    assert "FSx for Lustre CSI driver mounts a file system's root" in problem.rule


# --- the platform layer gets the backend's provider -------------------------------------------------------


def test_platform_layer_receives_the_eks_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, plan = STACK.platform_backend(monkeypatch)
    assert backend.provider is not None and backend.provider._name == "aws-p5-k8s"
    assert all(p.taints_at_registration for p in backend.pools)
    assert plan.named("aws-p5").type == "gpufleet:backend:AwsCluster"
    provider = plan.named("aws-p5-k8s")
    assert provider.type == K8S_PROVIDER and provider.inputs["kubeconfig"] == "[secret]"
    # The provider waits for the node groups: nothing of the platform lands before nodes exist.
    assert {u.rsplit("::", 1)[1] for u in provider.depends_on} == {"aws-p5-system", "aws-p5-p5"}
    # Nodes register with their taints: no taint Jobs or node patches for cloud pools.
    assert not plan.of_type(JOB) and not plan.of_type(NODE_PATCH)
    efa = one(plan, RELEASE, "aws-efa-k8s-device-plugin")
    assert efa.inputs["version"] == "v0.5.7" and efa.inputs["namespace"] == "kube-system"
    assert efa.inputs["values"] == {
        "nodeSelector": {"gpufleet.io/fabric": "efa"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}


def test_operator_pools_get_the_lock_driver(plan: OfflinePlan) -> None:
    spec = load_spec("aws-p5")
    assert all(p.host_management == "operator" for p in spec.pools)
    lock = resolve_lock(spec)
    assert lock.driver_managed_by == "operator"
    drivers = plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver")
    assert [d.inputs["spec"]["nodeSelector"] for d in drivers] == [{"gpufleet.io/pool": "p5"}]
    assert {d.inputs["spec"]["version"] for d in drivers} == {lock.driver}


# --- validation, SDK, inventory, plan --------------------------------------------------------------------


def test_cloud_pools_default_to_the_operator(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        del gpu_pool(cfg)["host_management"]

    assert STACK.variant(tmp_path, change).gpu_pools[0].host_management == "operator"
    assert load_spec("onprem-h100").gpu_pools[0].host_management == "ansible"


@pytest.mark.parametrize(("change", "key", "why"), [
    (lambda c: gpu_pool(c).update(instance_type="p5.4xlarge"), "gpufleet:pools[1].instance_type",
     "not an instance type gpufleet's AWS catalog knows"),
    (lambda c: gpu_pool(c).update(gpu="a100-sxm4-40gb"), "gpufleet:pools[1].gpu", "carries 8 x h100-sxm5-80gb"),
    (lambda c: gpu_pool(c).update(fabric="infiniband"), "gpufleet:pools[1].fabric", "their fabric is EFA"),
    (lambda c: gpu_pool(c).update(hosts=[{"name": "n", "address": "10.0.0.1"}]), "gpufleet:pools[1].hosts",
     "no static hosts"),
    (lambda c: c["gpufleet:storage"]["lustre"]["datasets"].update(throughput_mbps_per_tib=200),
     "gpufleet:storage.lustre.datasets.throughput_mbps_per_tib", "PERSISTENT_2 offers these throughputs"),
    (lambda c: c["gpufleet:storage"]["lustre"]["checkpoints"].update(capacity_gib=5000),
     "gpufleet:storage.lustre.checkpoints.capacity_gib", "multiple of 2400 GiB"),
    (lambda c: gpu_pool(c).update(host_management="ansible"), "gpufleet:aws.ssm_bucket", "S3 bucket"),
    (lambda c: c.pop("gpufleet:aws"), "gpufleet:aws", "needs its region"),
])
def test_stack_validation_names_the_key(tmp_path: Path, change: Any, key: str, why: str) -> None:
    assert why in STACK.problem(tmp_path, change, key).rule


def test_missing_sdk_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from gpufleet.infra import backends

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: None if n == "pulumi_aws" else real(n, *a))
    with pytest.raises(ConfigError) as e:
        backends.require_sdk(load_spec("aws-p5"))
    (problem,) = e.value.problems
    assert problem.key == "gpufleet:backend" and problem.fix.startswith("pip install '.[aws]'")


def test_ansible_pools_get_the_aws_ec2_inventory_plugin(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["host_management"] = "ansible"
        cfg["gpufleet:aws"]["ssm_bucket"] = "example-ssm-staging"

    spec = STACK.variant(tmp_path, change)
    out = tmp_path / "inv"
    write_inventory(spec, resolve_lock(spec), {}, out)
    plugin = yaml.safe_load((out / "aws_ec2.yml").read_text())
    assert plugin["plugin"] == "amazon.aws.aws_ec2" and plugin["regions"] == ["us-east-1"]
    assert plugin["filters"] == {"tag:gpufleet.io/cluster": "aws-p5", "tag:gpufleet.io/pool": ["p5"],
                                 "instance-state-name": "running"}
    assert plugin["compose"]["ansible_host"] == "instance_id"
    assert {"key": "tags['gpufleet.io/pool']", "prefix": "pool", "separator": "_"} in plugin["keyed_groups"]
    conn = load_yaml(out / "group_vars" / "pool_p5" / "connection.yml")
    assert conn == {"ansible_connection": "amazon.aws.aws_ssm", "ansible_aws_ssm_region": "us-east-1",
                    "ansible_aws_ssm_bucket_name": "example-ssm-staging", "ansible_become": True}
    assert not (out / "group_vars" / "pool_system" / "connection.yml").exists()
    # The kubelet taints file is for hosts Ansible registers itself; the node group carries them here.
    operator_only = tmp_path / "inv2"
    base = load_spec("aws-p5")
    write_inventory(base, resolve_lock(base), {}, operator_only)
    assert not (operator_only / "aws_ec2.yml").exists()


def test_plan_json_names_fabric_lustre_service_and_cost() -> None:
    from gpufleet.cli.plan import app

    r = CliRunner().invoke(app, ["--stack", "aws-p5", "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.output)
    assert data["note"] == "offline evaluation with mocks — this is not `pulumi preview`"
    cloud = data["cloud"]
    assert (cloud["fabric"], cloud["lustre_service"], cloud["region"]) == ("EFA", "FSx for Lustre", "us-east-1")
    p5 = next(p for p in cloud["pools"] if p["pool"] == "p5")
    assert p5["instance_type"] == "p5.48xlarge" and p5["gpus"] == 16 and p5["gpu"] == "h100-sxm5-80gb"
    assert p5["fabric"] == "EFA x32" and p5["placement"] == "cluster placement group, us-east-1a"
    price = AWS.price("p5.48xlarge", "us-east-1")
    sys_price = AWS.price("m7i.2xlarge", "us-east-1")
    assert price is not None and sys_price is not None
    assert p5["usd_per_hour"] == round(2 * price.usd_per_hour, 4) and p5["price_source"] == price.source
    assert cloud["total_usd_per_hour"] == round(2 * price.usd_per_hour + 3 * sys_price.usd_per_hour, 4)
    assert cloud["total_complete"] is True
    # The managed Kubernetes version, its support end and source (GPUFLEET_TODAY pins the day: tests/conftest.py).
    assert cloud["kubernetes"] == {
        "version": "1.35", "long_term_support": False, "support": "standard", "support_end": "2027-03-27",
        "as_of": "2026-12-04",
        "source": "https://docs.aws.amazon.com/eks/latest/userguide/kubernetes-versions.html#kubernetes-release-calendar"}
    assert {p["lustre_csi_driver"] for p in cloud["pools"]} == {"fsx.csi.aws.com"}


def test_every_instance_type_and_price_cites_its_source() -> None:
    for itype in AWS.instance_types.values():
        assert itype.source.startswith("https://docs.aws.amazon.com/"), itype.name
    for price in AWS.prices:
        assert price.instance_type in AWS.instance_types and price.source.startswith("https://")


# --- policy pack ---------------------------------------------------------------------------------------------


def test_policy_rejects_gpu_pool_without_its_fabric(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["fabric"] = "none"

    assert violations(resources(evaluate_spec(STACK.variant(tmp_path, change)))) == {"gpu-pools-have-their-fabric": [
        "p5.48xlarge supports 32 EFA interfaces, the GPU pool's launch template attaches 0; "
        "set the pool's fabric: efa"]}


def test_policy_rejects_public_ip_and_shared_paths(plan: OfflinePlan) -> None:
    assert violations(resources(plan)) == {}
    items = resources(plan)
    lt = next(p for t, p in items if t == LT and p["tags"]["gpufleet.io/role"] == "gpu")
    lt["networkInterfaces"][0]["associatePublicIpAddress"] = "true"
    assert list(violations(items)) == ["no-public-ip-gpu-nodes"]
    items = resources(plan)
    for t, p in items:
        if t == PV and p["metadata"]["labels"]["gpufleet.io/volume"] == "checkpoints":
            p["spec"]["csi"]["volumeAttributes"] = {"dnsname": "aws-p5-datasets.fsx.offline.invalid",
                                                    "mountname": "datasetsmnt"}
    assert list(violations(items)) == ["datasets-checkpoints-distinct"]


def test_plan_without_the_sdk_is_one_error_exit_1(monkeypatch: pytest.MonkeyPatch) -> None:
    STACK.assert_plan_names_install_command(monkeypatch)


def test_gpufleet_up_checks_the_sdk_before_pulumi(monkeypatch: pytest.MonkeyPatch) -> None:
    STACK.assert_up_checks_sdk_before_pulumi(monkeypatch)


def test_ansible_pool_next_to_operator_pools_is_labelled_out_of_the_operators_driver(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:pools"].append({**gpu_pool(cfg), "name": "p5-host", "host_management": "ansible"})
        cfg["gpufleet:aws"]["ansible_connection"] = "ssh"

    plan = evaluate_spec(STACK.variant(tmp_path, change))
    host = next(r for r in plan.of_type(NG) if r.name == "aws-p5-p5-host").inputs["labels"]
    operator = next(r for r in plan.of_type(NG) if r.name == "aws-p5-p5").inputs["labels"]
    assert host["nvidia.com/gpu.deploy.driver"] == "false"
    assert host["nvidia.com/gpu.deploy.container-toolkit"] == "false"
    assert "nvidia.com/gpu.deploy.driver" not in operator
