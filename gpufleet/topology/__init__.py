"""Node topology: ``nvidia-smi topo -m`` / ``nvlink -s`` parsed into one model, and what is derived from it
(NCCL's HCA list, Slurm's gres lines, the simulator's matrices, the health checks' NVLink and NIC counts).

The model and the grammar live in ``gpufleet/module_utils/topology.py`` (standard library only: Ansible ships it
to nodes for the ``gpu_topology`` module); this package raises ParseError like every gpufleet parser.
"""

from __future__ import annotations

from gpufleet.module_utils import topology as _shared
from gpufleet.module_utils.topology import (
    LEGEND,
    PCIE_ORDER,
    SWITCH_LOCAL,
    NvlinkGpu,
    Topology,
    build_board,
    render_topo_m,
)
from gpufleet.parsers.errors import ParseError

__all__ = ["LEGEND", "PCIE_ORDER", "SWITCH_LOCAL", "NvlinkGpu", "Topology", "build_board", "parse_nvlink_status",
           "parse_topo_m", "render_topo_m"]


def parse_topo_m(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` (or ``-mp``) output; ParseError says what is wrong and where."""
    try:
        return _shared.parse_topo_m(text)
    except _shared.TopologyError as e:
        raise ParseError(e.message, details=e.details) from None


def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    """Parse ``nvidia-smi nvlink -s``; ParseError when the text holds no GPU line."""
    try:
        return _shared.parse_nvlink_status(text)
    except _shared.TopologyError as e:
        raise ParseError(e.message, details=e.details) from None
