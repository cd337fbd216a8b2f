"""parse_ibstat on every real ibstat capture in ../shared, and the NCCL_IB_HCA selection grammar."""

from __future__ import annotations

import pytest

from gpufleet import REPO_ROOT
from gpufleet.parsers import ParseError
from gpufleet.validation.ibstat import IbPort, parse_ibstat, select_hcas

IB = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "ib"
needs_shared = pytest.mark.skipif(not IB.is_dir(), reason=f"reference data {IB} is absent")


@needs_shared
@pytest.mark.parametrize(("name", "ports", "active", "rates", "layers", "errors"), [
    ("ibstat_h100_cx7-MT4129_fw28.41.1000_ndr400_all-active.txt", 9, 9, {400, 200}, {"InfiniBand", "Ethernet"}, 0),
    ("ibstat_a100_MT4126_fw22.35.2302_9ports_1eth-8ib-200_all-active.txt", 9, 9, {200},
     {"InfiniBand", "Ethernet"}, 0),
    ("ibstat_a100-azure-ndv4_cx6-vf-MT4124_fw20.41.1000_hdr200_ibpanic-exit255.txt", 8, 8, {200},
     {"InfiniBand"}, 1),
])
def test_real_captures(name: str, ports: int, active: int, rates: set[int], layers: set[str], errors: int) -> None:
    report = parse_ibstat((IB / name).read_text())
    assert len(report.ports) == ports
    assert sum(p.active for p in report.ports) == active
    assert {p.rate_gbps for p in report.ports} == rates
    assert {p.link_layer for p in report.ports} == layers
    assert len(report.errors) == errors


@needs_shared
def test_ports_down_and_polling() -> None:
    report = parse_ibstat((IB / "ibstat_h100_roce_MT4129-MT4125_fw28.39.1002_some-down-with-polling.txt").read_text())
    down = [p for p in report.ports if not p.active]
    assert down and all(p.state == "Down" for p in down)
    polling = next(p for p in down if p.ca == "mlx5_11")
    assert (polling.physical_state, polling.rate_gbps, polling.link_layer, polling.ca_type, polling.firmware) == (
        "Polling", 40, "Ethernet", "MT4129", "28.39.1002")


def test_not_ibstat() -> None:
    with pytest.raises(ParseError, match="not ibstat output"):
        parse_ibstat("ibpanic: [1] main: stat of IB device 'mlx5_0' failed\n")


def _p(ca: str, port: int = 1) -> IbPort:
    return IbPort(ca, port, None, None, "Active", "LinkUp", 400, "InfiniBand")


def test_nccl_ib_hca_grammar() -> None:
    ports = [_p("mlx5_0"), _p("mlx5_1"), _p("mlx5_10"), _p("mlx5_bond_0"), _p("mlx4_0", 2)]
    names = lambda sel: [p.name for p in select_hcas(ports, sel)]  # noqa: E731
    assert names(None) == names("") == [p.name for p in ports]
    assert names("mlx5") == ["mlx5_0/1", "mlx5_1/1", "mlx5_10/1", "mlx5_bond_0/1"]
    assert names("=mlx5_1") == ["mlx5_1/1"]
    assert names("mlx5_1") == ["mlx5_1/1", "mlx5_10/1"]
    assert names("^mlx5_bond") == ["mlx5_0/1", "mlx5_1/1", "mlx5_10/1", "mlx4_0/2"]
    assert names("^=mlx5_1,mlx5_10") == ["mlx5_0/1", "mlx5_bond_0/1", "mlx4_0/2"]
    assert names("mlx4_0:1") == []
    assert names("mlx4_0:2") == ["mlx4_0/2"]
