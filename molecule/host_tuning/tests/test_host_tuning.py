"""host_tuning: every sysctl in the sysctl.d file, once, with its value; the governor unit and script; memlock
limits; irqbalance stopped; kernel arguments written and "reboot required"; the kubelet registration taints."""

import pytest
import yaml

#: The node whose kubelet the role refuses (side_effect.yml): never converged, so none of this holds there.
REFUSED = "gpufleet-mol-host-tuning-other"


@pytest.fixture(autouse=True)
def _converged_nodes_only(host):
    if host.backend.get_hostname() == REFUSED:
        pytest.skip("the role refuses this node's kubelet (test_kubelet_config_dir.py)")


def test_sysctl_file_holds_every_setting_once(host):
    lines = [ln for ln in host.file("/etc/sysctl.d/90-gpufleet.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert sorted(lines) == sorted([
        "vm.max_map_count=1048576",
        "net.core.rmem_max=67108864",
        "net.core.wmem_max=67108864",
        "kernel.numa_balancing=0",
        "vm.nr_hugepages=1024",
    ])


def test_kubelet_drop_in_registers_the_pool_taints(host):
    f = host.file("/etc/kubernetes/kubelet.conf.d/50-gpufleet-taints.conf")
    assert f.user == "root" and f.mode == 0o644
    assert yaml.safe_load(f.content_string) == {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "registerWithTaints": [
            {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
            {"key": "gpufleet.io/dedicated", "value": "research", "effect": "NoExecute"},
        ],
    }


def test_sysctl_file_turns_numa_balancing_off_and_reserves_hugepages(host):
    settings = dict(ln.split("=", 1) for ln in host.file("/etc/sysctl.d/90-gpufleet.conf").content_string.splitlines()
                    if ln and not ln.startswith("#"))
    assert settings["kernel.numa_balancing"] == "0"
    assert settings["vm.nr_hugepages"] == "1024"


def test_governor_unit_is_enabled_and_runs_the_script(host):
    unit = host.file("/etc/systemd/system/gpufleet-cpu-governor.service")
    assert "ExecStart=/usr/local/sbin/gpufleet-cpu-governor performance" in unit.content_string
    assert "Type=oneshot" in unit.content_string and "RemainAfterExit=yes" in unit.content_string
    assert host.service("gpufleet-cpu-governor.service").is_enabled
    assert host.file("/usr/local/sbin/gpufleet-cpu-governor").mode == 0o755


def test_governor_script_sets_every_cpu_that_has_cpufreq(host):
    # The container's /sys is read-only and has no cpufreq: the script runs against a stand-in tree.
    tree = "/tmp/gpufleet-cpufreq"
    host.run_expect([0], f"rm -rf {tree} && mkdir -p {tree}/cpu0/cpufreq {tree}/cpu1/cpufreq {tree}/cpu2 "
                    f"&& echo powersave > {tree}/cpu0/cpufreq/scaling_governor "
                    f"&& echo ondemand > {tree}/cpu1/cpufreq/scaling_governor")
    host.run_expect([0], f"GPUFLEET_SYSFS_CPU={tree} /usr/local/sbin/gpufleet-cpu-governor performance")
    assert host.file(f"{tree}/cpu0/cpufreq/scaling_governor").content_string == "performance\n"
    assert host.file(f"{tree}/cpu1/cpufreq/scaling_governor").content_string == "performance\n"
    # A read-only governor file fails the unit instead of passing silently.
    host.run_expect([0], f"chmod 0444 {tree}/cpu0/cpufreq/scaling_governor"
                    f" && echo powersave > {tree}/cpu0/cpufreq/scaling_governor")
    result = host.run(f"setpriv --reuid=65534 --regid=65534 --clear-groups env GPUFLEET_SYSFS_CPU={tree} "
                      "/usr/local/sbin/gpufleet-cpu-governor performance")
    assert result.rc != 0


def test_memlock_is_unlimited_for_every_user(host):
    text = host.file("/etc/security/limits.d/90-gpufleet-memlock.conf").content_string
    lines = [ln.split() for ln in text.splitlines() if ln and not ln.startswith("#")]
    assert sorted(lines) == sorted([
        ["*", "soft", "memlock", "unlimited"], ["*", "hard", "memlock", "unlimited"],
        ["root", "soft", "memlock", "unlimited"], ["root", "hard", "memlock", "unlimited"],
    ])


def test_irqbalance_is_stopped_and_disabled(host):
    svc = host.service("irqbalance.service")
    assert not svc.is_running and not svc.is_enabled


def test_kernel_arguments_written_and_reboot_required(host):
    dropin = host.file("/etc/default/grub.d/90-gpufleet.cfg").content_string
    assert 'GRUB_CMDLINE_LINUX="$GRUB_CMDLINE_LINUX iommu=pt pci=disable_acs_redir=0000:3a:00.0;0000:b1:00.0"' in dropin
    # The container runs the host's kernel, which was booted without them: reboot required, never rebooted.
    marker = host.file("/run/gpufleet/host-tuning.reboot-required")
    assert marker.content_string == (
        "missing kernel arguments iommu=pt pci=disable_acs_redir=0000:3a:00.0;0000:b1:00.0\n")
