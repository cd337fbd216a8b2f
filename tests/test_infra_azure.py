"""The azure backend, evaluated offline with Pulumi's public mocks (no Azure subscription, no network): what the
program declares for the bundled stack azure-ndv5 and variants of it, the stack validation, the inventory
hand-off, the plan summary and the policy pack on AKS resources."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

# Without the extra these skip locally; CI fails instead (the reason says "reference data": tests/conftest.py).
pytest.importorskip("pulumi_azure_native", reason="azure extra not installed (pip install -r "
                                                   "requirements-clouds.lock): missing reference data")

from gpufleet.catalog.charts import CHARTS
from gpufleet.catalog.clouds import AZURE
from gpufleet.infra.azure import volume_attributes
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
    pvs,
    resources,
    violations,
)

STACK = CloudStack("azure-ndv5", "pulumi_azure_native", "azure")
CLUSTER = "azure-native:containerservice:ManagedCluster"
POOL = "azure-native:containerservice:AgentPool"
AMLFS = "azure-native:storagecache:AmlFilesystem"
SUBNET = "azure-native:network:Subnet"
NSG = "azure-native:network:NetworkSecurityGroup"
GPU_SIZE = "Standard_ND96isr_H100_v5"


@pytest.fixture(scope="module")
def plan() -> OfflinePlan:
    return STACK.plan()


# --- node pools ------------------------------------------------------------------------------------------


def test_gpu_agent_pool_is_one_scale_set_on_infiniband_in_the_lustre_zone(plan: OfflinePlan) -> None:
    pool = one(plan, POOL, "azure-ndv5-ndv5").inputs
    # Standard_ND96isr_H100_v5: 8 GPUs, one 400 Gb/s InfiniBand HCA each (catalog, from Microsoft Learn).
    size = AZURE.vm_sizes[GPU_SIZE]
    assert (size.gpus, size.infiniband_hcas, size.infiniband_gbps) == (8, 8, 400)
    assert pool["vmSize"] == GPU_SIZE and pool["mode"] == "User" and pool["type"] == "VirtualMachineScaleSets"
    assert pool["agentPoolName"] == "ndv5" and pool["resourceName"] == "azure-ndv5"
    # One agent pool = one scale set = one InfiniBand partition; the RDMA plugin selects the fabric label.
    assert pool["nodeLabels"] == {"gpufleet.io/role": "gpu", "gpufleet.io/pool": "ndv5",
                                  "gpufleet.io/fabric": "infiniband"}
    assert pool["nodeTaints"] == ["nvidia.com/gpu=present:NoSchedule"]
    assert pool["availabilityZones"] == ["1"]
    assert [f["zones"] for f in (r.inputs for r in plan.of_type(AMLFS))] == [["1"], ["1"]]
    # AKS 1.35 ships Ubuntu 24.04 (gpufleet/catalog/kubernetes.yaml): the OS SKU follows the version.
    assert pool["osSKU"] == "Ubuntu2404" and pool["osType"] == "Linux"
    # AKS must not install its own driver: the GPU Operator installs the lock's.
    assert pool["gpuProfile"] == {"driver": "None"}
    assert pool["enableNodePublicIP"] is False
    assert pool["vnetSubnetID"] == "azure-ndv5-nodes-id"
    assert (pool["enableAutoScaling"], pool["minCount"], pool["maxCount"], pool["count"]) == (True, 2, 2, 2)
    assert pool["tags"] == {"gpufleet-cluster": "azure-ndv5", "gpufleet-pool": "ndv5", "gpufleet-role": "gpu"}
    assert "capacityReservationGroupID" not in pool


def test_system_pool_is_the_clusters_inline_system_pool(plan: OfflinePlan) -> None:
    cluster = plan.of_type(CLUSTER)[0].inputs
    (system,) = cluster["agentPoolProfiles"]
    assert system["name"] == "system" and system["mode"] == "System" and system["vmSize"] == "Standard_E8s_v5"
    assert system["nodeTaints"] == [] and system["nodeLabels"] == {"gpufleet.io/role": "system",
                                                                   "gpufleet.io/pool": "system"}
    assert system["availabilityZones"] == ["1", "2", "3"] and system["count"] == 3
    assert "gpuProfile" not in system and system["enableNodePublicIP"] is False
    assert [r.name for r in plan.of_type(POOL)] == ["azure-ndv5-ndv5"]


def test_capacity_reservation_group(tmp_path: Path) -> None:
    group = ("/subscriptions/00000000-0000-0000-0000-000000000000/resourceGroups/gpu-rg/providers/"
             "Microsoft.Compute/capacityReservationGroups/ndv5-reserved")

    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["capacity"] = {"type": "reservation", "reservation_id": group}

    plan = evaluate_spec(STACK.variant(tmp_path, change))
    assert one(plan, POOL, "azure-ndv5-ndv5").inputs["capacityReservationGroupID"] == group


# --- networking ------------------------------------------------------------------------------------------


def test_private_nodes_behind_nat_and_a_private_api_server(plan: OfflinePlan) -> None:
    subnets = {r.name: r.inputs for r in plan.of_type(SUBNET)}
    assert subnets["azure-ndv5-nodes"]["addressPrefix"] == "10.30.0.0/18"
    assert subnets["azure-ndv5-nodes"]["natGateway"] == {"id": "azure-ndv5-nat-id"}
    assert all(s["defaultOutboundAccess"] is False for s in subnets.values())
    # The NAT gateway's is the only public address of the stack.
    ips = plan.of_type("azure-native:network:PublicIPAddress")
    assert [r.name for r in ips] == ["azure-ndv5-nat"]
    assert plan.of_type("azure-native:network:NatGateway")[0].inputs["publicIpAddresses"] == [
        {"id": "azure-ndv5-nat-id"}]
    cluster = plan.of_type(CLUSTER)[0].inputs
    assert cluster["apiServerAccessProfile"] == {"enablePrivateCluster": True}
    assert cluster["disableLocalAccounts"] is True
    assert cluster["aadProfile"] == {"managed": True, "enableAzureRBAC": True,
                                     "adminGroupObjectIDs": ["00000000-0000-0000-0000-000000000000"]}
    assert cluster["networkProfile"] == {
        "networkPlugin": "azure", "networkPluginMode": "overlay", "networkDataplane": "cilium",
        "networkPolicy": "cilium", "outboundType": "userAssignedNATGateway", "podCidr": "192.168.0.0/16",
        "serviceCidr": "172.16.0.0/16", "dnsServiceIP": "172.16.0.10"}
    assert cluster["nodeResourceGroup"] == "azure-ndv5-nodes"
    role = plan.of_type("azure-native:authorization:RoleAssignment")[0].inputs
    assert role["scope"] == "azure-ndv5-vnet-id" and role["principalId"] == "azure-ndv5-cluster-principal"
    assert role["roleDefinitionId"].endswith("/roleDefinitions/4d97b98b-1d4f-4787-a291-c67834d212e7")


def test_public_api_server_only_when_asked(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:azure"].update(private_cluster=False, authorized_ip_ranges=["203.0.113.0/24"])

    cluster = evaluate_spec(STACK.variant(tmp_path, change)).of_type(CLUSTER)[0].inputs
    assert cluster["apiServerAccessProfile"] == {"enablePrivateCluster": False,
                                                 "authorizedIPRanges": ["203.0.113.0/24"]}


def test_lustre_subnets_allow_lustre_from_the_nodes_only(plan: OfflinePlan) -> None:
    subnets = {r.name: r.inputs for r in plan.of_type(SUBNET)}
    # Each file system has its own subnet (Microsoft's prerequisite), sized from its table: 16 and 8 TiB -> /27.
    assert subnets["azure-ndv5-lustre-datasets"]["addressPrefix"] == "10.30.64.0/27"
    assert subnets["azure-ndv5-lustre-checkpoints"]["addressPrefix"] == "10.30.64.32/27"
    rules = {r.name: r.inputs["securityRules"] for r in plan.of_type(NSG)}
    datasets = {rule["name"]: rule for rule in rules["azure-ndv5-lustre-datasets"]}
    assert datasets["lustre-from-nodes"] == {
        "name": "lustre-from-nodes", "priority": 100, "direction": "Inbound", "access": "Allow", "protocol": "Tcp",
        "sourceAddressPrefix": "10.30.0.0/18", "sourcePortRange": "*", "destinationAddressPrefix": "10.30.64.0/27",
        "destinationPortRanges": ["988", "1019-1023"]}
    assert datasets["deny-vnet"]["access"] == "Deny" and datasets["deny-vnet"]["priority"] == 4000
    assert datasets["to-azure-cloud"]["destinationAddressPrefix"] == "AzureCloud"
    assert subnets["azure-ndv5-lustre-datasets"]["networkSecurityGroup"] == {"id": "azure-ndv5-lustre-datasets-id"}


def test_lustre_subnets_have_an_outbound_path_and_microsofts_rules(plan: OfflinePlan) -> None:
    # AMLFS needs outbound access to Azure's services from its subnet (its prerequisites); a subnet with default
    # outbound access off has none unless it has a NAT gateway
    # (https://learn.microsoft.com/en-us/azure/azure-managed-lustre/amlfs-prerequisites).
    subnets = {r.name: r.inputs for r in plan.of_type(SUBNET)}
    for kind in ("datasets", "checkpoints"):
        assert subnets[f"azure-ndv5-lustre-{kind}"]["natGateway"] == {"id": "azure-ndv5-nat-id"}
    rules = {r.name: r.inputs["securityRules"] for r in plan.of_type(NSG)}
    out = {rule["name"]: rule for rule in rules["azure-ndv5-lustre-checkpoints"] if rule["direction"] == "Outbound"}
    # Microsoft's outbound rules for an AMLFS subnet
    # (https://learn.microsoft.com/en-us/azure/azure-managed-lustre/configure-network-security-group).
    allowed = {r["destinationAddressPrefix"]: r.get("destinationPortRange", r.get("destinationPortRanges"))
               for r in out.values() if r["access"] == "Allow"}
    assert allowed["AzureMonitor"] == allowed["AzureCloud"] == allowed["AzureKeyVault"] == "443"
    assert allowed["Storage.eastus"] == "443"
    assert allowed["VirtualNetwork"] == ["988", "1019-1023"]
    assert out["deny-internet"]["access"] == "Deny" and out["deny-internet"]["destinationAddressPrefix"] == "Internet"
    assert max(r["priority"] for r in out.values() if r["access"] == "Allow") < out["deny-internet"]["priority"]


# --- storage ---------------------------------------------------------------------------------------------


def test_managed_lustre_file_systems_and_pvs(plan: OfflinePlan) -> None:
    fs = {r.name: r.inputs for r in plan.of_type(AMLFS)}
    assert fs["azure-ndv5-datasets"]["sku"] == {"name": "AMLFS-Durable-Premium-250"}
    assert fs["azure-ndv5-datasets"]["storageCapacityTiB"] == 16
    assert fs["azure-ndv5-checkpoints"]["sku"] == {"name": "AMLFS-Durable-Premium-500"}
    assert fs["azure-ndv5-checkpoints"]["storageCapacityTiB"] == 8
    assert fs["azure-ndv5-datasets"]["filesystemSubnet"] == "azure-ndv5-lustre-datasets-id"
    assert fs["azure-ndv5-checkpoints"]["filesystemSubnet"] == "azure-ndv5-lustre-checkpoints-id"
    assert all(f["maintenanceWindow"] == {"dayOfWeek": "Sunday", "timeOfDayUTC": "02:00"} for f in fs.values())
    vols = pvs(plan)
    ds = vols["lustre-datasets-training"]
    assert ds["spec"]["csi"]["volumeHandle"] == "azure-ndv5-datasets.mgs.offline.invalid@tcp:/lustrefs"
    assert ds["spec"]["csi"]["readOnly"] is True
    assert ds["metadata"]["annotations"]["gpufleet.io/mount-path"] == "/lustre/datasets"
    ck = vols["lustre-checkpoints-training"]
    assert ck["spec"]["csi"]["volumeHandle"] == "azure-ndv5-checkpoints.mgs.offline.invalid@tcp:/lustrefs"
    assert plan.named("lustre").type == "gpufleet:platform:LustreStorage"


def test_amlfs_pvs_are_in_the_azure_lustre_csi_drivers_static_format(plan: OfflinePlan) -> None:
    # Microsoft's Azure Managed Lustre CSI driver (static provisioning, driver-parameters.md and its pv.yaml
    # example): volumeAttributes mgs-ip-address and fs-name; the handle is any id unique in the cluster. HPE's
    # driver name and its bare <nid>:/<fsname> handle (the code before issue 32) fail here.
    vols = pvs(plan)
    for kind in ("datasets", "checkpoints"):
        csi = vols[f"lustre-{kind}-training"]["spec"]["csi"]
        assert csi == {"driver": "azurelustre.csi.azure.com", "readOnly": kind == "datasets",
                       "volumeHandle": f"azure-ndv5-{kind}.mgs.offline.invalid@tcp:/lustrefs",
                       "volumeAttributes": {"mgs-ip-address": f"azure-ndv5-{kind}.mgs.offline.invalid",
                                            "fs-name": "lustrefs"}}
    assert AZURE.managed_lustre.csi_driver == "azurelustre.csi.azure.com"


def test_a_subdir_is_the_drivers_sub_dir_and_is_kept() -> None:
    # The driver requires retain-sub-dir for a sub-dir of a read-only volume (nodeserver.go); these are data.
    assert volume_attributes("10.0.0.4", "/corpus/v2") == {
        "mgs-ip-address": "10.0.0.4", "fs-name": "lustrefs", "sub-dir": "corpus/v2", "retain-sub-dir": "true"}
    assert volume_attributes("10.0.0.4", "/") == {"mgs-ip-address": "10.0.0.4", "fs-name": "lustrefs"}


def test_azure_lustre_csi_chart_at_the_locks_version_replaces_the_client_daemonset(plan: OfflinePlan) -> None:
    chart = CHARTS["azurelustre-csi-driver"]
    release = one(plan, RELEASE, "azurelustre-csi-driver").inputs
    # Microsoft publishes released charts in MCR as OCI artifacts; the version is the lock's (catalog default).
    assert release["chart"] == "oci://mcr.microsoft.com/microsoft.azuremanagedlustre/azurelustre-csi-driver"
    assert release["version"] == resolve_lock(STACK.spec()).azurelustre_csi == chart.default == "0.6.0"
    assert release["namespace"] == "kube-system"
    # Its node plugin tolerates the GPU pools' taints (the value replaces the chart's own list).
    assert release["values"] == {"node": {"tolerations": [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}
    # The driver installs the kernel-matched Lustre client itself: no DaemonSet of gpufleet's does.
    assert not plan.of_type("kubernetes:apps/v1:DaemonSet")


def test_no_hpe_lustre_driver_on_aks(plan: OfflinePlan) -> None:
    assert not [r for r in plan.of_type(RELEASE) if r.name == "lustre-csi-driver"]
    assert not [r for r in plan.resources if "lustre-csi-system" in json.dumps(r.inputs)]
    assert {v["spec"]["csi"]["driver"] for v in pvs(plan).values()} == {"azurelustre.csi.azure.com"}


def test_node_os_follows_the_kubernetes_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUFLEET_TODAY", "2026-11-01")  # 1.34 still in community support

    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:azure"].update(kubernetes_version="1.34")

    plan = evaluate_spec(STACK.variant(tmp_path, change))
    assert {r.inputs["osSKU"] for r in plan.of_type(POOL)} == {"Ubuntu2204"}


def test_non_ubuntu_node_images_are_refused(tmp_path: Path) -> None:
    # Microsoft's driver runs on AKS Ubuntu node pools only (use-csi-driver-kubernetes): the grammar takes those.
    problem = STACK.problem(tmp_path, lambda c: gpu_pool(c).update(image="AzureLinux"),
                            "gpufleet:pools[1].image")
    assert "Ubuntu2(204|404)" in problem.rule


def test_infiniband_pools_register_the_aks_infiniband_feature_first(plan: OfflinePlan) -> None:
    # AKS's RDMA/InfiniBand prerequisites: AKSInfinibandSupport lands a pool's VMs on one InfiniBand network
    # (https://azure.github.io/aks-rdma-infiniband/getting-started/prerequisites).
    (feature,) = plan.of_type("azure-native:features:SubscriptionFeatureRegistration")
    assert (feature.inputs["providerNamespace"], feature.inputs["featureName"]) == (
        "Microsoft.ContainerService", "AKSInfinibandSupport")
    # The cluster (and so its pools) waits for it.
    cluster = plan.of_type(CLUSTER)[0]
    assert feature.urn in cluster.depends_on


def test_no_infiniband_feature_without_an_infiniband_pool(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        for pool in cfg["gpufleet:pools"]:
            if pool["role"] == "gpu":
                pool["fabric"] = "none"

    plan = evaluate_spec(STACK.variant(tmp_path, change))
    assert plan.of_type("azure-native:features:SubscriptionFeatureRegistration") == []


def test_long_term_support_sets_premium_tier_and_lts_plan(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:azure"].update(kubernetes_version="1.33", long_term_support=True)

    cluster = evaluate_spec(STACK.variant(tmp_path, change)).of_type(CLUSTER)[0].inputs
    assert cluster["sku"] == {"name": "Base", "tier": "Premium"}
    assert cluster["supportPlan"] == "AKSLongTermSupport"
    assert "supportPlan" not in STACK.plan().of_type(CLUSTER)[0].inputs


# --- the platform layer gets the backend's provider -------------------------------------------------------


def test_platform_layer_receives_the_aks_provider(monkeypatch: pytest.MonkeyPatch) -> None:
    backend, plan = STACK.platform_backend(monkeypatch)
    assert backend.provider is not None and backend.provider._name == "azure-ndv5-k8s"
    assert all(p.taints_at_registration for p in backend.pools)
    assert plan.named("azure-ndv5").type == "gpufleet:backend:AzureCluster"
    provider = plan.named("azure-ndv5-k8s")
    assert provider.type == K8S_PROVIDER and provider.inputs["kubeconfig"] == "[secret]"
    # The provider waits for the cluster and its GPU agent pools.
    assert {u.rsplit("::", 1)[1] for u in provider.depends_on} == {"azure-ndv5", "azure-ndv5-ndv5"}
    assert not plan.of_type(JOB) and not plan.of_type(NODE_PATCH)
    # InfiniBand pools: the platform's Network Operator and RDMA shared device plugin select them.
    policy = plan.of_type("kubernetes:mellanox.com/v1alpha1:NicClusterPolicy")[0].inputs
    terms = policy["spec"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "gpufleet.io/pool", "operator": "In", "values": ["ndv5"]}]}]


def test_operator_pools_get_the_lock_driver(plan: OfflinePlan) -> None:
    spec = load_spec("azure-ndv5")
    lock = resolve_lock(spec)
    assert all(p.host_management == "operator" for p in spec.pools) and lock.driver_managed_by == "operator"
    drivers = plan.of_type("kubernetes:nvidia.com/v1alpha1:NVIDIADriver")
    assert [d.inputs["spec"]["nodeSelector"] for d in drivers] == [{"gpufleet.io/pool": "ndv5"}]
    assert {d.inputs["spec"]["version"] for d in drivers} == {lock.driver}


# --- validation, SDK, inventory, plan --------------------------------------------------------------------


@pytest.mark.parametrize(("change", "key", "why"), [
    (lambda c: gpu_pool(c).update(instance_type="Standard_NC24ads_A100_v4"), "gpufleet:pools[1].instance_type",
     "not an instance type gpufleet's Azure catalog knows"),
    (lambda c: gpu_pool(c).update(gpu="a100-sxm4-40gb"), "gpufleet:pools[1].gpu", "carries 8 x h100-sxm5-80gb"),
    (lambda c: gpu_pool(c).update(fabric="efa"), "gpufleet:pools[1].fabric", "fabric is InfiniBand"),
    (lambda c: gpu_pool(c).update(name="nd-v5"), "gpufleet:pools[1].name", "1-12 lower-case letters"),
    (lambda c: gpu_pool(c).update(image="ami-0123456789abcdef0"), "gpufleet:pools[1].image",
     "not an image of the azure backend"),
    (lambda c: gpu_pool(c).update(capacity={"type": "capacity-block", "reservation_id": "cr-0123456789abcdef0"}),
     "gpufleet:pools[1].capacity.reservation_id", "not a reservation of the azure backend"),
    (lambda c: c["gpufleet:storage"]["lustre"]["datasets"].update(throughput_mbps_per_tib=1000),
     "gpufleet:storage.lustre.datasets.throughput_mbps_per_tib", "Azure Managed Lustre offers"),
    (lambda c: c["gpufleet:storage"]["lustre"]["checkpoints"].update(capacity_gib=10240),
     "gpufleet:storage.lustre.checkpoints.capacity_gib", "in steps of 4 TiB"),
    (lambda c: gpu_pool(c).update(host_management="ansible"), "gpufleet:azure.ssh_public_key", "public key"),
    (lambda c: c.pop("gpufleet:azure"), "gpufleet:azure", "needs its region"),
])
def test_stack_validation_names_the_key(tmp_path: Path, change: Any, key: str, why: str) -> None:
    assert why in STACK.problem(tmp_path, change, key).rule


def test_missing_sdk_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    STACK.assert_plan_names_install_command(monkeypatch)


def test_ansible_pools_get_the_azure_rm_inventory_plugin(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["host_management"] = "ansible"
        cfg["gpufleet:azure"]["ssh_public_key"] = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample admin@example"

    spec = STACK.variant(tmp_path, change)
    out = tmp_path / "inv"
    write_inventory(spec, resolve_lock(spec), {}, out)
    plugin = yaml.safe_load((out / "azure_rm.yml").read_text())
    assert plugin["plugin"] == "azure.azcollection.azure_rm"
    assert plugin["include_vmss_resource_groups"] == ["azure-ndv5-nodes"] and plugin["include_vm_resource_groups"] == []
    assert plugin["exclude_host_filters"] == ["tags['gpufleet-cluster'] | default('') != 'azure-ndv5'",
                                              "tags['gpufleet-pool'] | default('') not in ['ndv5']"]
    assert plugin["hostvar_expressions"]["ansible_host"] == "private_ipv4_addresses | first"
    assert {"key": "tags['gpufleet-pool']", "prefix": "pool", "separator": "_"} in plugin["keyed_groups"]
    assert load_yaml(out / "group_vars" / "pool_ndv5" / "connection.yml") == {"ansible_user": "azureuser",
                                                                             "ansible_become": True}
    assert not (out / "group_vars" / "pool_system" / "connection.yml").exists()
    cluster = evaluate_spec(spec).of_type(CLUSTER)[0].inputs
    assert cluster["linuxProfile"] == {"adminUsername": "azureuser", "ssh": {"publicKeys": [
        {"keyData": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample admin@example"}]}}
    base = load_spec("azure-ndv5")
    write_inventory(base, resolve_lock(base), {}, tmp_path / "inv2")
    assert not (tmp_path / "inv2" / "azure_rm.yml").exists()


def test_plan_json_names_fabric_lustre_service_and_cost() -> None:
    from gpufleet.cli.plan import app

    r = CliRunner().invoke(app, ["--stack", "azure-ndv5", "--json"])
    assert r.exit_code == 0, r.output
    cloud = json.loads(r.output)["cloud"]
    assert (cloud["cloud"], cloud["fabric"], cloud["lustre_service"], cloud["region"]) == (
        "azure", "InfiniBand", "Azure Managed Lustre", "eastus")
    nd = next(p for p in cloud["pools"] if p["pool"] == "ndv5")
    assert nd["instance_type"] == GPU_SIZE and nd["gpus"] == 16 and nd["gpu"] == "h100-sxm5-80gb"
    assert nd["fabric"] == "InfiniBand 8 x 400 Gb/s"
    assert nd["placement"] == "one scale set (one InfiniBand partition), zone 1"
    price = AZURE.price(GPU_SIZE, "eastus")
    sys_price = AZURE.price("Standard_E8s_v5", "eastus")
    assert price is not None and sys_price is not None
    assert nd["usd_per_hour"] == round(2 * price.usd_per_hour, 4) and nd["price_source"] == price.source
    assert cloud["total_usd_per_hour"] == round(2 * price.usd_per_hour + 3 * sys_price.usd_per_hour, 4)
    assert cloud["total_complete"] is True


def test_missing_price_row_is_named_not_guessed(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg).update(instance_type="Standard_ND96isr_H200_v5", gpu="h200-sxm-141gb")

    from gpufleet.infra.cloud_summary import cloud_summary

    cloud = cloud_summary(STACK.variant(tmp_path, change))
    assert cloud["total_complete"] is False and "Standard_ND96isr_H200_v5" in cloud["cost_note"]


def test_every_vm_size_and_price_cites_its_source() -> None:
    for size in AZURE.vm_sizes.values():
        if size.gpus:
            assert size.source.startswith("https://learn.microsoft.com/"), size.name
    for price in AZURE.prices:
        assert price.instance_type in AZURE.vm_sizes and price.source.startswith("https://")


# --- policy pack ---------------------------------------------------------------------------------------------


def test_policy_rejects_gpu_pool_without_its_fabric(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        gpu_pool(cfg)["fabric"] = "none"

    assert violations(resources(evaluate_spec(STACK.variant(tmp_path, change)))) == {"gpu-pools-have-their-fabric": [
        f"{GPU_SIZE} has 8 InfiniBand HCAs, the GPU pool is not labelled gpufleet.io/fabric=infiniband (no RDMA "
        "device plugin there); set the pool's fabric: infiniband"]}


def test_policy_rejects_public_ip_and_shared_paths(plan: OfflinePlan) -> None:
    assert violations(resources(plan)) == {}
    items = resources(plan)
    pool = next(p for t, p in items if t == POOL)
    pool["enableNodePublicIP"] = True
    assert list(violations(items)) == ["no-public-ip-gpu-nodes"]
    items = resources(plan)
    for t, p in items:
        if t == PV and p["metadata"]["labels"]["gpufleet.io/volume"] == "checkpoints":
            # The checkpoints PV pointed at a directory of the datasets file system: what the driver would mount.
            p["spec"]["csi"]["volumeAttributes"].update({"mgs-ip-address": "azure-ndv5-datasets.mgs.offline.invalid",
                                                         "sub-dir": "ckpt", "retain-sub-dir": "true"})
    assert list(violations(items)) == ["datasets-checkpoints-distinct"]


def test_policy_sees_the_inline_system_pool(plan: OfflinePlan) -> None:
    items = resources(plan)
    cluster = next(p for t, p in items if t == CLUSTER)
    cluster["agentPoolProfiles"][0]["nodeLabels"]["gpufleet.io/role"] = "gpu"
    assert "system-pool-exists" in violations(items)


def test_gpufleet_up_checks_the_sdk_before_pulumi(monkeypatch: pytest.MonkeyPatch) -> None:
    STACK.assert_up_checks_sdk_before_pulumi(monkeypatch)


def test_kubeconfig_logs_in_with_the_azure_cli_not_a_device_code() -> None:
    from gpufleet.infra.azure import azurecli_kubeconfig

    exec_format = yaml.safe_dump({"apiVersion": "v1", "users": [{"name": "clusterUser", "user": {"exec": {
        "command": "kubelogin", "args": ["get-token", "--environment", "AzurePublicCloud", "--server-id",
                                         "6dae42f8-4368-4678-94ff-3960e28e3630", "--client-id", "c",
                                         "--tenant-id", "t", "--login", "devicecode"]}}}]})
    user = yaml.safe_load(azurecli_kubeconfig(exec_format))["users"][0]["user"]["exec"]
    assert user["args"] == ["get-token", "--login", "azurecli", "--server-id",
                            "6dae42f8-4368-4678-94ff-3960e28e3630"]


def test_ansible_pool_next_to_operator_pools_is_labelled_out_of_the_operators_driver(tmp_path: Path) -> None:
    def change(cfg: dict[str, Any]) -> None:
        cfg["gpufleet:pools"].append({**gpu_pool(cfg), "name": "ndv5host", "host_management": "ansible"})
        cfg["gpufleet:azure"]["ssh_public_key"] = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIExample admin@example"

    plan = evaluate_spec(STACK.variant(tmp_path, change))
    host = one(plan, POOL, "azure-ndv5-ndv5host").inputs["nodeLabels"]
    operator = one(plan, POOL, "azure-ndv5-ndv5").inputs["nodeLabels"]
    # The operator's driver/toolkit are cluster-wide (one pool wants them): the Ansible pool opts out at
    # registration, the operator pool does not.
    assert host["nvidia.com/gpu.deploy.driver"] == "false"
    assert host["nvidia.com/gpu.deploy.container-toolkit"] == "false"
    assert "nvidia.com/gpu.deploy.driver" not in operator
