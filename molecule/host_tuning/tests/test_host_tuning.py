"""host_tuning: every sysctl in the sysctl.d file, once, with its value; the kubelet registration taints."""

import yaml


def test_sysctl_file_holds_every_setting_once(host):
    lines = [ln for ln in host.file("/etc/sysctl.d/90-gpufleet.conf").content_string.splitlines()
             if ln and not ln.startswith("#")]
    assert sorted(lines) == sorted([
        "vm.max_map_count=1048576",
        "net.core.rmem_max=67108864",
        "net.core.wmem_max=67108864",
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
