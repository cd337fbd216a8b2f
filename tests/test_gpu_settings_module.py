"""Logic of the gpu_settings module on real ``nvidia-smi -q -x`` captures (../shared/fixtures/real)."""

from __future__ import annotations

import importlib.util
from types import ModuleType
from typing import Any

import pytest

from gpufleet import REPO_ROOT

XML_DIR = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "nvidia-smi-xml"


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_settings", REPO_ROOT / "ansible" / "library" / "gpu_settings.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


gs = _module()


def _xml(name: str) -> str:
    if not XML_DIR.exists():
        pytest.skip(f"{XML_DIR} not present (shared reference data)")
    return (XML_DIR / name).read_text()


def test_old_dtd_power_readings() -> None:
    driver, gpus = gs.parse_state(_xml("a100-sxm4-40gb_driver510.47.03_mig-enabled_netdata.xml"))
    assert driver == "510.47.03"
    g = gpus[0]
    assert (g["power_limit_w"], g["power_default_w"], g["power_min_w"], g["power_max_w"]) == (
        400.0,
        400.0,
        100.0,
        400.0,
    )
    assert g["persistence_mode"] is False


def test_new_dtd_gpu_power_readings() -> None:
    driver, gpus = gs.parse_state(_xml("a100-sxm4-80gb_driver535.54.03_mig-enabled_telegraf.xml"))
    assert driver == "535.54.03"
    g = gpus[0]
    assert (g["power_limit_w"], g["power_default_w"], g["power_min_w"], g["power_max_w"]) == (
        500.0,
        500.0,
        100.0,
        500.0,
    )
    assert g["index"] == 1  # minor_number, not position


def test_v13_dtd() -> None:
    driver, gpus = gs.parse_state(_xml("rtx-4000-sff-ada_driver595.84_v13dtd_telegraf.xml"))
    assert driver == "595.84"
    assert gpus[0]["persistence_mode"] is True
    assert gpus[0]["power_max_w"] == 70.0


@pytest.mark.parametrize("xml", sorted(p.name for p in XML_DIR.glob("*.xml")) if XML_DIR.exists() else [])
def test_every_real_capture_parses(xml: str) -> None:
    driver, gpus = gs.parse_state(_xml(xml))
    assert driver
    assert gpus and all(g["pci_bus_id"] for g in gpus)


def _gpu(**kw: Any) -> dict[str, Any]:
    base = {
        "index": 3,
        "uuid": "GPU-x",
        "pci_bus_id": "00000000:9A:00.0",
        "name": "H100",
        "persistence_mode": False,
        "power_limit_w": 700.0,
        "power_default_w": 700.0,
        "power_min_w": 200.0,
        "power_max_w": 700.0,
        "clocks_graphics_mhz": None,
        "clocks_memory_mhz": None,
    }
    base.update(kw)
    return base


@pytest.mark.parametrize(
    ("request_", "watts"), [("700", 700.0), ("default", 700.0), ("max", 700.0), ("90%", 630.0), ("450 W", 450.0)]
)
def test_target_power(request_: str, watts: float) -> None:
    assert gs.target_power(request_, _gpu()) == watts


def test_target_power_outside_range_names_gpu_value_and_range() -> None:
    with pytest.raises(ValueError) as e:
        gs.target_power("800", _gpu())
    assert str(e.value) == (
        "power_limit '800' = 800.00 W is outside GPU 3 (00000000:9A:00.0)'s range "
        "200.00-700.00 W: choose a value in that range"
    )


def test_target_power_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="is not watts"):
        gs.target_power("lots", _gpu())


def test_plan_changes_only_what_differs() -> None:
    gpus = [_gpu(index=0, persistence_mode=True, power_limit_w=700.0), _gpu(index=1, power_limit_w=500.0)]
    steps = gs.plan(gpus, {"persistence_mode": True, "power_limit": "700", "gpus": []})
    assert [s["want"] for s in steps] == [{}, {"persistence_mode": True, "power_limit_w": 700.0}]


def test_plan_selects_by_index_and_uuid() -> None:
    gpus = [_gpu(index=0, uuid="GPU-a"), _gpu(index=1, uuid="GPU-b")]
    steps = gs.plan(gpus, {"power_limit": "600", "gpus": ["GPU-b"]})
    assert [s["gpu"]["index"] for s in steps] == [1]
    with pytest.raises(ValueError, match="no GPU with index or UUID '7'"):
        gs.plan(gpus, {"power_limit": "600", "gpus": ["7"]})
