"""GPU catalog: the contract's keys, and its numbers against the real captures in ../shared."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import gpufleet
from gpufleet.catalog import GPUS, get_gpu

SHARED = gpufleet.REPO_ROOT.parent / "shared" / "fixtures" / "real"
needs_shared = pytest.mark.skipif(not SHARED.is_dir(), reason=f"reference data folder {SHARED} is absent")


def test_catalog_has_exactly_the_contract_keys() -> None:
    assert sorted(GPUS) == sorted([
        "a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb", "h100-pcie-80gb", "h200-sxm-141gb",
        "b200-sxm-180gb", "l40s", "l4",
    ])


@pytest.mark.parametrize(("key", "name", "arch", "cc", "nvswitch", "mig", "open_required", "nvlink"), [
    ("a100-sxm4-40gb", "NVIDIA A100-SXM4-40GB", "ampere", "8.0", True, True, False, (3, 600)),
    ("a100-sxm4-80gb", "NVIDIA A100-SXM4-80GB", "ampere", "8.0", True, True, False, (3, 600)),
    ("h100-sxm5-80gb", "NVIDIA H100 80GB HBM3", "hopper", "9.0", True, True, False, (4, 900)),
    ("h100-pcie-80gb", "NVIDIA H100 PCIe", "hopper", "9.0", False, True, False, (4, 600)),
    ("h200-sxm-141gb", "NVIDIA H200", "hopper", "9.0", True, True, False, (4, 900)),
    ("b200-sxm-180gb", "NVIDIA B200", "blackwell", "10.0", True, True, True, (5, 1800)),
    ("l40s", "NVIDIA L40S", "ada", "8.9", False, False, False, (None, 0)),
    ("l4", "NVIDIA L4", "ada", "8.9", False, False, False, (None, 0)),
])
def test_model_facts(key: str, name: str, arch: str, cc: str, nvswitch: bool, mig: bool,
                     open_required: bool, nvlink: tuple[int | None, int]) -> None:
    g = get_gpu(key)
    assert (g.key, g.name, g.architecture, g.compute_capability) == (key, name, arch, cc)
    assert (g.nvswitch, g.mig, g.open_modules_required) == (nvswitch, mig, open_required)
    assert (g.nvlink_generation, g.nvlink_bw_gbs_per_gpu) == nvlink


def test_every_number_has_a_source() -> None:
    for g in GPUS.values():
        for field in ("name", "compute_capability", "min_driver_branch", "min_cuda", "power", "memory",
                      "nvlink", "nvswitch", "mig", "open_modules_required", "gpus_per_node"):
            assert g.sources.get(field), f"{g.key}: no source for {field}"
        assert g.gate("all_reduce", "single-node") is not None, g.key
        for gate in g.gates:
            assert gate.source.startswith(("fixture", "estimate:")), (g.key, gate.source)
        assert g.power_min_w <= g.power_default_w <= g.power_max_w, g.key


def _q_value(text: str, label: str) -> str:
    m = re.search(rf"^\s*{re.escape(label)}\s*:\s*(.+?)\s*$", text, re.M)
    assert m, label
    return m.group(1)


@needs_shared
@pytest.mark.parametrize(("key", "capture", "power", "mib"), [
    ("h100-sxm5-80gb", "nvidia-smi-csv/h100-sxm-80gb-hbm3_x8_driver535.161.08_q.txt", (700, 200, 700), 81559),
    ("h200-sxm-141gb", "nvidia-smi-csv/h200_driver550.90.12_q.txt", (700, 200, 700), 143771),
    ("l40s", "nvidia-smi-csv/l40s_driver550.127.05_q.txt", (350, 100, 350), 46068),
    ("l4", "nvidia-smi-csv/l4_driver550.90.07_q.txt", (72, 40, 72), 23034),
])
def test_catalog_matches_nvidia_smi_q_captures(key: str, capture: str, power: tuple[int, int, int],
                                               mib: int) -> None:
    text = (SHARED / capture).read_text()
    g = get_gpu(key)
    assert _q_value(text, "Product Name") == g.name
    watts = tuple(round(float(_q_value(text, f"{w} Power Limit").split()[0]))
                  for w in ("Default", "Min", "Max"))
    assert watts == power == (g.power_default_w, g.power_min_w, g.power_max_w)
    fb = re.search(r"FB Memory Usage\s*\n\s*Total\s*:\s*(\d+) MiB", text)
    assert fb and int(fb.group(1)) == mib == g.memory_mib_reported


@needs_shared
def test_a100_40gb_matches_xml_capture() -> None:
    xml = (SHARED / "nvidia-smi-xml/a100-sxm4-40gb_driver510.47.03_mig-enabled_netdata.xml").read_text()
    g = get_gpu("a100-sxm4-40gb")
    assert re.search(r"<product_name>(.*?)</product_name>", xml).group(1) == g.name  # type: ignore[union-attr]
    for tag, want in (("default_power_limit", g.power_default_w), ("min_power_limit", g.power_min_w),
                      ("max_power_limit", g.power_max_w)):
        m = re.search(rf"<{tag}>([\d.]+) W</{tag}>", xml)
        assert m and float(m.group(1)) == want


def _busbw_at_or_above(path: Path, min_bytes: int) -> list[float]:
    """Out-of-place busbw of every nccl-tests row with size >= min_bytes (prefixes like '0:' stripped)."""
    out = []
    for line in path.read_text().splitlines():
        line = re.sub(r"^\s*(\[\d+,\d+\]<stdout>:|\d+:)", "", line)
        cols = line.split()
        is_row = len(cols) >= 8 and cols[0].isdigit() and cols[2] in ("float", "half", "bfloat16", "int8")
        if is_row and int(cols[0]) >= min_bytes:
            out.append(float(cols[7]))
    return out


@needs_shared
def test_fixture_backed_gates_pass_on_their_own_captures() -> None:
    checked = 0
    for g in GPUS.values():
        for gate in g.gates:
            m = re.search(r"(nccl-tests/\S+?\.txt)", gate.source)
            if not gate.source.startswith("fixture") or not m:
                continue
            values = _busbw_at_or_above(SHARED / m.group(1), gate.min_bytes)
            assert values, (g.key, m.group(1))
            assert max(values) >= gate.busbw_gbs, (g.key, gate.scope, max(values))
            checked += 1
    assert checked == 6


@pytest.mark.parametrize(("value", "watts"), [("default", 700), ("max", 700), ("min", 200), ("90%", 630),
                                              ("650", 650), (650, 650)])
def test_power_limit_values(value: str | int, watts: int) -> None:
    assert get_gpu("h100-sxm5-80gb").resolve_power_limit(value) == watts


def test_power_limit_errors() -> None:
    g = get_gpu("h100-sxm5-80gb")
    with pytest.raises(ValueError) as e:
        g.resolve_power_limit("800")
    assert str(e.value) == "power limit '800' = 800 W is outside NVIDIA H100 80GB HBM3's range 200-700 W"
    with pytest.raises(ValueError) as e:
        g.resolve_power_limit("lots")
    assert str(e.value) == ("power limit 'lots' is not whole watts (700), a whole percentage of the default "
                            "limit (90%), 'default', 'min' or 'max'")


def test_unknown_gpu() -> None:
    with pytest.raises(KeyError, match="unknown GPU model 'h100'; known: a100-sxm4-40gb, "):
        get_gpu("h100")
