"""parse_smi_xml on every real nvidia-smi -q -x capture in ../shared, plus edge cases."""

from __future__ import annotations

import pytest

from gpufleet import REPO_ROOT
from gpufleet.parsers import ParseError
from gpufleet.parsers.smi_xml import parse_smi_xml

XML_DIR = REPO_ROOT.parent / "shared" / "fixtures" / "real" / "nvidia-smi-xml"
FILES = sorted(p.name for p in XML_DIR.glob("*.xml")) if XML_DIR.is_dir() else []
needs_shared = pytest.mark.skipif(not XML_DIR.is_dir(), reason=f"reference data {XML_DIR} is absent")

# file -> (driver, cuda, GPU count, GPU 0 fields that must match exactly)
EXPECTED: dict[str, tuple[str, str | None, int, dict[str, object]]] = {
    "a100-sxm4-40gb_driver510.47.03_mig-enabled_netdata.xml": ("510.47.03", "11.6", 1, {
        "name": "NVIDIA A100-SXM4-40GB", "mig_mode": "Enabled", "power_limit_w": 400.0,
        "ecc_mode": "Enabled", "ecc_dbe_volatile": None, "ecc_dbe_aggregate": 0, "remapped_rows": None,
        "persistence_mode": False, "pcie_gen_max": 4, "utilization_gpu_pct": None}),
    "a100-sxm4-80gb_driver535.54.03_mig-enabled_telegraf.xml": ("535.54.03", "12.2", 1, {
        "uuid": "GPU-513536b6-7d19-9063-b049-1e69664bb298", "serial": "1650522003820",
        "vbios": "92.00.36.00.02", "power_limit_w": 500.0, "power_limit_enforced_w": 500.0, "power_min_w": 100.0,
        "power_draw_w": 67.03, "app_clocks_graphics_mhz": 1275, "app_clocks_memory_mhz": 1593,
        "ecc_dbe_volatile": 0, "mig_mode": "Enabled", "temperature_c": 27.0, "throttle_reasons": []}),
    "a10g_driver515.105.01_telegraf.xml": ("515.105.01", "11.7", 1, {
        "name": "NVIDIA A10G", "pci_bus_id": "00000000:00:1E.0", "power_limit_w": 300.0,
        "remapped_rows": {"pending": False, "failure": False}, "pcie_gen_current": 1, "pcie_gen_max": 4,
        "pcie_width_current": 8, "pcie_width_max": 16, "throttle_reasons": ["gpu_idle"], "mig_mode": None}),
    "gtx-1070-ti_driver470.82.00_v11dtd_vertex.xml": ("470.82.00", "11.4", 1, {
        "serial": None, "ecc_mode": None, "ecc_dbe_volatile": None, "power_max_w": 252.0,
        "utilization_gpu_pct": 19.0}),
    "quadro-p2000_driver525.125.06_telegraf.xml": ("525.125.06", "12.0", 1, {
        "name": "Quadro P2000", "persistence_mode": True, "power_limit_w": 75.0, "power_draw_w": 4.61}),
    "rtx-3060_driver570.124.04_telegraf.xml": ("570.124.04", "12.8", 1, {
        "power_limit_w": 170.0, "power_max_w": 190.0, "power_draw_w": 11.6, "temperature_c": 42.0}),
    "rtx-4000-sff-ada_driver595.84_v13dtd_telegraf.xml": ("595.84", "13.2", 1, {
        "serial": "REDACTED", "ecc_mode": "Disabled", "ecc_dbe_volatile": None, "power_limit_w": 70.0,
        "power_draw_w": 8.81, "remapped_rows": {"pending": False, "failure": False}}),
    "rtx-a5000-laptop_driver575.57.08_v12dtd_platformInfo-fabric_llamaland.xml": ("575.57.08", "12.9", 1, {
        "name": "NVIDIA RTX A5000 Laptop GPU", "power_min_w": 1.0, "power_draw_w": 30.63,
        "pcie_width_current": 8, "temperature_c": 61.0}),
    "tesla-k80_x4_driver430.26_cuda-not-found_pai.xml": ("430.26", None, 4, {
        "name": "Tesla K80", "power_limit_w": 149.0, "power_limit_enforced_w": 149.0, "power_max_w": 175.0,
        "app_clocks_graphics_mhz": 562, "app_clocks_memory_mhz": 2505, "ecc_dbe_volatile": 0,
        "ecc_dbe_aggregate": 7, "retired_pages_pending": False, "remapped_rows": None, "mig_mode": None,
        "throttle_reasons": ["applications_clocks_setting"], "utilization_gpu_pct": 99.0}),
    "tesla-t4_driver515.105.01_telegraf.xml": ("515.105.01", "11.7", 1, {
        "name": "Tesla T4", "power_limit_w": 70.0, "power_min_w": 60.0, "retired_pages_pending": False,
        "remapped_rows": None, "pcie_gen_max": 3}),
}

KEYS = ["index", "name", "uuid", "pci_bus_id", "serial", "vbios", "persistence_mode", "mig_mode",
        "power_limit_w", "power_limit_enforced_w", "power_default_w", "power_min_w", "power_max_w", "power_draw_w",
        "ecc_mode",
        "ecc_dbe_volatile", "ecc_dbe_aggregate", "remapped_rows", "retired_pages_pending",
        "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max", "temperature_c",
        "throttle_reasons", "utilization_gpu_pct", "app_clocks_graphics_mhz", "app_clocks_memory_mhz"]


@needs_shared
def test_every_fixture_has_expectations() -> None:
    assert FILES, "no XML fixtures found"
    assert set(FILES) == set(EXPECTED), "add spot-check values for new fixtures"


@needs_shared
@pytest.mark.parametrize("name", FILES)
def test_real_capture(name: str) -> None:
    driver, cuda, count, gpu0 = EXPECTED[name]
    report = parse_smi_xml((XML_DIR / name).read_text()).to_dict()
    assert list(report) == ["driver_version", "cuda_version", "gpus"]
    assert report["driver_version"] == driver
    assert report["cuda_version"] == cuda
    assert len(report["gpus"]) == count
    for i, gpu in enumerate(report["gpus"]):
        assert list(gpu) == KEYS
        assert gpu["index"] == i
        assert gpu["uuid"].startswith("GPU-")
    for key, value in gpu0.items():
        assert report["gpus"][0][key] == value, key


@needs_shared
def test_k80_per_gpu_values() -> None:
    gpus = parse_smi_xml((XML_DIR / "tesla-k80_x4_driver430.26_cuda-not-found_pai.xml").read_text()).gpus
    assert [g.ecc_dbe_aggregate for g in gpus] == [7, 4, 0, 0]
    assert [g.pcie_gen_current for g in gpus] == [3, 3, 1, 1]
    assert [g.pci_bus_id for g in gpus] == ["00001580:00:00.0", "00002DF7:00:00.0", "00004968:00:00.0",
                                            "0000F8D6:00:00.0"]


def _doc(gpu_body: str) -> str:
    return (
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
        "<nvidia_smi_log><driver_version>570.172.08</driver_version><cuda_version>12.8</cuda_version>"
        f'<gpu id="00000000:18:00.0">{gpu_body}</gpu></nvidia_smi_log>'
    )


def test_failed_remap_and_pending_retirement_and_active_slowdown() -> None:
    report = parse_smi_xml(_doc(
        "<retired_pages><pending_blacklist>No</pending_blacklist><pending_retirement>Yes</pending_retirement>"
        "</retired_pages><remapped_rows><remapped_row_pending>Yes</remapped_row_pending>"
        "<remapped_row_failure>Yes</remapped_row_failure></remapped_rows>"
        "<clocks_event_reasons><clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>"
        "<clocks_event_reason_sw_power_cap>Active</clocks_event_reason_sw_power_cap>"
        "<clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle></clocks_event_reasons>"
        "<ecc_errors><volatile><sram_uncorrectable_parity>1</sram_uncorrectable_parity>"
        "<sram_uncorrectable_secded>2</sram_uncorrectable_secded><dram_uncorrectable>4</dram_uncorrectable>"
        "</volatile></ecc_errors>"
    ))
    gpu = report.gpus[0]
    assert gpu.pci_bus_id == "00000000:18:00.0"
    assert gpu.retired_pages_pending is True
    assert report.to_dict()["gpus"][0]["remapped_rows"] == {"pending": True, "failure": True}
    assert gpu.throttle_reasons == ["hw_slowdown", "sw_power_cap"]
    assert gpu.ecc_dbe_volatile == 7
    # Nothing else is in the document, so nothing else is invented.
    assert gpu.name is None and gpu.power_limit_w is None and gpu.temperature_c is None
    assert gpu.throttle_reasons is not None and gpu.ecc_dbe_aggregate is None


@pytest.mark.parametrize(("readings", "software", "enforced"), [
    # v10/v11: power_limit is NVML's management limit (what -pl sets), enforced_power_limit the one in force.
    ("<power_readings><power_draw>300.50 W</power_draw><power_limit>400.00 W</power_limit>"
     "<enforced_power_limit>350.00 W</enforced_power_limit></power_readings>", 400.0, 350.0),
    # v12+: requested_power_limit is what -pl sets; current_power_limit the one in force, lower here because
    # the platform caps the board.
    ("<gpu_power_readings><power_draw>300.50 W</power_draw><current_power_limit>350.00 W</current_power_limit>"
     "<requested_power_limit>400.00 W</requested_power_limit></gpu_power_readings>", 400.0, 350.0),
    # Never one for the other: an absent software limit stays None.
    ("<gpu_power_readings><power_draw>300.50 W</power_draw><current_power_limit>350.00 W</current_power_limit>"
     "<requested_power_limit>N/A</requested_power_limit></gpu_power_readings>", None, 350.0),
])
def test_software_and_enforced_power_limits_are_separate(readings: str, software: float | None,
                                                         enforced: float) -> None:
    gpu = parse_smi_xml(_doc(readings)).gpus[0]
    assert (gpu.power_limit_w, gpu.power_limit_enforced_w, gpu.power_draw_w) == (software, enforced, 300.5)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("<nvidia_smi_log><gpu>", "not well-formed XML"),
        ("<html></html>", "root element is <html>, expected <nvidia_smi_log>"),
        ('<!DOCTYPE x [<!ENTITY a "aaaa">]><nvidia_smi_log>&a;</nvidia_smi_log>',
         "must not declare entities"),
    ],
)
def test_rejects_what_is_not_smi_xml(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_smi_xml(text)
