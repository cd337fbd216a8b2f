"""The gcp backend, evaluated offline with Pulumi's public mocks (no Google Cloud project, no network): what the
program declares for the bundled stack gcp-a3mega and variants of it, the stack validation and lock rules of the
driver management, the plan summary and the policy pack on GKE resources."""

from __future__ import annotations

import ipaddress
import json
import re
from pathlib import Path
from typing import Any

import pytest

# Without the extra these skip locally; CI fails instead (the reason says "reference data": tests/conftest.py).
pytest.importorskip("pulumi_gcp", reason="gcp extra not installed (pip install -r requirements-clouds.lock): "
                                         "missing reference data")

from gpufleet.catalog.clouds import GCP, PINNED_MANIFEST
from gpufleet.errors import ConfigError
from gpufleet.infra.offline import OfflinePlan
from gpufleet.lock import render_gpu_operator_values, resolve_lock
from tests.cloud_plan import (
    JOB,
    NODE_PATCH,
    PV,
    RELEASE,
    CloudStack,
    evaluate_spec,
    gpu_pool,
    one,
    pvs,
    resources,
    violations,
)

STACK = CloudStack("gcp-a3mega", "pulumi_gcp", "gcp")
POOL = "gcp:container/nodePool:NodePool"
CLUSTER = "gcp:container/cluster:Cluster"
NETWORK = "gcp:compute/network:Network"
SUBNET = "gcp:compute/subnetwork:Subnetwork"
FIREWALL = "gcp:compute/firewall:Firewall"
LUSTRE = "gcp:lustre/instance:Instance"
CONFIG_FILE = "kubernetes:yaml/v2:ConfigFile"
GPU_TYPE = "a3-megagpu-8g"


@pytest.fixture(scope="module")
def plan() -> OfflinePlan:
    return STACK.plan()


def _gpu(plan: OfflinePlan) -> dict[str, Any]:
    return one(plan, POOL, "gcp-a3mega-a3mega").inputs


# --- node pools ------------------------------------------------------------------------------------------


def test_gpu_node_pool_attaches_every_tcpxo_network_with_compact_placement(plan: OfflinePlan) -> None:
    pool = _gpu(plan)
    # a3-megagpu-8g: 8 H100, GPUDirect-TCPXO over 8 GPU NICs, one VPC each (catalog, from Google's pages).
    mt = GCP.machine_types[GPU_TYPE]
    assert (mt.gpus, mt.gpudirect, mt.gpu_nics, mt.extra_gvnics) == (8, "tcpxo", 8, 0)
    node = pool["nodeConfig"]
    assert node["machineType"] == GPU_TYPE
    assert node["guestAccelerators"] == [{"type": "nvidia-h100-mega-80gb", "count": 8,
                                          "gpuDriverInstallationConfig": {"gpuDriverVersion": "INSTALLATION_DISABLED"}}]
    assert pool["networkConfig"] == {"enablePrivateNodes": True, "additionalNodeNetworkConfigs": [
        {"network": f"gcp-a3mega-tcpxo-{i}", "subnetwork": f"gcp-a3mega-tcpxo-{i}-sub"} for i in range(1, 9)]}
    assert node["gvnic"] == {"enabled": True}
    assert pool["placementPolicy"] == {"type": "COMPACT"}
    assert pool["nodeLocations"] == ["us-east4-a"] and pool["location"] == "us-east4"
    assert (pool["autoscaling"], pool["initialNodeCount"]) == ({"minNodeCount": 2, "maxNodeCount": 2}, 2)
    assert "reservationAffinity" not in node


def test_gpu_node_pool_taints_labels_and_image(plan: OfflinePlan) -> None:
    node = _gpu(plan)["nodeConfig"]
    # The same taint and labels as every backend's GPU pools; GKE registers the nodes with them.
    assert node["taints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NO_SCHEDULE"}]
    assert node["labels"] == {"gpufleet.io/role": "gpu", "gpufleet.io/pool": "a3mega",
                              "gpufleet.io/fabric": "gpudirect",
                              # The GPU Operator's device plugin advertises the GPUs, not GKE's.
                              "gke-no-default-nvidia-gpu-device-plugin": "true"}
    # TCPXO runs on COS only: Google's COS installer puts the driver there (host_management gke).
    assert node["imageType"] == "COS_CONTAINERD"
    assert node["resourceLabels"] == {"gpufleet-cluster": "gcp-a3mega", "gpufleet-pool": "a3mega",
                                      "gpufleet-role": "gpu", "gpufleet-host-management": "gke"}
    assert node["workloadMetadataConfig"] == {"mode": "GKE_METADATA"}
    assert node["serviceAccount"] == "gcp-a3mega-nodes@offline.iam.gserviceaccount.com"


def test_system_pool_is_cpu_untainted(plan: OfflinePlan) -> None:
    pool = one(plan, POOL, "gcp-a3mega-system").inputs
    node = pool["nodeConfig"]
    assert node["machineType"] == "n4-standard-16" and node["taints"] == []
    assert node["labels"] == {"gpufleet.io/role": "system", "gpufleet.io/pool": "system"}
    assert "guestAccelerators" not in node and "placementPolicy" not in pool
    assert node["diskType"] == "hyperdisk-balanced"  # N4 boots from Hyperdisk only
    assert pool["nodeCount"] == 3 and pool["networkConfig"] == {"enablePrivateNodes": True}


def test_specific_reservation_replaces_compact_placement(tmp_path: Path) -> None:
    rid = "projects/example-ml-project/reservations/a3mega-reserved"
    spec = STACK.variant(tmp_path, lambda c: gpu_pool(c).update(capacity={"type": "reservation",
                                                                          "reservation_id": rid}))
    pool = _gpu(evaluate_spec(spec))
    assert pool["nodeConfig"]["reservationAffinity"] == {
        "consumeReservationType": "SPECIFIC_RESERVATION", "key": "compute.googleapis.com/reservation-name",
        "values": [rid]}
    assert "placementPolicy" not in pool


def test_a3_ultra_gets_a_gvnic_vpc_and_one_roce_vpc_with_a_subnet_per_nic(tmp_path: Path) -> None:
    spec = STACK.variant(tmp_path, lambda c: gpu_pool(c).update(instance_type="a3-ultragpu-8g",
                                                               gpu="h200-sxm-141gb"))
    plan = evaluate_spec(spec)
    nets = _gpu(plan)["networkConfig"]["additionalNodeNetworkConfigs"]
    assert nets == [{"network": "gcp-a3mega-rdma-gvnic-1", "subnetwork": "gcp-a3mega-rdma-gvnic-1-sub"},
                    *[{"network": "gcp-a3mega-rdma-net", "subnetwork": f"gcp-a3mega-rdma-net-sub-{i}"}
                      for i in range(8)]]
    vpcs = {r.inputs["name"]: r.inputs for r in plan.of_type(NETWORK)}
    assert vpcs["gcp-a3mega-rdma-net"]["networkProfile"] == (
        "projects/example-ml-project/global/networkProfiles/us-east4-a-vpc-roce")
    params = {r.inputs["metadata"]["name"]: r.inputs["spec"]
              for r in plan.of_type("kubernetes:networking.gke.io/v1:GKENetworkParamSet")}
    assert params["rdma-rdma-0"] == {"vpc": "gcp-a3mega-rdma-net",
                                     "vpcSubnet": "gcp-a3mega-rdma-net-sub-0", "deviceMode": "RDMA"}
    assert params["rdma-gvnic-1"]["deviceMode"] == "NetDevice"
    # The RoCE VPC gets no firewall rule (RDMA, not IP); the gVNIC VPC does.
    rules = {r.inputs["network"] for r in plan.of_type(FIREWALL)}
    assert "gcp-a3mega-rdma-gvnic-1-id" in rules and "gcp-a3mega-rdma-net-id" not in rules
    installers = [r.inputs["file"] for r in plan.of_type(CONFIG_FILE)]
    assert GCP.gpudirect["rdma"].installers[0] in installers
    # GKE's compact placement does not list H200: no placement policy on A3 Ultra.
    assert "placementPolicy" not in _gpu(plan)


def _unknown_arguments(plan: OfflinePlan) -> list[str]:
    """Argument names pulumi-gcp does not know: the SDK translates the ones it knows to the API's camelCase and
    passes others on untouched (snake_case), where the mocks accept them and the real API would refuse them."""
    out: list[str] = []

    def walk(node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if "_" in key:
                    out.append(f"{path}.{key}")
                walk(value, f"{path}.{key}")
        elif isinstance(node, list):
            for value in node:
                walk(value, f"{path}[]")

    for r in plan.resources:
        if r.type.startswith("gcp:"):
            walk(r.inputs, r.name)
    return out


def test_every_argument_is_one_pulumi_gcp_knows(plan: OfflinePlan, tmp_path: Path) -> None:
    assert _unknown_arguments(plan) == []
    ultra = STACK.variant(tmp_path, lambda c: gpu_pool(c).update(
        instance_type="a3-ultragpu-8g", gpu="h200-sxm-141gb",
        capacity={"type": "reservation", "reservation_id": "projects/example-ml-project/reservations/r1"})
        or c["gpufleet:gcp"].update(private_endpoint=False, authorized_networks=["203.0.113.0/24"],
                                    kubernetes_version="1.34"))
    assert _unknown_arguments(evaluate_spec(ultra)) == []


# --- networking ------------------------------------------------------------------------------------------


def test_private_nodes_nat_and_dataplane_v2_multinetworking(plan: OfflinePlan) -> None:
    cluster = plan.of_type(CLUSTER)[0].inputs
    assert cluster["privateClusterConfig"] == {"enablePrivateNodes": True, "enablePrivateEndpoint": True,
                                               "masterIpv4CidrBlock": "172.16.0.0/28"}
    assert (cluster["datapathProvider"], cluster["enableMultiNetworking"]) == ("ADVANCED_DATAPATH", True)
    assert cluster["networkingMode"] == "VPC_NATIVE" and cluster["ipAllocationPolicy"] == {
        "clusterSecondaryRangeName": "pods", "servicesSecondaryRangeName": "services"}
    assert cluster["removeDefaultNodePool"] is True and cluster["location"] == "us-east4"
    assert cluster["workloadIdentityConfig"] == {"workloadPool": "example-ml-project.svc.id.goog"}
    nodes = one(plan, SUBNET, "gcp-a3mega-nodes").inputs
    assert nodes["privateIpGoogleAccess"] is True and nodes["ipCidrRange"] == "10.40.0.0/20"
    assert nodes["secondaryIpRanges"] == [{"rangeName": "pods", "ipCidrRange": "10.44.0.0/14"},
                                          {"rangeName": "services", "ipCidrRange": "10.40.16.0/20"}]
    nat = plan.of_type("gcp:compute/routerNat:RouterNat")[0].inputs
    assert nat["sourceSubnetworkIpRangesToNat"] == "ALL_SUBNETWORKS_ALL_IP_RANGES"
    assert nat["natIpAllocateOption"] == "AUTO_ONLY"
    # No address of ours is external: the NAT's are Google's (AUTO_ONLY).
    assert not plan.of_type("gcp:compute/address:Address")


def test_public_endpoint_only_when_asked(tmp_path: Path) -> None:
    spec = STACK.variant(tmp_path, lambda c: c["gpufleet:gcp"].update(private_endpoint=False,
                                                                      authorized_networks=["203.0.113.0/24"]))
    cluster = evaluate_spec(spec).of_type(CLUSTER)[0].inputs
    assert cluster["privateClusterConfig"]["enablePrivateEndpoint"] is False
    assert cluster["masterAuthorizedNetworksConfig"] == {"cidrBlocks": [{"cidrBlock": "203.0.113.0/24"}]}


def test_gpu_vpcs_mtu_subnets_and_firewall(plan: OfflinePlan) -> None:
    vpcs = {r.inputs["name"]: r.inputs for r in plan.of_type(NETWORK)}
    tcpxo = [v for k, v in vpcs.items() if k.startswith("gcp-a3mega-tcpxo-")]
    assert len(tcpxo) == 8 and {v["mtu"] for v in tcpxo} == {8244}
    # The nodes' VPC carries Managed Lustre: Google's MTU for it.
    assert vpcs["gcp-a3mega-net"]["mtu"] == GCP.managed_lustre.vpc_mtu == 8896
    subnets = {r.inputs["name"]: r.inputs["ipCidrRange"] for r in plan.of_type(SUBNET)}
    gpu_cidrs = [ipaddress.IPv4Network(subnets[f"gcp-a3mega-tcpxo-{i}-sub"]) for i in range(1, 9)]
    assert all(c.subnet_of(ipaddress.IPv4Network("192.168.0.0/16")) and c.prefixlen == 24 for c in gpu_cidrs)
    assert len(set(gpu_cidrs)) == 8
    rules = {r.inputs["name"]: r.inputs for r in plan.of_type(FIREWALL)}
    first = rules["gcp-a3mega-tcpxo-1-internal"]
    assert first["direction"] == "INGRESS" and first["sourceRanges"] == [str(gpu_cidrs[0])]
    assert first["allows"] == [{"protocol": "tcp", "ports": ["0-65535"]}, {"protocol": "udp", "ports": ["0-65535"]},
                               {"protocol": "icmp"}]
    assert first["network"] == "gcp-a3mega-tcpxo-1-id"


def test_multi_network_objects_per_gpu_nic(plan: OfflinePlan) -> None:
    params = {r.inputs["metadata"]["name"]: r
              for r in plan.of_type("kubernetes:networking.gke.io/v1:GKENetworkParamSet")}
    networks = {r.inputs["metadata"]["name"]: r.inputs["spec"]
                for r in plan.of_type("kubernetes:networking.gke.io/v1:Network")}
    assert sorted(params) == sorted(networks) == sorted(f"tcpxo-vpc{i}" for i in range(1, 9))
    assert params["tcpxo-vpc3"].inputs["spec"] == {"vpc": "gcp-a3mega-tcpxo-3", "vpcSubnet": "gcp-a3mega-tcpxo-3-sub",
                                                   "deviceMode": "NetDevice"}
    assert networks["tcpxo-vpc3"] == {"type": "Device", "parametersRef": {
        "group": "networking.gke.io", "kind": "GKENetworkParamSet", "name": "tcpxo-vpc3"}}
    # Created through the backend's Kubernetes provider.
    assert params["tcpxo-vpc3"].parent == "gcp-a3mega"


# --- storage ---------------------------------------------------------------------------------------------


def test_managed_lustre_instances_and_gke_pvs(plan: OfflinePlan) -> None:
    fs = {r.name: r.inputs for r in plan.of_type(LUSTRE)}
    assert fs["gcp-a3mega-datasets"] | {} == {
        "instanceId": "gcp-a3mega-datasets", "location": "us-east4-a", "filesystem": "lustreds",
        "capacityGib": "36000", "perUnitStorageThroughput": "250", "network": "gcp-a3mega-net-id",
        "gkeSupportEnabled": False, "labels": {"gpufleet-cluster": "gcp-a3mega", "gpufleet-volume": "datasets"}}
    assert (fs["gcp-a3mega-checkpoints"]["capacityGib"], fs["gcp-a3mega-checkpoints"]["perUnitStorageThroughput"]) == (
        "18000", "500")
    cluster = plan.of_type(CLUSTER)[0].inputs
    assert cluster["addonsConfig"] == {"lustreCsiDriverConfig": {"enabled": True, "enableLegacyLustrePort": False}}
    vols = pvs(plan)
    ds = vols["lustre-datasets-training"]["spec"]["csi"]
    # GKE's driver's own PV format: <project>/<zone>/<instance>, the instance's address and fsname.
    assert ds == {"driver": "lustre.csi.storage.gke.io", "readOnly": True,
                  "volumeHandle": "example-ml-project/us-east4-a/gcp-a3mega-datasets",
                  "volumeAttributes": {"ip": "gcp-a3mega-datasets.lustre.offline.invalid", "filesystem": "lustreds"}}
    assert vols["lustre-checkpoints-training"]["spec"]["csi"]["volumeHandle"] == (
        "example-ml-project/us-east4-a/gcp-a3mega-checkpoints")
    # GKE runs the driver (an add-on): the platform's Lustre CSI chart is not installed.
    assert "lustre-csi-driver" not in {r.inputs["chart"] for r in plan.of_type(RELEASE)}


def test_each_lustre_instance_has_its_own_fsname_and_its_pv_carries_it(plan: OfflinePlan) -> None:
    # GKE's Managed Lustre CSI driver cannot mount volumes of two instances with one filesystem name on a node
    # (https://cloud.google.com/kubernetes-engine/docs/concepts/managed-lustre#limitations); pods mount both.
    fs = {r.inputs["instanceId"]: r.inputs["filesystem"] for r in plan.of_type(LUSTRE)}
    assert fs == {"gcp-a3mega-datasets": "lustreds", "gcp-a3mega-checkpoints": "lustreck"}
    vols = pvs(plan)
    assert {k: v["spec"]["csi"]["volumeAttributes"]["filesystem"] for k, v in vols.items()
            if k.startswith("lustre-")} == {"lustre-datasets-training": "lustreds",
                                            "lustre-checkpoints-training": "lustreck"}


def test_lustre_behind_private_services_access(plan: OfflinePlan) -> None:
    address = plan.of_type("gcp:compute/globalAddress:GlobalAddress")[0].inputs
    assert (address["purpose"], address["addressType"], address["address"], address["prefixLength"]) == (
        "VPC_PEERING", "INTERNAL", "10.48.0.0", 20)
    peering = plan.of_type("gcp:servicenetworking/connection:Connection")[0]
    assert peering.inputs["service"] == "servicenetworking.googleapis.com"
    assert peering.inputs["reservedPeeringRanges"] == ["gcp-a3mega-lustre"]
    rule = {r.inputs["name"]: r.inputs for r in plan.of_type(FIREWALL)}["gcp-a3mega-lustre"]
    assert rule["sourceRanges"] == ["10.48.0.0/20"] and rule["allows"] == [{"protocol": "tcp", "ports": ["988"]}]
    # The instances wait for the peering.
    for inst in plan.of_type(LUSTRE):
        assert peering.urn in inst.depends_on


# --- driver management (issue 16 point 4) ----------------------------------------------------------------


def test_gke_pools_run_googles_driver_and_the_operator_without_its_own(plan: OfflinePlan) -> None:
    lock = resolve_lock(STACK.spec())
    assert (lock.driver_managed_by, lock.toolkit_managed_by) == ("gke", "operator")
    # No NVIDIADriver: nothing would install the lock's driver on COS.
    assert not plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver")
    values = one(plan, RELEASE, "gpu-operator").inputs["values"]
    install_dir = GCP.cos_driver_installer.install_dir
    assert values["driver"]["enabled"] is False
    assert values["toolkit"]["enabled"] is True and values["toolkit"]["installDir"] == install_dir
    assert values["hostPaths"] == {"driverInstallDir": install_dir} and values["cdi"] == {"enabled": True}
    assert render_gpu_operator_values(lock)["hostPaths"] == values["hostPaths"]
    files = [r.inputs["file"] for r in plan.of_type(CONFIG_FILE)]
    assert files == [GCP.cos_driver_installer.manifest, *GCP.gpudirect["tcpxo"].installers]
    assert all(re.fullmatch(PINNED_MANIFEST, f) for f in files)  # pinned by commit, never a branch
    # GKE admits the operator's system-node-critical pods only within a quota for them.
    quota = plan.of_type("kubernetes:core/v1:ResourceQuota")[0].inputs
    assert quota["metadata"]["namespace"] == "gpu-operator"
    assert quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"] == ["system-node-critical",
                                                                            "system-cluster-critical"]


def test_plan_and_lock_say_the_driver_follows_gke_not_the_lock() -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.lock import app

    code, out = STACK.plan_json()
    assert code == 0
    pool = next(p for p in out["cloud"]["pools"] if p["pool"] == "a3mega")
    lock = resolve_lock(STACK.spec())
    assert pool["driver"].startswith("Google's COS driver installer") and lock.driver in pool["driver"]
    assert "not the lock's" in pool["driver"]
    shown = CliRunner().invoke(app, ["show", "--stack", STACK.name], env={"COLUMNS": "400"})
    assert shown.exit_code == 0
    assert "driver on pool a3mega" in shown.output and "not the lock's" in shown.output
    assert "driver_managed_by" in shown.output and " gke " in shown.output


def test_bad_gcp_key_is_one_json_error_with_file_key_value_fix(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from gpufleet.cli.plan import app

    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:gcp"]["lustre_cidr"] = "10.48.0.0/30"

    doc = STACK.config()
    change(doc["config"])
    path = tmp_path / "Pulumi.gcp-bad.yaml"
    import yaml

    path.write_text(yaml.safe_dump(doc))
    r = CliRunner().invoke(app, ["--stack", str(path), "--json"])
    assert r.exit_code == 1 and "Traceback" not in r.output
    (err,) = json.loads(r.stdout)["errors"]
    assert (err["file"], err["key"], err["value"]) == (str(path), "gpufleet:gcp.lustre_cidr", "10.48.0.0/30")
    assert "/16 to /24" in err["message"] and err["fix"]


@pytest.mark.parametrize(("change", "key", "why"), [
    (lambda c: gpu_pool(c).update(host_management="operator") or c.pop("gpufleet:storage"),
     "gpufleet:pools[1].host_management", "runs on COS_CONTAINERD node images only"),
    (lambda c: gpu_pool(c).update(host_management="operator", fabric="none"), "gpufleet:storage.lustre",
     "runs on COS nodes only"),
    (lambda c: gpu_pool(c).update(host_management="ansible") or c.pop("gpufleet:storage"),
     "gpufleet:pools[1].host_management", "runs on COS_CONTAINERD node images only"),
    (lambda c: gpu_pool(c).update(host_management="ansible"), "gpufleet:storage.lustre", "runs on COS nodes only"),
    (lambda c: gpu_pool(c).update(host_management="ansible", fabric="none", image="COS_CONTAINERD")
     or c.pop("gpufleet:storage"), "gpufleet:pools[1].image", "Container-Optimized OS is read-only and has no "
     "package manager"),
    (lambda c: c["gpufleet:pools"][0].update(host_management="ansible", image="COS_CONTAINERD"),
     "gpufleet:pools[0].image", "has no package manager"),
    (lambda c: c["gpufleet:gcp"].update(ssh_user="Root User"), "gpufleet:gcp.ssh_user", "should match pattern"),
    (lambda c: gpu_pool(c).update(image="UBUNTU_CONTAINERD"), "gpufleet:pools[1].image",
     "runs on COS_CONTAINERD node images only"),
    (lambda c: gpu_pool(c).update(instance_type="a2-ultragpu-8g"), "gpufleet:pools[1].instance_type",
     "not an instance type gpufleet's Google Cloud catalog knows"),
    (lambda c: gpu_pool(c).update(gpu="h200-sxm-141gb"), "gpufleet:pools[1].gpu", "carries 8 x h100-sxm5-80gb"),
    (lambda c: gpu_pool(c).update(fabric="infiniband"), "gpufleet:pools[1].fabric", "fabric is GPUDirect"),
    (lambda c: gpu_pool(c).update(image="ami-0123456789abcdef0"), "gpufleet:pools[1].image",
     "not an image of the gcp backend"),
    (lambda c: gpu_pool(c).update(capacity={"type": "reservation", "reservation_id": "cr-0123456789abcdef0"}),
     "gpufleet:pools[1].capacity.reservation_id", "not a reservation of the gcp backend"),
    (lambda c: c["gpufleet:storage"]["lustre"]["datasets"].update(throughput_mbps_per_tib=200),
     "gpufleet:storage.lustre.datasets.throughput_mbps_per_tib", "Google Cloud Managed Lustre offers"),
    (lambda c: c["gpufleet:storage"]["lustre"]["checkpoints"].update(capacity_gib=20000),
     "gpufleet:storage.lustre.checkpoints.capacity_gib", "in steps of 18000 GiB"),
    (lambda c: c["gpufleet:storage"]["lustre"]["datasets"].update(subdir="/ds"),
     "gpufleet:storage.lustre.datasets.subdir", "mounts an instance's root"),
    (lambda c: c["gpufleet:storage"]["lustre"].update(fsname="lus_fs"), "gpufleet:storage.lustre.fsname",
     "1-8 letters and digits"),
    (lambda c: c["gpufleet:gcp"].update(zone="us-central1-a"), "gpufleet:gcp", "not a zone of region us-east4"),
    (lambda c: c["gpufleet:gcp"].update(gpu_cidr="10.40.0.0/16"), "gpufleet:gcp", "overlap"),
    (lambda c: c.pop("gpufleet:gcp"), "gpufleet:gcp", "needs its region"),
    (lambda c: c["gpufleet:gcp"].update(kubernetes_version="1.31"), "gpufleet:gcp.kubernetes_version",
     "1.33.2-gke.4655000"),
])
def test_stack_validation_names_the_key(tmp_path: Path, change: Any, key: str, why: str) -> None:
    problem = STACK.problem(tmp_path, change, key)
    assert why in problem.rule


def test_operator_pool_without_gpudirect_runs_ubuntu_and_gets_the_lock_driver(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg).update(host_management="operator", fabric="none")
        cfg.pop("gpufleet:storage")  # Managed Lustre's GKE driver needs COS nodes

    spec = STACK.variant(tmp_path, change)
    lock = resolve_lock(spec)
    assert lock.driver_managed_by == "operator"
    plan = evaluate_spec(spec)
    node = _gpu(plan)["nodeConfig"]
    assert node["imageType"] == "UBUNTU_CONTAINERD" and "gvnic" not in node
    assert node["guestAccelerators"][0]["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "INSTALLATION_DISABLED"}
    (driver,) = plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver")
    assert driver.inputs["spec"]["version"] == lock.driver
    assert CONFIG_FILE not in {r.type for r in plan.resources}
    assert "hostPaths" not in one(plan, RELEASE, "gpu-operator").inputs["values"]


def test_gke_and_operator_pools_do_not_mix(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:pools"].append({**gpu_pool(cfg), "name": "plain", "host_management": "operator",
                                      "fabric": "none", "image": "UBUNTU_CONTAINERD"})
        cfg.pop("gpufleet:storage")

    spec = STACK.variant(tmp_path, change)
    with pytest.raises(ConfigError) as e:
        resolve_lock(spec)
    (problem,) = e.value.problems
    assert problem.key == "gpufleet:pools[2].host_management" and "cluster-wide" in problem.rule


def test_gke_mode_only_on_google_cloud(tmp_path: Path) -> None:
    from gpufleet.spec import load_spec

    spec = load_spec("aws-p5")
    pools = [p.model_copy(update={"host_management": "gke"}) if p.role == "gpu" else p for p in spec.pools]
    with pytest.raises(ConfigError) as e:
        resolve_lock(spec.model_copy(update={"pools": pools}))
    assert [p.key for p in e.value.problems] == ["gpufleet:pools[1].host_management"]
    assert "gcp backend only" in e.value.problems[0].rule


# --- host_management ansible: Ubuntu pools without GPUDirect, the gcp_compute inventory hand-off ------------


def _ansible_pool(cfg: dict[str, Any]) -> None:
    """The bundled stack's GPU pool converged by the Ansible roles: no GPUDirect (its COS-only stack), so Ubuntu,
    and no Managed Lustre (GKE's driver for it is COS-only)."""
    gpu_pool(cfg).update(host_management="ansible", fabric="none")
    cfg.pop("gpufleet:storage")


GCP_COMPUTE = {
    "plugin": "google.cloud.gcp_compute",
    "auth_kind": "application",
    "projects": ["example-ml-project"],
    "zones": ["us-east4-a"],
    "filters": ["labels.gpufleet-cluster = gcp-a3mega", "labels.gpufleet-host-management = ansible",
                "status = RUNNING"],
    "hostnames": ["name"],
    "compose": {"ansible_host": "networkInterfaces[0].networkIP", "gpufleet_pool": "labels['gpufleet-pool']"},
    "keyed_groups": [{"key": "labels['gpufleet-pool']", "prefix": "pool", "separator": "_"},
                     {"key": "labels['gpufleet-role']", "prefix": "", "separator": ""}],
}


def test_ansible_pool_runs_ubuntu_with_the_lock_driver_from_the_roles(tmp_path: Path) -> None:
    spec = STACK.variant(tmp_path, _ansible_pool)
    lock = resolve_lock(spec)
    assert (lock.driver_managed_by, lock.toolkit_managed_by) == ("host", "host")
    plan = evaluate_spec(spec)
    node = _gpu(plan)["nodeConfig"]
    assert node["imageType"] == "UBUNTU_CONTAINERD" and "gvnic" not in node
    assert node["guestAccelerators"][0]["gpuDriverInstallationConfig"] == {"gpuDriverVersion": "INSTALLATION_DISABLED"}
    # DKMS builds the roles' module unsigned: secure boot would refuse to load it.
    assert node["shieldedInstanceConfig"] == {"enableSecureBoot": False, "enableIntegrityMonitoring": True}
    assert node["resourceLabels"]["gpufleet-host-management"] == "ansible"
    assert "networkConfig" in _gpu(plan) and "additionalNodeNetworkConfigs" not in _gpu(plan)["networkConfig"]
    assert not plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver")
    values = one(plan, RELEASE, "gpu-operator").inputs["values"]
    assert values["driver"]["enabled"] is False and values["toolkit"]["enabled"] is False


def test_ansible_pools_get_the_gcp_compute_inventory_plugin(tmp_path: Path) -> None:
    from gpufleet.inputs import load_yaml
    from gpufleet.inventory import write_inventory

    spec = STACK.variant(tmp_path, _ansible_pool)
    out = tmp_path / "inv"
    write_inventory(spec, resolve_lock(spec), {}, out)
    import yaml

    # The plugin reads only files ending gcp_compute.yml (or gcp.yml).
    assert yaml.safe_load((out / "gcp_compute.yml").read_text()) == GCP_COMPUTE
    assert load_yaml(out / "group_vars" / "pool_a3mega" / "connection.yml") == {"ansible_user": "gpufleet",
                                                                               "ansible_become": True}
    assert not (out / "group_vars" / "pool_system" / "connection.yml").exists()
    base = STACK.spec()
    write_inventory(base, resolve_lock(base), {}, tmp_path / "inv2")
    assert not (tmp_path / "inv2" / "gcp_compute.yml").exists()


def _selects(filters: list[str], labels: dict[str, str]) -> bool:
    """The plugin's filters (each an AND condition) on a node VM's GCE labels, as the Compute API applies them;
    ``status = RUNNING`` holds for a running VM."""
    for f in filters:
        field, op, value = f.split(" ", 2)
        assert op == "=", f
        if field == "status":
            assert value == "RUNNING"
        else:
            assert field.startswith("labels."), f
            if labels.get(field.removeprefix("labels.")) != value:
                return False
    return True


def test_inventory_filters_select_exactly_the_ansible_pools_node_vms(tmp_path: Path) -> None:
    """The filters against the labels the backend declares on each node pool's VMs (resource_labels): only the
    ansible pool's VMs of this cluster are selected, grouped as a static inventory would (pool_<name>, gpu)."""
    from gpufleet.inventory.writer import dynamic_inventory

    def change(cfg: dict[str, Any]) -> None:
        _ansible_pool(cfg)
        # A second GPU pool the GPU Operator manages: the filter must leave it to the operator.
        cfg["gpufleet:pools"].append({**gpu_pool(cfg), "name": "plain", "host_management": "operator"})

    spec = STACK.variant(tmp_path, change)
    plugin = dynamic_inventory(spec)
    assert plugin is not None
    pools = {r.inputs["name"]: r.inputs["nodeConfig"]["resourceLabels"] for r in evaluate_spec(spec).of_type(POOL)}
    assert set(pools) == {"system", "a3mega", "plain"}
    assert [name for name, labels in pools.items() if _selects(plugin["filters"], labels)] == ["a3mega"]
    other_cluster = {**pools["a3mega"], "gpufleet-cluster": "another-cluster"}
    assert not _selects(plugin["filters"], other_cluster)
    labels = pools["a3mega"]
    groups = {g["prefix"] + g["separator"] + labels[g["key"].split("'")[1]] for g in plugin["keyed_groups"]}
    assert groups == {"pool_a3mega", "gpu"}


def test_plan_json_shows_the_gcp_compute_inventory_file(tmp_path: Path) -> None:
    import yaml

    code, out = STACK.plan_json(stack=STACK.variant_file(tmp_path, _ansible_pool))
    assert code == 0, out
    assert yaml.safe_load(out["inventory"]["gcp_compute.yml"]) == GCP_COMPUTE
    assert "ansible_user: !unsafe 'gpufleet'" in out["inventory"]["group_vars/pool_a3mega/connection.yml"]
    code, base = STACK.plan_json()
    assert code == 0 and "gcp_compute.yml" not in base["inventory"]


def test_ansible_and_gke_gpu_pools_do_not_mix(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:pools"].append({**gpu_pool(cfg), "name": "plain", "host_management": "ansible",
                                      "fabric": "none"})
        cfg.pop("gpufleet:storage")

    with pytest.raises(ConfigError) as e:
        resolve_lock(STACK.variant(tmp_path, change))
    (problem,) = e.value.problems
    assert problem.key == "gpufleet:pools[2].host_management" and "cluster-wide" in problem.rule
    assert "the Ansible roles install it" in problem.rule


# --- the platform layer gets the backend's provider -------------------------------------------------------


def test_platform_layer_receives_the_gke_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, plan = STACK.platform_backend(monkeypatch)
    assert backend.provider is not None and backend.provider._name == "gcp-a3mega-k8s"
    assert all(p.taints_at_registration for p in backend.pools)
    assert backend.lustre_csi_driver == GCP.managed_lustre.csi_driver
    assert plan.named("gcp-a3mega").type == "gpufleet:backend:GcpCluster"
    provider = plan.named("gcp-a3mega-k8s")
    assert provider.type == "pulumi:providers:kubernetes" and provider.inputs["kubeconfig"] == "[secret]"
    # The provider waits for the cluster and its node pools.
    assert {u.rsplit("::", 1)[1] for u in provider.depends_on} == {"gcp-a3mega", "gcp-a3mega-system",
                                                                   "gcp-a3mega-a3mega"}
    assert not plan.of_type(JOB) and not plan.of_type(NODE_PATCH)
    # GPUDirect is not the Network Operator's: no NicClusterPolicy.
    assert not plan.of_type("kubernetes:mellanox.com/v1alpha1:NicClusterPolicy")


def test_kubeconfig_authenticates_with_the_gke_auth_plugin() -> None:
    from gpufleet.infra.gcp import kubeconfig_text

    doc = json.loads(kubeconfig_text("gcp-a3mega", "172.16.0.2", "ca"))
    assert doc["clusters"][0]["cluster"] == {"server": "https://172.16.0.2", "certificate-authority-data": "ca"}
    assert doc["users"][0]["user"]["exec"]["command"] == "gke-gcloud-auth-plugin"
    assert doc["users"][0]["user"]["exec"]["interactiveMode"] == "Never"  # never waits for a person in pulumi up


# --- plan, SDK, catalog ------------------------------------------------------------------------------------


def test_plan_json_names_fabric_lustre_service_and_cost() -> None:
    code, out = STACK.plan_json()
    assert code == 0
    cloud = out["cloud"]
    assert (cloud["cloud"], cloud["fabric"], cloud["lustre_service"], cloud["region"]) == (
        "gcp", "GPUDirect", "Google Cloud Managed Lustre", "us-east4")
    a3 = next(p for p in cloud["pools"] if p["pool"] == "a3mega")
    assert a3["instance_type"] == GPU_TYPE and a3["gpus"] == 16 and a3["gpu"] == "h100-sxm5-80gb"
    assert a3["fabric"] == "GPUDirect-TCPXO, 8 GPU NICs"
    assert a3["placement"] == "compact placement, us-east4-a"
    price = GCP.price(GPU_TYPE, "us-east4")
    sys_price = GCP.price("n4-standard-16", "us-east4")
    assert price is not None and sys_price is not None
    assert a3["usd_per_hour"] == round(2 * price.usd_per_hour, 4) and a3["price_source"] == price.source
    assert cloud["total_usd_per_hour"] == round(2 * price.usd_per_hour + 3 * sys_price.usd_per_hour, 4)
    assert cloud["total_complete"] is True


def test_missing_sdk_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    STACK.assert_plan_names_install_command(monkeypatch)


def test_every_machine_type_and_price_cites_its_source() -> None:
    for mt in GCP.machine_types.values():
        assert mt.source.startswith("https://"), mt.name
        if mt.gpus:
            assert mt.accelerator and mt.gpudirect in GCP.gpudirect, mt.name
    for price in GCP.prices:
        assert price.instance_type in GCP.machine_types and price.source.startswith("https://")
    for flavour in GCP.gpudirect.values():
        assert flavour.source.startswith("https://")


# --- policy pack ---------------------------------------------------------------------------------------------


def test_policy_passes_the_bundled_stack(plan: OfflinePlan) -> None:
    assert violations(resources(plan)) == {}


def test_policy_rejects_gpu_pool_without_its_gpudirect_networks(tmp_path: Path) -> None:
    spec = STACK.variant(tmp_path, lambda c: gpu_pool(c).update(fabric="none", host_management="operator",
                                                               image="UBUNTU_CONTAINERD")
                         or c.pop("gpufleet:storage"))
    assert violations(resources(evaluate_spec(spec))) == {"gpu-pools-have-their-fabric": [
        f"{GPU_TYPE} has 8 GPUDirect networks (tcpxo), the GPU node pool attaches 0; set the pool's fabric: "
        "gpudirect"]}


def test_policy_rejects_public_ip_and_shared_paths(plan: OfflinePlan) -> None:
    items = resources(plan)
    pool = next(p for t, p in items if t == POOL and p["nodeConfig"]["labels"]["gpufleet.io/role"] == "gpu")
    pool["networkConfig"]["enablePrivateNodes"] = False
    assert list(violations(items)) == ["no-public-ip-gpu-nodes"]
    items = resources(plan)
    for t, p in items:
        if t == PV and p["metadata"]["labels"]["gpufleet.io/volume"] == "checkpoints":
            p["spec"]["csi"]["volumeHandle"] = "example-ml-project/us-east4-a/gcp-a3mega-datasets"
    assert list(violations(items)) == ["datasets-checkpoints-distinct"]
