"""Issue 30 point 5 (a) on real systemd: the registerWithTaints drop-in is read only when the kubelet runs with
--config-dir. On the kubeadm node (prepare.yml: the packages' unit and kubeadm's 10-kubeadm.conf, a stand-in binary
that records its argv) the flag reaches the kubelet's argv once systemd restarts it, and the directory it names
holds the taints; the node without a kubelet gets no drop-in; the node of another layout was refused
(side_effect.yml) and left as found."""

import pytest
import yaml

KUBEADM = "gpufleet-mol-host-tuning-kubeadm"
NO_KUBELET = "gpufleet-mol-host-tuning-0"
REFUSED = "gpufleet-mol-host-tuning-other"
CONFIG_DIR = "/etc/kubernetes/kubelet.conf.d"
DROPIN = "/etc/systemd/system/kubelet.service.d/90-gpufleet-config-dir.conf"
STARTS = "/run/kubelet-standin/starts"
#: What kubeadm's drop-in and kubeadm-flags.env make the kubelet run with (molecule/host_tuning/kubelet/).
KUBEADM_ARGV = ["/usr/bin/kubelet", "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
                "--kubeconfig=/etc/kubernetes/kubelet.conf", "--config=/var/lib/kubelet/config.yaml",
                "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
                "--pod-infra-container-image=registry.k8s.io/pause:3.10"]


def only(host, name):
    if host.backend.get_hostname() != name:
        pytest.skip(f"{name} only")


def starts(host):
    return [line.split("\t") for line in host.file(STARTS).content_string.splitlines()]


def test_kubeadm_config_args_extended_by_a_dropin_systemd_has_loaded(host):
    only(host, KUBEADM)
    f = host.file(DROPIN)
    assert f.user == "root" and f.mode == 0o644
    assert ('Environment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml '
            f'--config-dir={CONFIG_DIR}"') in f.content_string.splitlines()
    # The role reloaded systemd (its handler, also after the break that deleted the drop-in): nothing pending,
    # and the environment systemd would start the kubelet with has the flag.
    show = host.check_output("systemctl show kubelet.service --property=NeedDaemonReload --property=Environment")
    assert "NeedDaemonReload=no" in show.splitlines()
    assert f"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml --config-dir={CONFIG_DIR}" in show


def test_restarted_kubelet_runs_with_config_dir_and_reads_the_taints_there(host):
    only(host, KUBEADM)
    # The role never restarts the kubelet (registerWithTaints counts at registration; kubeadm's kubelet restarts
    # until it joins): the one start so far is prepare's, without the flag.
    assert starts(host) == [KUBEADM_ARGV]
    host.run_expect([0], "systemctl restart kubelet.service")
    host.run_expect([0], f"for i in $(seq 50); do [ $(wc -l < {STARTS}) -ge 2 ] && exit 0; sleep 0.2; done; exit 1")
    argv = starts(host)[-1]
    # kubeadm's arguments kept, in systemd's expansion order, and --config-dir right after --config.
    assert argv == [*KUBEADM_ARGV[:4], f"--config-dir={CONFIG_DIR}", *KUBEADM_ARGV[4:]]
    named = next(a.split("=", 1)[1] for a in argv if a.startswith("--config-dir="))
    taints = yaml.safe_load(host.file(f"{named}/50-gpufleet-taints.conf").content_string)
    assert taints["kind"] == "KubeletConfiguration"
    assert taints["registerWithTaints"][0] == {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert host.service("kubelet.service").is_running


def test_no_kubelet_unit_no_dropin(host):
    only(host, NO_KUBELET)
    assert not host.file(DROPIN).exists
    assert not host.file("/etc/systemd/system/kubelet.service.d").exists


def test_refused_kubelet_left_as_found(host):
    only(host, REFUSED)
    assert not host.file(DROPIN).exists
    assert not host.file(f"{CONFIG_DIR}/50-gpufleet-taints.conf").exists
    config_flags = [a for a in starts(host)[-1] if a.startswith("--config")]
    assert config_flags == ["--config=/var/lib/kubelet/kubelet-config.yaml"]
