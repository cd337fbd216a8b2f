"""After a restart the simulator has forgotten its GPU state; the boot unit put it back, per GPU."""

import pytest
from nodestate import query_gpus

VERSION = "570.172.08"


def test_container_really_restarted(host):
    # /run is a tmpfs: the mark written before the restart is gone, and so is the simulator's old state.
    assert not host.file("/run/gpufleet-before-restart").exists


def test_boot_unit_ran_in_this_boot(host):
    show = host.run("systemctl show -p ActiveState -p Result -p ExecMainStatus gpufleet-gpu-settings.service").stdout
    assert "ActiveState=active" in show
    assert "Result=success" in show
    assert "ExecMainStatus=0" in show


@pytest.mark.parametrize("index", range(8))
def test_power_limit_restored_per_gpu(host, index):
    g = query_gpus(host, "index", "power.limit", "power.default_limit", "persistence_mode")[index]
    assert g["index"] == str(index)
    assert float(g["power.default_limit"]) == 700.0
    assert float(g["power.limit"]) == 630.0, g
    assert g["persistence_mode"] == "Enabled"


def test_driver_loaded_and_services_back(host):
    assert {g["driver_version"] for g in query_gpus(host, "driver_version")} == {VERSION}
    assert host.service("nvidia-persistenced").is_running
    assert host.service("nvidia-fabricmanager").is_running
    assert not host.file("/run/gpufleet/nvidia-driver.reboot-required").exists
