"""Parser of ``ibstat`` (infiniband-diags) output: one entry per HCA port.

Read as ``ibstat`` prints it (``CA 'mlx5_0'`` blocks, indented ``Port N:`` sub-blocks, ``Key: value``
lines; tabs or spaces). Lines outside that shape are kept in ``errors`` when they look like a failure
(``ibpanic: ... failed``, ``ibwarn: ...``): ibstat exits 255 after the ports it could read, and those
ports are still worth judging. Captures in ``../shared/fixtures/real/ib/`` (ConnectX-6/7, IB and
Ethernet link layers, ports Down/Polling) are the test data.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from gpufleet.module_utils.topology import nccl_hca_match
from gpufleet.parsers.errors import ParseError

_CA = re.compile(r"^CA '(?P<name>[^']+)'\s*$")
_PORT = re.compile(r"^\s+Port (?P<port>\d+):\s*$")
_KV = re.compile(r"^\s+(?P<key>[A-Za-z][A-Za-z ]*?):\s*(?P<value>.*?)\s*$")
_ERROR = re.compile(r"^(ibpanic|ibwarn|ibstat):|\bfailed\b|No such file", re.IGNORECASE)


@dataclass(frozen=True)
class IbPort:
    ca: str
    port: int
    ca_type: str | None
    firmware: str | None
    #: "Active", "Down", "Initializing", "Armed".
    state: str | None
    #: "LinkUp", "Polling", "Disabled", ...
    physical_state: str | None
    #: Gb/s as ibstat prints it (400 = NDR 4x, 200 = HDR 4x).
    rate_gbps: int | None
    #: "InfiniBand" or "Ethernet" (RoCE).
    link_layer: str | None

    @property
    def name(self) -> str:
        return f"{self.ca}/{self.port}"

    @property
    def active(self) -> bool:
        return self.state == "Active" and self.physical_state == "LinkUp"


@dataclass(frozen=True)
class IbstatReport:
    ports: list[IbPort]
    errors: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _rate(value: str | None) -> int | None:
    m = re.match(r"^(\d+)", value or "")
    return int(m.group(1)) if m else None


def parse_ibstat(text: str) -> IbstatReport:
    """Ports of ``ibstat`` output in print order; raise ParseError when no ``CA '...'`` block is found."""
    ports: list[IbPort] = []
    errors: list[str] = []
    ca: str | None = None
    ca_fields: dict[str, str] = {}
    port: int | None = None
    port_fields: dict[str, str] = {}

    def flush_port() -> None:
        nonlocal port, port_fields
        if ca is not None and port is not None:
            ports.append(IbPort(
                ca=ca,
                port=port,
                ca_type=ca_fields.get("CA type"),
                firmware=ca_fields.get("Firmware version"),
                state=port_fields.get("State"),
                physical_state=port_fields.get("Physical state"),
                rate_gbps=_rate(port_fields.get("Rate")),
                link_layer=port_fields.get("Link layer"),
            ))
        port, port_fields = None, {}

    seen_ca = False
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line.strip():
            continue
        if m := _CA.match(line):
            flush_port()
            ca, ca_fields, seen_ca = m["name"], {}, True
            continue
        if m := _PORT.match(line):
            flush_port()
            port = int(m["port"])
            continue
        if ca is not None and (m := _KV.match(line)):
            (port_fields if port is not None else ca_fields)[m["key"]] = m["value"]
            continue
        if _ERROR.search(line):
            errors.append(line.strip())
    flush_port()
    if not seen_ca:
        raise ParseError("no \"CA '...'\" block: not ibstat output", details=errors or [text.strip()[:200]])
    return IbstatReport(ports=ports, errors=errors)


def select_hcas(ports: list[IbPort], nccl_ib_hca: str | None) -> list[IbPort]:
    """The ports an ``NCCL_IB_HCA`` value selects (prefixes, ``=`` exact names, ``^`` exclusion, ``:port``).

    Same grammar as NCCL's (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-hca);
    None or "" selects every port.
    """
    return [p for p in ports if nccl_hca_match(p.ca, p.port, nccl_ib_hca)]
