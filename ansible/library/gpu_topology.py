#!/usr/bin/python
"""Ansible module: read the node's GPU/NIC topology (``nvidia-smi topo -m``) as gpufleet's topology model."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_topology
short_description: Read the GPU/NIC topology of a node from nvidia-smi topo -m
description:
  - Runs C(nvidia-smi topo -m) and parses it with gpufleet's topology grammar (module_utils gpufleet_topology,
    the same code as C(gpufleet inspect topo)).
  - Returns per GPU its NUMA node, CPU affinity, NVLink peers and nearest NICs, per NIC its nearest GPUs, and the
    HCAs nearest to the GPUs in GPU order (what NCCL_IB_HCA lists).
  - Changes nothing; runs in check mode. Without nvidia-smi (check mode before the driver is installed) it returns
    O(present=false) and says so, it does not fail; a failing nvidia-smi or an unreadable matrix fails with its output.
options:
  nvidia_smi:
    description: Path or name of nvidia-smi.
    type: str
    default: nvidia-smi
  threads_per_core:
    description:
      - Hardware threads per core, to turn the matrix's CPU ids into Slurm's logical core indices (slurm_gres).
      - V(0) reads it from the node (C(/sys/devices/system/cpu/cpu0/topology/thread_siblings_list)).
    type: int
    default: 0
author: gpufleet
"""

EXAMPLES = r"""
- name: Read the node's topology
  gpu_topology:
  register: topo
"""

RETURN = r"""
present:
  description: Whether nvidia-smi was found and a matrix read.
  returned: always
  type: bool
topology:
  description: The model (gpus, nics, rail_nics, hcas_in_gpu_order, legend), as gpufleet inspect topo --json prints it.
  returned: when present
  type: dict
slurm_gres:
  description: Per GPU, gres.conf's File, Cores (logical core indices) and Links (NVLink counts, null without NVLink).
  returned: when present
  type: list
  elements: dict
threads_per_core:
  description: The threads per core the Cores were computed with.
  returned: when present
  type: int
text:
  description: The raw matrix text.
  returned: when present
  type: str
"""

import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible.module_utils.gpufleet_topology import TopologyError, cpu_list, parse_topo_m, slurm_gres

SIBLINGS = "/sys/devices/system/cpu/cpu0/topology/thread_siblings_list"


def node_threads_per_core() -> int:
    try:
        with open(SIBLINGS, encoding="ascii") as f:
            return max(1, len(cpu_list(f.read().strip())))
    except (OSError, TopologyError):
        return 1


def main() -> None:
    module = AnsibleModule(argument_spec={"nvidia_smi": {"type": "str", "default": "nvidia-smi"},
                                          "threads_per_core": {"type": "int", "default": 0}},
                           supports_check_mode=True)
    smi = module.params["nvidia_smi"]
    path = shutil.which(smi)
    if path is None:
        module.exit_json(changed=False, present=False,
                         msg=f"{smi} not found: no topology until the driver is installed")
    rc, out, err = module.run_command([path, "topo", "-m"], environ_update={"LC_ALL": "C"})
    if rc != 0:
        module.fail_json(msg=f"{smi} topo -m failed (rc {rc}): {(out + err).strip()[:500]}", rc=rc)
    try:
        topo = parse_topo_m(out)
    except TopologyError as e:
        module.fail_json(msg=f"{smi} topo -m output unreadable: {e}", text=out)
    tpc = module.params["threads_per_core"] or node_threads_per_core()
    module.exit_json(changed=False, present=True, topology=topo.to_dict(), slurm_gres=slurm_gres(topo, tpc),
                     threads_per_core=tpc, text=out)


if __name__ == "__main__":
    main()
