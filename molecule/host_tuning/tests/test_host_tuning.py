"""host_tuning: every sysctl in the sysctl.d file, once, with its value."""


def test_sysctl_file_holds_every_setting_once(host):
    lines = [ln for ln in host.file("/etc/sysctl.d/90-gpufleet.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert sorted(lines) == sorted([
        "vm.max_map_count=1048576",
        "net.core.rmem_max=67108864",
        "net.core.wmem_max=67108864",
    ])
