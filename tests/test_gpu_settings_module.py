"""Logic of the gpu_settings module on real ``nvidia-smi -q -x`` captures (../shared/fixtures/real).

The module reads nvidia-smi through gpufleet's one XML parser and power limits through the one grammar
(``ansible.module_utils.gpufleet_*``, links into gpufleet/module_utils/); tests/test_power_limit_grammar.py runs
it through Ansible, which ships those module_utils with it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from types import ModuleType
from typing import Any

import pytest

import ansible.module_utils
from gpufleet import REPO_ROOT
from gpufleet.module_utils.smi_xml import GpuInfo

XML_DIR = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "nvidia-smi-xml"


def _module() -> ModuleType:
    # As ansible.cfg's module_utils path does for a real run: ansible.module_utils.gpufleet_* resolve to our files.
    utils = str(REPO_ROOT / "ansible" / "module_utils")
    if utils not in ansible.module_utils.__path__:
        ansible.module_utils.__path__.append(utils)
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


def _parse(xml: str) -> tuple[str | None, list[GpuInfo]]:
    report = gs.parse_smi_xml(xml)
    return report.driver_version, report.gpus


def test_old_dtd_power_readings() -> None:
    driver, gpus = _parse(_xml("a100-sxm4-40gb_driver510.47.03_mig-enabled_netdata.xml"))
    assert driver == "510.47.03"
    g = gpus[0]
    assert (g.power_limit_w, g.power_default_w, g.power_min_w, g.power_max_w) == (400.0, 400.0, 100.0, 400.0)
    assert g.persistence_mode is False


def test_new_dtd_gpu_power_readings() -> None:
    driver, gpus = _parse(_xml("a100-sxm4-80gb_driver535.54.03_mig-enabled_telegraf.xml"))
    assert driver == "535.54.03"
    g = gpus[0]
    assert (g.power_limit_w, g.power_default_w, g.power_min_w, g.power_max_w) == (500.0, 500.0, 100.0, 500.0)
    # nvidia-smi's own index (document order), which -i takes; this board's minor number is 1.
    assert g.index == 0


def test_v13_dtd() -> None:
    driver, gpus = _parse(_xml("rtx-4000-sff-ada_driver595.84_v13dtd_telegraf.xml"))
    assert driver == "595.84"
    assert gpus[0].persistence_mode is True
    assert gpus[0].power_max_w == 70.0


@pytest.mark.parametrize("xml", sorted(p.name for p in XML_DIR.glob("*.xml")) if XML_DIR.exists() else [])
def test_every_real_capture_parses(xml: str) -> None:
    driver, gpus = _parse(_xml(xml))
    assert driver
    assert gpus and all(g.pci_bus_id for g in gpus)


_BASE = GpuInfo(
    index=3, name="H100", uuid="GPU-x", pci_bus_id="00000000:9A:00.0", serial=None, vbios=None,
    persistence_mode=False, mig_mode=None, power_limit_w=700.0, power_limit_enforced_w=700.0,
    power_default_w=700.0, power_min_w=200.0, power_max_w=700.0, power_draw_w=None, ecc_mode=None,
    ecc_dbe_volatile=None, ecc_dbe_aggregate=None, remapped_rows=None, retired_pages_pending=None,
    pcie_gen_current=None, pcie_gen_max=None, pcie_width_current=None, pcie_width_max=None, temperature_c=None,
    throttle_reasons=None, utilization_gpu_pct=None, app_clocks_graphics_mhz=None, app_clocks_memory_mhz=None)


def _gpu(**kw: Any) -> GpuInfo:
    return dataclasses.replace(_BASE, **kw)


@pytest.mark.parametrize(
    ("request_", "watts"), [("700", 700.0), ("default", 700.0), ("max", 700.0), ("min", 200.0), ("90%", 630.0)]
)
def test_target_power(request_: str, watts: float) -> None:
    assert gs.target_power(request_, _gpu()) == watts


def test_target_power_outside_range_names_gpu_value_and_range() -> None:
    with pytest.raises(ValueError) as e:
        gs.target_power("800", _gpu())
    assert str(e.value) == "power limit '800' = 800 W is outside GPU 3 (00000000:9A:00.0)'s range 200-700 W"


@pytest.mark.parametrize("request_", ["lots", "450 W", "650.5", "92.5%", "MAX"])
def test_target_power_rejects_what_the_grammar_refuses(request_: str) -> None:
    with pytest.raises(ValueError, match=r"is not whole watts \(700\)"):
        gs.target_power(request_, _gpu())


def test_plan_compares_the_software_limit_not_the_enforced_one() -> None:
    # A platform cap holds the enforced limit at 500 W; what -pl set (700 W) is as wanted: nothing to change.
    assert gs.plan([_gpu(power_limit_enforced_w=500.0)], {"power_limit": "700"})[0]["want"] == {}


def test_plan_changes_only_what_differs() -> None:
    gpus = [_gpu(index=0, persistence_mode=True, power_limit_w=700.0), _gpu(index=1, power_limit_w=500.0)]
    steps = gs.plan(gpus, {"persistence_mode": True, "power_limit": "700", "gpus": []})
    assert [s["want"] for s in steps] == [{}, {"persistence_mode": True, "power_limit_w": 700.0}]


def test_plan_selects_by_index_and_uuid() -> None:
    gpus = [_gpu(index=0, uuid="GPU-a"), _gpu(index=1, uuid="GPU-b")]
    steps = gs.plan(gpus, {"power_limit": "600", "gpus": ["GPU-b"]})
    assert [s["gpu"].index for s in steps] == [1]
    with pytest.raises(ValueError, match="no GPU with index or UUID '7'"):
        gs.plan(gpus, {"power_limit": "600", "gpus": ["7"]})
