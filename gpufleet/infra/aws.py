"""The aws backend: VPC, EKS, node groups with EFA and cluster placement, FSx for Lustre (pulumi-aws).

Only the program imports this module, and only for ``backend: aws``: pulumi-aws is the optional extra
``pip install '.[aws]'`` (``gpufleet.infra.backends`` names the install step when it is missing).

What gets built (docs/clouds.md has the why of each piece):

- VPC with one private subnet per zone (nodes, FSx) behind a NAT gateway, and one small public subnet per zone
  holding only the NAT gateway. No node gets a public address.
- EKS with API authentication (access entries) and a private endpoint; the public one only when the stack asks.
- A system managed node group (CPU) and one managed node group per GPU pool. A GPU pool's launch template
  attaches every EFA interface its instance type supports (``gpufleet/catalog/clouds.yaml``), puts the nodes in
  a cluster placement group, tags them for the dynamic inventory, and (optionally) targets a capacity
  reservation or Capacity Block. Taints and labels are in the node group: nodes register with them.
- The EFA security group: all traffic from and to itself (EFA's requirement), on every GPU node's interfaces.
- FSx for Lustre PERSISTENT_2, one file system for datasets and one for checkpoints (throughput per TiB from
  the stack), with its own security group (Lustre ports from the nodes) and an optional S3 data repository
  association; AWS's FSx for Lustre CSI driver (the EKS add-on, its controller's IAM role through EKS Pod
  Identity) mounts them, and the platform layer's PVs point at them in that driver's format.
- The EFA device plugin (Helm, chart pinned by the lock and the chart catalog) on the EFA nodes.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from gpufleet.catalog.clouds import AWS
from gpufleet.infra import charts
from gpufleet.infra.contract import BackendHandles, PoolHandle
from gpufleet.infra.scheduling import (
    FABRIC_LABEL,
    POOL_LABEL,
    ROLE_LABEL,
    gpu_node_tolerations,
    node_labels,
    node_taints,
)
from gpufleet.lock import Lock
from gpufleet.spec import Aws, ClusterSpec, NodePool

#: Tag naming the cluster on every resource and instance (the dynamic inventory filters on it).
CLUSTER_TAG = "gpufleet.io/cluster"
#: EKS spells taint effects in its API's enum.
EKS_EFFECT = {"NoSchedule": "NO_SCHEDULE", "NoExecute": "NO_EXECUTE", "PreferNoSchedule": "PREFER_NO_SCHEDULE"}
#: EKS-optimized AMI types (no NVIDIA driver on it: the lock's driver comes from the GPU Operator or Ansible).
AMI_TYPE_STANDARD = "AL2023_x86_64_STANDARD"
NODE_POLICIES = ("AmazonEKSWorkerNodePolicy", "AmazonEKS_CNI_Policy", "AmazonEC2ContainerRegistryReadOnly",
                 # Session Manager: Ansible's amazon.aws.aws_ssm connection, no SSH port open.
                 "AmazonSSMManagedInstanceCore")
#: Lustre LNet (988) and its range (1018-1023), the FSx for Lustre security group rules AWS documents:
#: https://docs.aws.amazon.com/fsx/latest/LustreGuide/limit-access-security-groups.html
LUSTRE_PORTS = ((988, 988), (1018, 1023))


def efa_interfaces(itype: str, groups: list[pulumi.Input[str]]) -> list[dict[str, Any]]:
    """Network interfaces of a GPU launch template: every EFA the type supports, as AWS recommends for
    multi-card types (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html): card 0
    carries the ENA interface (device 0) and an EFA-only one (device 1); each further card one EFA-only
    interface (device 0). None gets a public address."""
    count = AWS.instance_types[itype].efa_interfaces
    out = [{"network_card_index": 0, "device_index": 0, "interface_type": "interface"}]
    out += [{"network_card_index": card, "device_index": 1 if card == 0 else 0, "interface_type": "efa-only"}
            for card in range(count)]
    return [{**n, "associate_public_ip_address": "false", "delete_on_termination": "true",
             "security_groups": groups} for n in out]


def node_setup_script(pool: NodePool) -> str:
    """Shell part of the node's user data, before it joins: the EFA driver (the standard AMI lacks it) from the
    installer the catalog pins, checked against its digest; the Lustre client for the FSx mounts."""
    efa = AWS.efa_installer
    lines = ["#!/bin/bash", "set -euo pipefail", "dnf install -y lustre-client"]
    if pool.fabric == "efa":
        lines += [
            "cd /tmp",
            f"curl -fsSLo efa.tar.gz {efa.url}",
            f"echo '{efa.sha256}  efa.tar.gz' | sha256sum -c -",
            "tar xzf efa.tar.gz && cd aws-efa-installer",
            # --minimal: kernel module and rdma-core; libfabric and the NCCL plugin come with the training image.
            "./efa_installer.sh -y --minimal",
        ]
    return "\n".join(lines) + "\n"


def user_data(pool: NodePool, node_config: str | None) -> str:
    """MIME multi-part user data: EKS merges it with its own nodeadm part for EKS AMIs; a custom AMI gets the
    NodeConfig from us (``node_config``)."""
    boundary = "==GPUFLEET=="
    parts = [("text/x-shellscript", node_setup_script(pool))]
    if node_config is not None:
        parts.insert(0, ("application/node.eks.aws", node_config))
    body = f'MIME-Version: 1.0\nContent-Type: multipart/mixed; boundary="{boundary}"\n\n'
    for ctype, text in parts:
        body += f"--{boundary}\nContent-Type: {ctype}\n\n{text}\n"
    return body + f"--{boundary}--\n"


def custom_ami_node_config(pool: NodePool, cluster: aws.eks.Cluster, labels_map: dict[str, str]) -> pulumi.Output[str]:
    """nodeadm's NodeConfig for a user AMI (EKS does not bootstrap those): the cluster, and the labels and
    taints the kubelet registers with (EKS passes the node group's only to its own AMIs)."""
    labels = ",".join(f"{k}={v}" for k, v in labels_map.items())
    taints = ",".join(f"{t['key']}={t['value']}:{t['effect']}" for t in node_taints(pool))
    flags = [f"--node-labels={labels}"] + ([f"--register-with-taints={taints}"] if taints else [])

    def render(args: list[Any]) -> str:
        name, endpoint, ca, cidr = args
        return json.dumps({"apiVersion": "node.eks.aws/v1alpha1", "kind": "NodeConfig",
                           "spec": {"cluster": {"name": name, "apiServerEndpoint": endpoint,
                                                "certificateAuthority": ca, "cidr": cidr},
                                    "kubelet": {"flags": flags}}}, indent=2)

    return pulumi.Output.all(cluster.name, cluster.endpoint, cluster.certificate_authority.data,
                             cluster.kubernetes_network_config.service_ipv4_cidr).apply(render)


def kubeconfig(cluster: aws.eks.Cluster, region: str) -> pulumi.Output[str]:
    """A kubeconfig that authenticates with ``aws eks get-token`` (the caller's AWS credentials)."""

    def render(args: list[Any]) -> str:
        name, endpoint, ca = args
        return json.dumps({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": name, "cluster": {"server": endpoint, "certificate-authority-data": ca}}],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
            "users": [{"name": name, "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1beta1", "command": "aws",
                "args": ["eks", "get-token", "--cluster-name", name, "--region", region]}}}]})

    return pulumi.Output.secret(pulumi.Output.all(cluster.name, cluster.endpoint,
                                                  cluster.certificate_authority.data).apply(render))


def _b64(text: pulumi.Input[str]) -> pulumi.Output[str]:
    return pulumi.Output.from_input(text).apply(lambda t: base64.b64encode(t.encode()).decode())


class AwsCluster(pulumi.ComponentResource):
    """Everything of a stack that lives in AWS, and the Kubernetes provider of its EKS cluster."""

    def __init__(self, name: str, spec: ClusterSpec, lock: Lock, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpufleet:backend:AwsCluster", name, None, opts)
        cfg = spec.aws
        if cfg is None:  # load_spec refuses this already; kept for direct callers
            raise ValueError("backend aws needs gpufleet:aws")
        self.cfg = cfg
        # The GPU Operator's driver/toolkit switches are cluster-wide (the lock): Ansible-managed GPU pools are
        # labelled out of them at registration, as the platform layer labels existing nodes.
        self.operator_components = lock.operator_components
        self.tags = {CLUSTER_TAG: spec.cluster_name}
        self.aws_provider = aws.Provider(f"{name}-aws", region=cfg.region, default_tags={"tags": self.tags},
                                         opts=pulumi.ResourceOptions(parent=self))
        self._network(name, cfg)
        self._cluster(name, spec, cfg)
        self.efa_sg = self._efa_security_group(name)
        self.pools = [self._pool(name, spec, pool) for pool in spec.pools]
        self.lustre_volume_handles, self.lustre_volume_attributes = self._lustre(name, spec, cfg)
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=kubeconfig(self.cluster, cfg.region),
                                     enable_server_side_apply=True,
                                     opts=pulumi.ResourceOptions(parent=self, depends_on=self.node_groups))
        if any(p.fabric == "efa" for p in spec.gpu_pools):
            self._efa_device_plugin(spec, lock)
        self.fsx_csi_addon = self._fsx_csi_addon(name) if spec.storage.lustre is not None else None
        self.handles = BackendHandles(
            provider=self.provider, pools=self.pools, inventory_source={},
            lustre_volume_handles=self.lustre_volume_handles,
            lustre_csi_driver=AWS.fsx_lustre.csi.driver if spec.storage.lustre is not None else None,
            lustre_volume_attributes=self.lustre_volume_attributes)
        self.register_outputs({"cluster": self.cluster.name, "vpc": self.vpc.id})

    def _opts(self, depends_on: list[pulumi.Resource] | None = None) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(parent=self, provider=self.aws_provider, depends_on=depends_on or [])

    # --- network ------------------------------------------------------------------------------------------

    def _network(self, name: str, cfg: Aws) -> None:
        import ipaddress

        net = ipaddress.IPv4Network(cfg.vpc_cidr)
        # Private subnets of an eighth of the VPC each (room for the VPC CNI's pod addresses); the last eighth
        # holds /24 public subnets for the NAT gateways only.
        eighths = list(net.subnets(prefixlen_diff=3))
        private = eighths[:-1]
        public = list(eighths[-1].subnets(prefixlen_diff=3))
        self.vpc = aws.ec2.Vpc(f"{name}-vpc", cidr_block=cfg.vpc_cidr, enable_dns_hostnames=True,
                               enable_dns_support=True, tags={"Name": name}, opts=self._opts())
        igw = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, opts=self._opts())
        public_rt = aws.ec2.RouteTable(f"{name}-public", vpc_id=self.vpc.id,
                                       routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": igw.id}],
                                       opts=self._opts())
        self.private_subnets: list[aws.ec2.Subnet] = []
        for i, zone in enumerate(cfg.availability_zones):
            pub = aws.ec2.Subnet(f"{name}-public-{zone}", vpc_id=self.vpc.id, cidr_block=str(public[i]),
                                 availability_zone=zone, map_public_ip_on_launch=False,
                                 tags={"Name": f"{name}-public-{zone}", "kubernetes.io/role/elb": "1"},
                                 opts=self._opts())
            aws.ec2.RouteTableAssociation(f"{name}-public-{zone}", subnet_id=pub.id, route_table_id=public_rt.id,
                                          opts=self._opts())
            eip = aws.ec2.Eip(f"{name}-nat-{zone}", domain="vpc", opts=self._opts())
            nat = aws.ec2.NatGateway(f"{name}-nat-{zone}", subnet_id=pub.id, allocation_id=eip.id,
                                     opts=self._opts([igw]))
            priv = aws.ec2.Subnet(f"{name}-private-{zone}", vpc_id=self.vpc.id, cidr_block=str(private[i]),
                                  availability_zone=zone, map_public_ip_on_launch=False,
                                  tags={"Name": f"{name}-private-{zone}",
                                        "kubernetes.io/role/internal-elb": "1"},
                                  opts=self._opts())
            rt = aws.ec2.RouteTable(f"{name}-private-{zone}", vpc_id=self.vpc.id,
                                    routes=[{"cidr_block": "0.0.0.0/0", "nat_gateway_id": nat.id}],
                                    opts=self._opts())
            aws.ec2.RouteTableAssociation(f"{name}-private-{zone}", subnet_id=priv.id, route_table_id=rt.id,
                                          opts=self._opts())
            self.private_subnets.append(priv)

    # --- EKS ----------------------------------------------------------------------------------------------

    def _role(self, name: str, service: str, policies: tuple[str, ...]) -> aws.iam.Role:
        """A role ``service`` assumes, with AWS managed ``policies`` (``arn:aws:iam::aws:policy/<name>``)."""
        role = aws.iam.Role(name, assume_role_policy=json.dumps({
            "Version": "2012-10-17",
            # EKS (the cluster) and EKS Pod Identity (pods.eks) tag the session they assume the role with.
            "Statement": [{"Effect": "Allow", "Principal": {"Service": service},
                           "Action": ["sts:AssumeRole",
                                      *(["sts:TagSession"] if "eks.amazonaws.com" in service else [])]}]}),
            opts=self._opts())
        for policy in policies:
            aws.iam.RolePolicyAttachment(f"{name}-{policy}", role=role.name,
                                         policy_arn=f"arn:aws:iam::aws:policy/{policy}", opts=self._opts())
        return role

    def _cluster(self, name: str, spec: ClusterSpec, cfg: Aws) -> None:
        role = self._role(f"{name}-cluster", "eks.amazonaws.com", ("AmazonEKSClusterPolicy",))
        self.cluster = aws.eks.Cluster(
            name, name=spec.cluster_name, role_arn=role.arn, version=cfg.kubernetes_version,
            # Standard support only unless the stack opts into extended support (EKS's default is EXTENDED,
            # billed per cluster hour once a version leaves standard support:
            # https://docs.aws.amazon.com/eks/latest/userguide/extended-support-control.html).
            upgrade_policy={"support_type": "EXTENDED" if cfg.long_term_support else "STANDARD"},
            access_config={"authentication_mode": "API", "bootstrap_cluster_creator_admin_permissions": True},
            vpc_config={"subnet_ids": [s.id for s in self.private_subnets], "endpoint_private_access": True,
                        "endpoint_public_access": cfg.endpoint_public_access,
                        **({"public_access_cidrs": cfg.public_access_cidrs} if cfg.public_access_cidrs else {})},
            opts=self._opts())
        for i, entry in enumerate(cfg.access_entries):
            access = aws.eks.AccessEntry(f"{name}-access-{i}", cluster_name=self.cluster.name,
                                         principal_arn=entry.principal_arn, opts=self._opts())
            aws.eks.AccessPolicyAssociation(
                f"{name}-access-{i}", cluster_name=self.cluster.name, principal_arn=entry.principal_arn,
                policy_arn=f"arn:aws:eks::aws:cluster-access-policy/{entry.policy}",
                access_scope={"type": "cluster"}, opts=self._opts([access]))
        self.node_role = self._role(f"{name}-node", "ec2.amazonaws.com", NODE_POLICIES)
        self.node_groups: list[pulumi.Resource] = []

    def _efa_security_group(self, name: str) -> aws.ec2.SecurityGroup:
        """EFA needs all traffic allowed from and to the same security group
        (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html#efa-start-security)."""
        sg = aws.ec2.SecurityGroup(f"{name}-efa", vpc_id=self.vpc.id, description="EFA: all traffic within",
                                   opts=self._opts())
        aws.vpc.SecurityGroupIngressRule(f"{name}-efa-in", security_group_id=sg.id, ip_protocol="-1",
                                         referenced_security_group_id=sg.id, opts=self._opts())
        aws.vpc.SecurityGroupEgressRule(f"{name}-efa-out", security_group_id=sg.id, ip_protocol="-1",
                                        referenced_security_group_id=sg.id, opts=self._opts())
        # Outbound beyond the group: image pulls, the EFA installer, the API server (through the NAT gateway).
        aws.vpc.SecurityGroupEgressRule(f"{name}-efa-out-any", security_group_id=sg.id, ip_protocol="-1",
                                        cidr_ipv4="0.0.0.0/0", opts=self._opts())
        return sg

    # --- node groups --------------------------------------------------------------------------------------

    def _pool(self, name: str, spec: ClusterSpec, pool: NodePool) -> PoolHandle:
        itype = pool.instance_type or ""
        gpu = pool.role == "gpu"
        tags = {**self.tags, ROLE_LABEL: pool.role, POOL_LABEL: pool.name}
        labels = node_labels(pool, operator_components=self.operator_components)
        if pool.fabric == "efa":
            labels[FABRIC_LABEL] = "efa"
        custom_ami = pool.image is not None and pool.image.startswith("ami-")
        lt_args: dict[str, Any] = {
            # In the template, not the node group: the template alone then says what the policy pack checks
            # (instance type, its EFA interfaces, no public address).
            "instance_type": itype,
            "metadata_options": {"http_tokens": "required", "http_put_response_hop_limit": 2},
            "tag_specifications": [{"resource_type": "instance", "tags": tags}],
            "tags": tags,
            "user_data": _b64(custom_ami_node_config(pool, self.cluster, node_labels(
                pool, operator_components=self.operator_components)).apply(lambda c: user_data(pool, c))
                              if custom_ami else user_data(pool, None)),
        }
        if custom_ami:
            lt_args["image_id"] = pool.image
        # GPU pools: one zone (the first), so the placement group and FSx are close to every node.
        subnets = [self.private_subnets[0].id] if gpu else [s.id for s in self.private_subnets]
        if gpu and pool.fabric == "efa":
            placement = aws.ec2.PlacementGroup(f"{name}-{pool.name}", strategy="cluster", tags=tags,
                                               opts=self._opts())
            lt_args["placement"] = {"group_name": placement.name}
            lt_args["network_interfaces"] = efa_interfaces(
                itype, [self.efa_sg.id, self.cluster.vpc_config.cluster_security_group_id])
        else:
            lt_args["vpc_security_group_ids"] = [self.efa_sg.id, self.cluster.vpc_config.cluster_security_group_id]
        if pool.capacity.type != "on-demand":
            lt_args["capacity_reservation_specification"] = {
                "capacity_reservation_target": {"capacity_reservation_id": pool.capacity.reservation_id}}
        if pool.capacity.type == "capacity-block":
            lt_args["instance_market_options"] = {"market_type": "capacity-block"}
        template = aws.ec2.LaunchTemplate(f"{name}-{pool.name}", **lt_args, opts=self._opts())
        size = pool.size
        group = aws.eks.NodeGroup(
            f"{name}-{pool.name}", cluster_name=self.cluster.name, node_group_name=pool.name,
            node_role_arn=self.node_role.arn, subnet_ids=subnets,
            ami_type="CUSTOM" if custom_ami else AMI_TYPE_STANDARD,
            capacity_type="CAPACITY_BLOCK" if pool.capacity.type == "capacity-block" else "ON_DEMAND",
            scaling_config={"desired_size": size, "min_size": pool.min if pool.min is not None else size,
                            "max_size": pool.max if pool.max is not None else max(size, 1)},
            launch_template={"id": template.id, "version": template.latest_version.apply(str)},
            labels=labels, tags=tags,
            taints=[{"key": t["key"], "value": t["value"] or None, "effect": EKS_EFFECT[t["effect"]]}
                    for t in node_taints(pool)],
            opts=self._opts())
        self.node_groups.append(group)
        return PoolHandle(pool, (), taints_at_registration=True)

    # --- storage ------------------------------------------------------------------------------------------

    def _lustre(self, name: str, spec: ClusterSpec,
                cfg: Aws) -> tuple[dict[str, pulumi.Output[str]], dict[str, dict[str, pulumi.Output[str]]]]:
        """The file systems, and per volume the PV's volumeHandle and volumeAttributes in the FSx CSI driver's
        static-provisioning format (its catalog entry's ``pv_source``)."""
        lustre = spec.storage.lustre
        if lustre is None:
            return {}, {}
        sg = aws.ec2.SecurityGroup(f"{name}-fsx", vpc_id=self.vpc.id, description="FSx for Lustre",
                                   opts=self._opts())
        for lo, hi in LUSTRE_PORTS:
            for source, ref in (("nodes", self.efa_sg.id), ("self", sg.id),
                                ("cluster", self.cluster.vpc_config.cluster_security_group_id)):
                aws.vpc.SecurityGroupIngressRule(f"{name}-fsx-{source}-{lo}", security_group_id=sg.id,
                                                 ip_protocol="tcp", from_port=lo, to_port=hi,
                                                 referenced_security_group_id=ref, opts=self._opts())
        aws.vpc.SecurityGroupEgressRule(f"{name}-fsx-out", security_group_id=sg.id, ip_protocol="-1",
                                        referenced_security_group_id=sg.id, opts=self._opts())
        handles: dict[str, pulumi.Output[str]] = {}
        attributes: dict[str, dict[str, pulumi.Output[str]]] = {}
        for kind, volume in (("datasets", lustre.datasets), ("checkpoints", lustre.checkpoints)):
            fs = aws.fsx.LustreFileSystem(
                f"{name}-{kind}", storage_capacity=volume.capacity_gib, deployment_type="PERSISTENT_2",
                per_unit_storage_throughput=volume.throughput_mbps_per_tib, file_system_type_version="2.15",
                data_compression_type="LZ4", subnet_ids=self.private_subnets[0].id, security_group_ids=[sg.id],
                tags={"Name": f"{spec.cluster_name}-{kind}"}, opts=self._opts())
            if kind == "datasets" and cfg.lustre_s3_path:
                aws.fsx.DataRepositoryAssociation(
                    f"{name}-{kind}-s3", file_system_id=fs.id, data_repository_path=cfg.lustre_s3_path,
                    file_system_path="/", batch_import_meta_data_on_create=True,
                    s3={"auto_import_policy": {"events": ["NEW", "CHANGED", "DELETED"]}}, opts=self._opts())
            # The driver mounts <dnsname>@tcp:/<mountname>, the root of the file system (the stack validation
            # refuses a subdir on aws): the volume is the file system, named by its id.
            handles[kind] = fs.id
            attributes[kind] = {"dnsname": fs.dns_name, "mountname": fs.mount_name}
        return handles, attributes

    def _fsx_csi_addon(self, name: str) -> aws.eks.Addon:
        """AWS's FSx for Lustre CSI driver as the EKS add-on at the catalog's version, after the nodes (its node
        plugin runs there). Its controller authenticates through EKS Pod Identity, which the add-on requires: the
        agent add-on, and the role associated with the controller's service account."""
        csi = AWS.fsx_lustre.csi
        role = self._role(f"{name}-fsx-csi", "pods.eks.amazonaws.com", (csi.policy,))
        agent = aws.eks.Addon(f"{name}-{csi.identity_addon}", cluster_name=self.cluster.name,
                              addon_name=csi.identity_addon, opts=self._opts(self.node_groups))
        return aws.eks.Addon(
            f"{name}-{csi.addon}", cluster_name=self.cluster.name, addon_name=csi.addon,
            addon_version=csi.addon_version,
            pod_identity_associations=[{"role_arn": role.arn, "service_account": csi.service_account}],
            opts=self._opts([*self.node_groups, agent]))

    # --- Kubernetes add-ons of this backend -----------------------------------------------------------------

    def _efa_device_plugin(self, spec: ClusterSpec, lock: Lock) -> None:
        chart = charts.aws_efa_device_plugin(lock)
        efa_pools = [p for p in spec.gpu_pools if p.fabric == "efa"]
        k8s.helm.v3.Release(
            chart.name, name=chart.name, chart=chart.name, version=chart.version, namespace=chart.namespace,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=chart.repo),
            values={"nodeSelector": {FABRIC_LABEL: "efa"}, "tolerations": gpu_node_tolerations(efa_pools)},
            opts=pulumi.ResourceOptions(parent=self, provider=self.provider))
