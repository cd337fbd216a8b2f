"""gpu_settings: per-GPU power limit at 90% of default, persistence on, boot unit and its record in place."""

from nodestate import query_gpus


def test_power_limit_is_90_percent_of_default_on_every_gpu(host):
    gpus = query_gpus(host, "index", "power.limit", "power.default_limit")
    assert len(gpus) == 8
    for g in gpus:
        assert float(g["power.default_limit"]) == 700.0
        assert float(g["power.limit"]) == 630.0, g


def test_persistence_on(host):
    assert {g["persistence_mode"] for g in query_gpus(host, "persistence_mode")} == {"Enabled"}


def test_boot_unit_enabled_after_persistenced(host):
    unit = host.file("/etc/systemd/system/gpufleet-gpu-settings.service").content_string
    assert "After=nvidia-persistenced.service" in unit
    assert host.service("gpufleet-gpu-settings").is_enabled


def test_record_lists_every_gpu_with_resolved_watts(host):
    lines = [ln.split() for ln in host.file("/etc/gpufleet/gpu-settings.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert [ln[0] for ln in lines] == [str(i) for i in range(8)]
    assert {ln[2] for ln in lines} == {"1"}
    assert {ln[3] for ln in lines} == {"630.00"}


def test_boot_script_restores_a_lost_limit(host):
    # What a reboot does to real GPUs: limits back to default. The boot script puts them back.
    assert host.run("nvidia-smi -i 2 -pl 700").rc == 0
    assert float(query_gpus(host, "power.limit")[2]["power.limit"]) == 700.0
    r = host.run("/usr/local/sbin/gpufleet-gpu-settings")
    assert r.rc == 0, r.stdout + r.stderr
    assert float(query_gpus(host, "power.limit")[2]["power.limit"]) == 630.0
