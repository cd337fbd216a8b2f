"""Typed shape of a GPU catalog entry (the data lives in gpus.yaml next to this module)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from gpufleet.module_utils.power_limit import parse_power_limit

#: PCIe 5.0 x16, both directions, GB/s: the fastest host link any catalog GPU has without NVLink.
PCIE5_X16_GBS = 128


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class BusbwGate(_Frozen):
    """Acceptance gate for one nccl-tests collective: busbw at or above this for messages >= min_bytes."""

    collective: Literal["all_reduce", "all_gather", "reduce_scatter", "alltoall"]
    #: single-node: one board over NVLink/PCIe; multi-node: across the data fabric.
    scope: Literal["single-node", "multi-node"]
    min_bytes: int = Field(gt=0)
    busbw_gbs: float = Field(gt=0)
    #: What the number assumes (GPUs per node, NICs per GPU) -- gates are meaningless without it.
    assumes: str
    source: str


class GpuModel(_Frozen):
    key: str
    #: Product name exactly as ``nvidia-smi --query-gpu=name`` prints it.
    name: str
    architecture: Literal["ampere", "ada", "hopper", "blackwell"]
    compute_capability: str = Field(pattern=r"^\d+\.\d+$")
    min_driver_branch: int
    #: Oldest CUDA toolkit (major.minor) that can build for this compute capability.
    min_cuda: str = Field(pattern=r"^\d+\.\d+$")
    power_default_w: int
    power_min_w: int
    power_max_w: int
    memory_gib: int
    #: Framebuffer as nvidia-smi reports it (memory.total), where a real capture shows it.
    memory_mib_reported: int | None = None
    nvlink_generation: int | None
    nvlink_bw_gbs_per_gpu: int
    #: HGX boards with NVSwitch need nvidia-fabricmanager (and NSCQ) at exactly the driver version.
    nvswitch: bool
    mig: bool
    open_modules_required: bool
    gpus_per_node: int
    #: NVLinks bonded between every pair of GPUs on the board, as ``nvidia-smi topo -m`` shows them (NV18 -> 18);
    #: None: no all-to-all NVLink (PCIe cards, bridge pairs). The topo-nvlink health check compares each pair.
    nvlinks_per_gpu_pair: int | None = None
    #: NICs behind the GPUs' own PCIe switches (PIX/PXB to a GPU in topo -m) on the reference board: the compute
    #: rails, one per GPU on HGX boards. None: depends on the server. The topo-nics health check counts them.
    rail_nics_per_node: int | None = None
    gates: tuple[BusbwGate, ...] = ()
    #: field name -> where the number comes from.
    sources: dict[str, str]

    def gate(self, collective: str = "all_reduce", scope: str = "single-node") -> BusbwGate | None:
        for g in self.gates:
            if g.collective == collective and g.scope == scope:
                return g
        return None

    @property
    def busbw_ceiling_gbs(self) -> float:
        """Bus bandwidth no nccl-tests run on this GPU can show: its NVLink bandwidth (both directions, every
        link), or for PCIe cards PCIe 5.0 x16 both ways (PCI-SIG: 32 GT/s x 16 lanes, ~64 GB/s each way).
        A busbw above it is a corrupt or forged log, not a fast cluster."""
        return float(max(self.nvlink_bw_gbs_per_gpu, PCIE5_X16_GBS))

    def resolve_power_limit(self, value: str | int) -> int:
        """Watts of a pool's ``power_limit`` on this model (grammar: gpufleet.module_utils.power_limit).

        Raises PowerLimitError (a ValueError) when the value does not parse or is outside the model's range.
        """
        watts = parse_power_limit(value).watts(default=self.power_default_w, minimum=self.power_min_w,
                                               maximum=self.power_max_w, where=self.name)
        return int(watts)
