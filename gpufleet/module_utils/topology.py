"""The node topology model: ``nvidia-smi topo -m`` (and ``nvidia-smi nvlink -s``) parsed and rendered.

This module is the one copy of the topology grammar. It uses only the standard library because it is
also Ansible module_utils (``ansible/module_utils/gpufleet_topology.py`` is a link to this file): the
``gpu_topology`` module parses the matrix on the node with it, and the controller (``gpufleet inspect
topo``, health checks, the simulator's fixture build) uses it through ``gpufleet.topology``, which turns
``TopologyError`` into the ParseError every gpufleet parser raises.

What ``topo -m`` prints (NVIDIA's legend, verbatim in every capture under shared/fixtures/real/topo)::

    X    = Self
    SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
    NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
    PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
    PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
    PIX  = Connection traversing at most a single PCIe bridge
    NV#  = Connection traversing a bonded set of # NVLinks

Each class crosses strictly more of the PCIe/CPU fabric than the one before it in ``PCIE_ORDER`` (PIX: one
bridge; PXB: several bridges, still below the host bridge; PHB: through the host bridge; NODE: between
host bridges of one NUMA node; SYS: across the inter-socket link), so "nearest" is the lowest class.

Variants read (all seen in real captures): tab or space separated; the 550+ ANSI underline around the
header; NIC columns named ``NIC<k>`` with a ``NIC Legend`` (driver 470+) or directly ``mlx5_<k>``
(older drivers); with or without the ``NUMA Affinity`` and ``GPU NUMA ID`` columns; ``N/A`` values;
``topo -mp`` (PCIe classes only); single-GPU VMs (no NIC, no peer); text around the matrix (a shell
prompt, a capture bundle's other sections).
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any


class TopologyError(ValueError):
    """The text is not a parsable ``topo -m`` / ``nvlink -s`` output; ``details`` holds the lines that explain it."""

    def __init__(self, message: str, *, details: list[str] | None = None) -> None:
        self.message = message
        self.details = details or []
        super().__init__(message if not self.details else message + "\n  " + "\n  ".join(self.details))


#: PCIe connection classes, nearest first (see the module docstring for why this order).
PCIE_ORDER = ("PIX", "PXB", "PHB", "NODE", "SYS")
#: Classes that mean "behind the same PCIe switch" (no host bridge crossed): a GPU's own rail NIC.
SWITCH_LOCAL = ("PIX", "PXB")
#: Columns after the devices, in the order nvidia-smi prints them.
AFFINITY_COLUMNS = ("CPU Affinity", "NUMA Affinity", "GPU NUMA ID")
#: nvidia-smi's legend (the 590 branch's text); render() prints it, parse() reads whatever the file has.
LEGEND: dict[str, str] = {
    "X": "Self",
    "SYS": "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)",
    "NODE": "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node",
    "PHB": "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)",
    "PXB": "Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)",
    "PIX": "Connection traversing at most a single PCIe bridge",
    "NV#": "Connection traversing a bonded set of # NVLinks",
}

#: Hardware bounds every number read from topo -m / nvlink -s is held to, before it becomes a list or an index
#: (a CPU range ``0-400000000`` would otherwise be expanded into 400 million ints). CPUs: Linux's largest
#: NR_CPUS (x86-64 MAXSMP, arch/x86/Kconfig NR_CPUS_RANGE_END); GPUs and NVLinks per GPU: well above any board
#: in gpufleet/catalog/gpus.yaml (tests/test_bad_inputs_round2.py checks the catalog stays below them).
MAX_CPUS = 8192
MAX_GPUS = 64
MAX_NVLINKS = 64

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# Digits are bounded in the grammar itself: an index of thousands of digits never reaches int().
_GPU_LABEL = re.compile(r"^GPU(\d{1,3})$")
_NV = re.compile(r"^NV(\d{1,3})$")
_CELL = re.compile(r"^(X|NV\d{1,3}|PIX|PXB|PHB|NODE|SYS|SOC)$")
_LEGEND_LINE = re.compile(r"^\s+(X|NV#|[A-Z]{2,4})\s+=\s+(.+?)\s*$")
_NIC_LEGEND_LINE = re.compile(r"^\s+(NIC\d+):\s+(\S+)\s*$")
_NO_VALUE = ("", "N/A", "n/a")
#: Lines nvidia-smi prints instead of a matrix (NVML failures): reported as the reason.
_FAILURE = re.compile(r"(Failed to initialize NVML|NVIDIA-SMI has failed|No devices were found|"
                      r"couldn't communicate with the NVIDIA driver|command not found)", re.I)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


def _pcie_rank(cls: str) -> int:
    # SOC is the pre-410 name of SYS.
    return PCIE_ORDER.index("SYS" if cls == "SOC" else cls)


@dataclass(frozen=True)
class Topology:
    """One node's ``topo -m`` matrix, kept whole so that it renders back to the same text.

    ``labels`` are the device columns as printed (``GPU0``.., ``NIC0``.. or ``mlx5_0``..), ``cells[i][j]``
    the class between ``labels[i]`` and ``labels[j]`` (``X`` on the diagonal). ``nic_names`` maps a NIC
    label to its device name (the ``NIC Legend``; the label itself when the driver printed names).
    """

    labels: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]
    #: GPU label -> (CPU Affinity, NUMA Affinity, GPU NUMA ID) as printed; None where N/A or absent.
    affinity: dict[str, tuple[str | None, int | None, int | None]]
    #: Which affinity columns the header had (rendering keeps them).
    affinity_columns: tuple[str, ...] = AFFINITY_COLUMNS
    nic_names: dict[str, str] = field(default_factory=dict)
    legend: dict[str, str] = field(default_factory=lambda: dict(LEGEND))

    # --- views -----------------------------------------------------------------------------------------
    @property
    def gpu_labels(self) -> list[str]:
        return [lb for lb in self.labels if _GPU_LABEL.match(lb)]

    @property
    def nic_labels(self) -> list[str]:
        return [lb for lb in self.labels if not _GPU_LABEL.match(lb)]

    @property
    def gpu_count(self) -> int:
        return len(self.gpu_labels)

    @property
    def nic_names_ordered(self) -> list[str]:
        return [self.nic_name(lb) for lb in self.nic_labels]

    def nic_name(self, label: str) -> str:
        return self.nic_names.get(label, label)

    def cell(self, a: str, b: str) -> str:
        return self.cells[self.labels.index(a)][self.labels.index(b)]

    def gpu_index(self, label: str) -> int:
        m = _GPU_LABEL.match(label)
        if not m:
            raise KeyError(label)
        return int(m.group(1))

    def nvlink(self, gpu: int) -> dict[int, int]:
        """Peer GPU index -> number of bonded NVLinks (``NV18`` -> 18); peers over PCIe are absent."""
        me = f"GPU{gpu}"
        out: dict[int, int] = {}
        for peer in self.gpu_labels:
            m = _NV.match(self.cell(me, peer)) if peer != me else None
            if m:
                out[self.gpu_index(peer)] = int(m.group(1))
        return out

    def nearest_nics(self, gpu: int) -> list[str]:
        """Names of the NICs with the GPU's best PCIe class (ties all listed, in column order)."""
        me = f"GPU{gpu}"
        classes = {lb: self.cell(me, lb) for lb in self.nic_labels}
        if not classes:
            return []
        best = min(_pcie_rank(c) for c in classes.values())
        return [self.nic_name(lb) for lb, c in classes.items() if _pcie_rank(c) == best]

    def nearest_gpus(self, nic: str) -> list[int]:
        """Indices of the GPUs with the NIC's best PCIe class (``nic`` by name or label)."""
        label = next((lb for lb in self.nic_labels if nic in (lb, self.nic_name(lb))), None)
        if label is None:
            raise KeyError(nic)
        classes = {self.gpu_index(g): self.cell(label, g) for g in self.gpu_labels}
        if not classes:
            return []
        best = min(_pcie_rank(c) for c in classes.values())
        return [i for i, c in classes.items() if _pcie_rank(c) == best]

    def rail_nics(self) -> list[str]:
        """NICs behind a GPU's own PCIe switch (PIX/PXB to some GPU): the data rails of HGX boards.

        Storage and front-end NICs reach GPUs only through a host bridge (NODE/SYS) and are not listed.
        """
        return [self.nic_name(lb) for lb in self.nic_labels
                if any(self.cell(lb, g) in SWITCH_LOCAL for g in self.gpu_labels)]

    def hcas_in_gpu_order(self) -> list[str]:
        """Each GPU's nearest NICs, GPU 0 first, each name once: what NCCL_IB_HCA lists."""
        out: list[str] = []
        for g in self.gpu_labels:
            for name in self.nearest_nics(self.gpu_index(g)):
                if name not in out:
                    out.append(name)
        return out

    def gpu(self, index: int) -> dict[str, Any]:
        cpu, numa, gpu_numa = self.affinity.get(f"GPU{index}", (None, None, None))
        return {"index": index, "numa_node": numa, "cpu_affinity": cpu, "gpu_numa_id": gpu_numa,
                "nvlink": {str(k): v for k, v in self.nvlink(index).items()},
                "nearest_nics": self.nearest_nics(index)}

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape of ``gpufleet inspect topo --json`` (and the ``gpu_topology`` module's result)."""
        return {
            "gpus": [self.gpu(self.gpu_index(g)) for g in self.gpu_labels],
            "nics": [{"name": self.nic_name(lb), "label": lb,
                      "nearest_gpus": self.nearest_gpus(lb),
                      "gpus": {str(self.gpu_index(g)): self.cell(lb, g) for g in self.gpu_labels}}
                     for lb in self.nic_labels],
            "rail_nics": self.rail_nics(),
            "cpus": max((c for g in self.gpu_labels if (a := self.affinity.get(g, (None,))[0])
                         for c in cpu_list(a)), default=-1) + 1,
            "hcas_in_gpu_order": self.hcas_in_gpu_order(),
            "legend": dict(self.legend),
        }


# --- parsing ------------------------------------------------------------------------------------------

def _split_header(line: str) -> list[str]:
    # Columns are tab separated, or (tabs expanded) separated by 2+ spaces; "CPU Affinity" has one space.
    return [c for c in re.split(r"\t+| {2,}", line.strip()) if c]


def _is_header(cols: list[str]) -> bool:
    if not cols or cols[0] != "GPU0":
        return False
    return all(_GPU_LABEL.match(c) or re.match(r"^[\w.:-]+$", c) or c in AFFINITY_COLUMNS for c in cols)


def _value(text: str) -> str | None:
    return None if text.strip() in _NO_VALUE else text.strip()


def _int(text: str | None, where: str) -> int | None:
    if text is None:
        return None
    if not re.fullmatch(r"\d{1,4}", text) or int(text) >= MAX_CPUS:
        raise TopologyError(f"{where}: {text!r} is not a NUMA node number")
    return int(text)


def parse_topo_m(text: str) -> Topology:
    """Parse ``nvidia-smi topo -m`` (or ``-mp``) output; raises TopologyError saying what and where."""
    lines = strip_ansi(text).splitlines()
    start = None
    for n, line in enumerate(lines):
        cols = _split_header(line)
        if _is_header(cols) and n + 1 < len(lines) and lines[n + 1].split()[:1] == ["GPU0"]:
            start = n
            break
    if start is None:
        failures = [ln.strip() for ln in lines if _FAILURE.search(ln)]
        raise TopologyError("no nvidia-smi topo -m matrix (a header row 'GPU0 ...' followed by a GPU0 row)",
                         details=failures[:3])
    header = _split_header(lines[start])
    labels = tuple(c for c in header if c not in AFFINITY_COLUMNS)
    aff_cols = tuple(c for c in header if c in AFFINITY_COLUMNS)
    if header[len(labels):] != list(aff_cols):
        raise TopologyError(f"line {start + 1}: affinity columns must follow the devices: {header}")
    n = len(labels)
    for label in labels:
        m = _GPU_LABEL.match(label)
        if m and int(m.group(1)) >= MAX_GPUS:
            raise TopologyError(f"line {start + 1}: {label}: a node has fewer than {MAX_GPUS} GPUs")
    if sum(1 for label in labels if _GPU_LABEL.match(label)) > MAX_GPUS:
        raise TopologyError(f"line {start + 1}: more than {MAX_GPUS} GPUs in the header")
    cells: list[tuple[str, ...]] = []
    affinity: dict[str, tuple[str | None, int | None, int | None]] = {}
    for i, label in enumerate(labels):
        lineno = start + 2 + i
        if lineno - 1 >= len(lines):
            raise TopologyError(f"line {lineno}: matrix ends after {i} of {n} rows")
        # Cells never hold spaces (" X " is padding), so any run of whitespace separates them; the empty
        # cell nvidia-smi prints before GPU NUMA ID disappears with it.
        tokens = lines[lineno - 1].split()
        if not tokens or tokens[0] != label:
            raise TopologyError(f"line {lineno}: row {tokens[:1] or ['(empty)']} where {label} was expected",
                             details=[lines[lineno - 1].rstrip()])
        row = tokens[1:n + 1]
        if len(row) != n or not all(_CELL.match(c) for c in row):
            raise TopologyError(f"line {lineno}: {label} has {len(row)} connection cells, expected {n} of "
                             f"X/NV#/PIX/PXB/PHB/NODE/SYS", details=[lines[lineno - 1].rstrip()])
        if row[i] != "X":
            raise TopologyError(f"line {lineno}: {label} is not X (self) on the diagonal but {row[i]}")
        cells.append(tuple(row))
        rest = tokens[n + 1:]
        if _GPU_LABEL.match(label):
            vals = [_value(v) for v in rest] + [None] * (len(aff_cols) - len(rest))
            got = dict(zip(aff_cols, vals, strict=False))
            cpus = got.get("CPU Affinity")
            if cpus is not None:
                try:
                    cpu_list(cpus)
                except TopologyError as e:
                    raise TopologyError(f"line {lineno}: {label} CPU Affinity: {e.message}") from None
            affinity[label] = (got.get("CPU Affinity"),
                               _int(got.get("NUMA Affinity"), f"line {lineno}: {label} NUMA Affinity"),
                               _int(got.get("GPU NUMA ID"), f"line {lineno}: {label} GPU NUMA ID"))
    for i in range(n):
        for j in range(n):
            if cells[i][j] != cells[j][i]:
                raise TopologyError(f"matrix is not symmetric: {labels[i]}-{labels[j]} is {cells[i][j]}, "
                                 f"{labels[j]}-{labels[i]} is {cells[j][i]}")
    legend: dict[str, str] = {}
    nic_names: dict[str, str] = {}
    section = ""
    for line in lines[start + 1 + n:]:
        stripped = line.strip()
        if stripped in ("Legend:", "NIC Legend:"):
            section = stripped
            continue
        if not stripped:
            continue
        m = _NIC_LEGEND_LINE.match(line)
        if section == "NIC Legend:" and m:
            nic_names[m.group(1)] = m.group(2)
            continue
        m = _LEGEND_LINE.match(line)
        if section == "Legend:" and m:
            legend[m.group(1)] = m.group(2)
            continue
        break  # the matrix's text ends here (a capture bundle's next section, a prompt)
    missing = [lb for lb in labels if lb.startswith("NIC") and re.fullmatch(r"NIC\d+", lb) and lb not in nic_names]
    if missing:
        raise TopologyError(f"NIC Legend lacks {', '.join(missing)}: cannot name those NICs")
    return Topology(labels=labels, cells=tuple(cells), affinity=affinity, affinity_columns=aff_cols,
                    nic_names=nic_names, legend=legend)


# --- rendering ----------------------------------------------------------------------------------------

def render_topo_m(topo: Topology) -> str:
    """``nvidia-smi topo -m`` text for ``topo`` as the 550+ drivers print it (tab separated, the header
    underlined with ANSI escapes even when stdout is not a terminal, as the byte-exact 590.48.01 capture
    shows; GPU rows leave an empty cell before GPU NUMA ID; NIC rows pad the affinity columns)."""
    cols = [*topo.labels, *topo.affinity_columns]
    out = ["\t\x1b[4m" + "\t".join(cols) + "\x1b[0m"]
    for i, label in enumerate(topo.labels):
        cells = [" X " if c == "X" else c for c in topo.cells[i]]
        if label in topo.affinity:
            cpu, numa, gpu_numa = topo.affinity[label]
            vals = {"CPU Affinity": cpu or "N/A", "NUMA Affinity": "N/A" if numa is None else str(numa),
                    "GPU NUMA ID": "N/A" if gpu_numa is None else str(gpu_numa)}
            tail = [vals[c] for c in topo.affinity_columns]
            if "GPU NUMA ID" in topo.affinity_columns:
                tail.insert(len(tail) - 1, "")
            out.append(label + "\t" + "\t".join(cells + tail))
        else:
            out.append(label + "\t" + "\t".join(cells) + "\t" * (len(topo.affinity_columns) + 1))
    text = "\n".join(out) + "\n\nLegend:\n\n"
    width = max((len(k) for k in topo.legend), default=0)
    text += "".join(f"  {k.ljust(max(width, 4))} = {v}\n" for k, v in topo.legend.items())
    if topo.nic_names:
        text += "\nNIC Legend:\n\n" + "".join(f"  {k}: {v}\n" for k, v in topo.nic_names.items())
    return text


def build_board(*, gpus: int, nvlink: int, numa_cpus: tuple[str, ...], nics: int = 0,
                nic_class: str = "PIX", gpu_pcie_same_numa: str = "NODE",
                nic_names: tuple[str, ...] | None = None) -> Topology:
    """A symmetric board: GPUs split evenly over ``len(numa_cpus)`` NUMA nodes, NVLink ``NV<nvlink>``
    between every GPU pair (0: PCIe only), and ``nics`` rail NICs, NIC k at ``nic_class`` to GPU k
    (HGX boards: one ConnectX per GPU behind the GPU's PCIe switch) and NODE/SYS to the rest."""
    per_numa = max(1, gpus // len(numa_cpus))

    def numa(k: int) -> int:
        return min(k // per_numa, len(numa_cpus) - 1)

    def pcie(a: int, b: int) -> str:
        return gpu_pcie_same_numa if numa(a) == numa(b) else "SYS"

    gl = [f"GPU{i}" for i in range(gpus)]
    nl = [f"NIC{k}" for k in range(nics)]
    labels = (*gl, *nl)

    def cls(a: str, b: str) -> str:
        if a == b:
            return "X"
        ga, gb = a in gl, b in gl
        ia, ib = int(a[3:]), int(b[3:])
        if ga and gb:
            return f"NV{nvlink}" if nvlink else pcie(ia, ib)
        if ga != gb:
            g, k = (ia, ib) if ga else (ib, ia)
            return nic_class if g == k else pcie(g, k)
        return pcie(ia, ib)

    cells = tuple(tuple(cls(a, b) for b in labels) for a in labels)
    names = nic_names or tuple(f"mlx5_{k}" for k in range(nics))
    return Topology(labels=labels, cells=cells,
                    affinity={f"GPU{i}": (numa_cpus[numa(i)], numa(i), None) for i in range(gpus)},
                    nic_names=dict(zip(nl, names, strict=True)))


# --- nvidia-smi nvlink -s -----------------------------------------------------------------------------

_NVL_GPU = re.compile(r"^GPU (\d{1,3}): (.+?) \(UUID: ([^)]+)\)\s*$")
_NVL_LINK = re.compile(r"^\s+Link (\d{1,3}): (?:(\d{1,6}(?:\.\d{1,6})?) GB/s|(.+?))\s*$")


@dataclass(frozen=True)
class NvlinkGpu:
    index: int
    name: str
    uuid: str
    #: Link number -> GB/s for active links; inactive links are in ``inactive``.
    links: dict[int, float]
    inactive: tuple[int, ...] = ()
    #: Why no links are listed ("Nvlink queries are not supported for Devices in MIG mode", ...).
    note: str | None = None

    @property
    def active_links(self) -> int:
        return len(self.links)


def parse_nvlink_status(text: str) -> list[NvlinkGpu]:
    """Parse ``nvidia-smi nvlink -s`` (``--status``): per GPU, the links and their speed or state."""
    gpus: list[NvlinkGpu] = []
    cur: dict[str, Any] | None = None

    def close() -> None:
        if cur is not None:
            gpus.append(NvlinkGpu(cur["index"], cur["name"], cur["uuid"], cur["links"], tuple(cur["inactive"]),
                                  cur["note"]))

    for line in strip_ansi(text).splitlines():
        m = _NVL_GPU.match(line.strip())
        if m:
            close()
            if int(m.group(1)) >= MAX_GPUS:
                raise TopologyError(f"GPU {m.group(1)}: a node has fewer than {MAX_GPUS} GPUs")
            cur = {"index": int(m.group(1)), "name": m.group(2), "uuid": m.group(3), "links": {},
                   "inactive": [], "note": None}
            continue
        if cur is None or not line.strip():
            continue
        m = _NVL_LINK.match(line)
        if m and int(m.group(1)) >= MAX_NVLINKS:
            raise TopologyError(f"Link {m.group(1)}: a GPU has fewer than {MAX_NVLINKS} NVLinks")
        if m:
            if m.group(2) is not None:
                cur["links"][int(m.group(1))] = float(m.group(2))
            else:
                cur["inactive"].append(int(m.group(1)))
        elif not cur["links"] and cur["note"] is None:
            cur["note"] = line.strip()
    close()
    if not gpus:
        raise TopologyError("no nvidia-smi nvlink -s output (a 'GPU <n>: <name> (UUID: ...)' line)")
    return gpus


# --- Slurm gres ---------------------------------------------------------------------------------------

def cpu_list(text: str) -> list[int]:
    """``0-47,96-143`` -> [0, ..., 47, 96, ..., 143]; CPU ids below MAX_CPUS, ranges ascending, at most MAX_CPUS ids.

    Checked before anything is expanded: memory stays bounded by MAX_CPUS whatever the text says.
    """
    parts = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\d{1,5})(?:-(\d{1,5}))?\s*", part)
        if not m:
            raise TopologyError(f"CPU list {text[:80]!r} is not of the form 0-47,96-143")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi >= MAX_CPUS or lo > hi:
            raise TopologyError(f"CPU list {text[:80]!r}: {part.strip()} is not a range of CPU ids below {MAX_CPUS}")
        parts.append((lo, hi))
    if sum(hi - lo + 1 for lo, hi in parts) > MAX_CPUS:
        raise TopologyError(f"CPU list {text[:80]!r} names more than {MAX_CPUS} CPUs")
    out: list[int] = []
    for lo, hi in parts:
        out.extend(range(lo, hi + 1))
    return out


def cpu_ranges(ids: list[int]) -> str:
    """[0, 1, 2, 5] -> ``0-2,5``."""
    out: list[str] = []
    for i in sorted(set(ids)):
        if out and "-" in out[-1] and int(out[-1].split("-")[1]) == i - 1:
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        elif out and "-" not in out[-1] and int(out[-1]) == i - 1:
            out[-1] = f"{out[-1]}-{i}"
        else:
            out.append(str(i))
    return ",".join(out)


def slurm_gres(topo: Topology, threads_per_core: int = 1, device: str = "/dev/nvidia{index}") -> list[dict[str, Any]]:
    """One gres.conf GPU entry per GPU: File, Cores (Slurm's logical core indices) and Links (NVLink counts).

    Slurm's ``Cores=`` takes logical core indices (core 0 = first core of the first socket, as ``lstopo -l``
    numbers them), not the CPU ids ``topo -m`` prints. Linux numbers the first thread of every core 0..C-1 in
    socket order and the sibling threads C..2C-1 after them, so CPU ``c`` is core ``c mod C`` with
    C = CPUs / threads_per_core, CPUs counted over the GPUs' affinities (every socket has GPUs on these boards).
    ``Links=`` lists, per GPU index, the NVLink count to that GPU (-1: itself, 0: none); left out on PCIe-only
    boards, where Slurm has nothing to prefer.
    """
    affinities = {g: topo.affinity.get(g, (None, None, None))[0] for g in topo.gpu_labels}
    known = [c for a in affinities.values() if a for c in cpu_list(a)]
    cores_total = (max(known) + 1) // max(1, threads_per_core) if known else 0
    any_nvlink = any(topo.nvlink(topo.gpu_index(g)) for g in topo.gpu_labels)
    out: list[dict[str, Any]] = []
    for g in topo.gpu_labels:
        i = topo.gpu_index(g)
        aff = affinities[g]
        cores = cpu_ranges([c % cores_total for c in cpu_list(aff)]) if aff and cores_total else None
        links = None
        if any_nvlink:
            peers = topo.nvlink(i)
            links = ",".join("-1" if j == i else str(peers.get(j, 0))
                             for j in (topo.gpu_index(x) for x in topo.gpu_labels))
        out.append({"index": i, "file": device.format(index=i), "cores": cores, "links": links})
    return out


# --- NCCL -----------------------------------------------------------------------------------------------

def nccl_hca_match(ca: str, port: int | None, spec: str | None) -> bool:
    """Whether HCA ``ca`` (port ``port``; None: any) is selected by an ``NCCL_IB_HCA`` value: comma-separated
    prefixes, ``=`` for exact names, a leading ``^`` to exclude, ``:<port>`` per entry. NCCL's grammar
    (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-hca); empty selects all."""
    if not spec or not spec.strip():
        return True
    text = spec.strip()
    exclude = text.startswith("^")
    text = text.lstrip("^")
    exact = text.startswith("=")
    text = text.lstrip("=")
    hit = False
    for item in filter(None, (s.strip() for s in text.split(","))):
        name, _, p = item.partition(":")
        if (ca == name if exact else ca.startswith(name)) and (port is None or not p.isdigit() or int(p) == port):
            hit = True
            break
    return hit != exclude


def interfaces_in(facts: dict[str, Any], cidr: str) -> list[str]:
    """Names of the interfaces (from Ansible's network facts) holding an address inside ``cidr``."""
    net = ipaddress.ip_network(cidr, strict=False)
    out: list[str] = []
    for name in facts.get("interfaces") or []:
        info = facts.get(name.replace("-", "_")) or {}
        addrs = [info.get("ipv4") or {}, *(info.get("ipv4_secondaries") or []), *(info.get("ipv6") or [])]
        for a in addrs:
            try:
                if a.get("address") and ipaddress.ip_address(a["address"]) in net:
                    out.append(name)
                    break
            except ValueError:
                continue
    return sorted(out)


class FilterModule:
    """Ansible filters (ansible/filter_plugins/gpufleet_topology.py links to this file)."""

    def filters(self) -> dict[str, Any]:
        return {
            "gpufleet_interfaces_in": interfaces_in,
            # NCCL_IB_HCA and NCCL_SOCKET_IFNAME share the grammar (prefixes, "=" exact, "^" exclude).
            "gpufleet_nccl_select": lambda names, spec: [n for n in names if nccl_hca_match(n, None, spec)],
        }
