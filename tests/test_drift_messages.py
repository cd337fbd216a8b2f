"""One human line per pending change, per module family (synthetic results in the shapes the modules return)."""

from __future__ import annotations

from typing import Any

from gpufleet.ansible_run import ItemResult, TaskResult
from gpufleet.drift.dpkg import PackageState
from gpufleet.drift.messages import gpu_list, messages


def _task(action: str, res: dict[str, Any], **kw: Any) -> TaskResult:
    return TaskResult(host="gpu-0", play="p", role=kw.pop("role", "r"), task=kw.pop("task", "Do it"),
                      action=action, status="changed", changed=True, res=res, **kw)


def test_gpu_index_lists() -> None:
    assert gpu_list([3]) == "GPU3"
    assert gpu_list([2, 0]) == "GPU0,2"
    assert gpu_list(range(8)) == "GPU0-7"


def test_apt_lines_name_installed_and_locked_versions() -> None:
    stdout = ("Inst nvidia-utils-570 [570.133.20-0ubuntu1] (570.172.08-0ubuntu1 NVIDIA CUDA:localhost [amd64]) []\n"
              "Inst libnvidia-compute-570 [570.133.20-0ubuntu1] (570.172.08-0ubuntu1 NVIDIA CUDA:localhost [amd64])\n"
              "Inst libnccl2 (2.26.2-1+cuda12.8 NVIDIA CUDA:localhost [amd64])\n"
              "Conf nvidia-utils-570 (570.172.08-0ubuntu1 NVIDIA CUDA:localhost [amd64])\n")
    state = {"nvidia-utils-570": PackageState("nvidia-utils-570", "570.133.20-0ubuntu1", "install", "installed"),
             "libnvidia-compute-570": PackageState("libnvidia-compute-570", "570.133.20-0ubuntu1", "hold",
                                                   "installed")}
    kind, lines, _ = messages(_task("ansible.builtin.apt", {"stdout": stdout}), state=state)
    assert kind == "package"
    # Same versions but another hold state: separate lines, each with its hold state.
    assert lines == [
        "nvidia-utils-570: 570.133.20-0ubuntu1 installed, 570.172.08-0ubuntu1 locked; not held",
        "libnvidia-compute-570: 570.133.20-0ubuntu1 installed, 570.172.08-0ubuntu1 locked; held",
        "libnccl2: not installed, 2.26.2-1+cuda12.8 locked; hold state not read",
    ]


def test_apt_without_inst_lines_falls_back_to_apts_summary() -> None:
    task = _task("ansible.builtin.apt", {"stdout": "x" * 10},
                 diff=[{"prepared": "The following packages will be upgraded:\n  a\n1 upgraded, 0 newly installed"}])
    assert messages(task)[1] == ["1 upgraded, 0 newly installed"]


def test_gpu_settings_per_gpu_before_after() -> None:
    gpus = [{"index": i, "before": {"persistence_mode": False, "power_limit_w": 500.0 if i == 3 else 700.0},
             "after": {"persistence_mode": True, "power_limit_w": 700.0},
             "changes": ["persistence_mode", "power_limit_w"] if i == 3 else ["persistence_mode"]} for i in range(8)]
    kind, lines, _ = messages(_task("gpu_settings", {"gpus": gpus}))
    assert kind == "gpu_setting"
    assert lines == ["GPU0-7 persistence mode off, expected on", "GPU3 power limit 500 W, expected 700 W"]


def test_file_diff_is_kept() -> None:
    diff = [{"before": "NCCL_DEBUG=INFO\n", "after": "NCCL_DEBUG=WARN\n",
             "before_header": "/etc/nccl.conf", "after_header": "/tmp/src"}]
    kind, lines, text = messages(_task("ansible.builtin.template", {"dest": "/etc/nccl.conf"}, diff=diff))
    assert (kind, lines) == ("file", ["/etc/nccl.conf: NCCL_DEBUG INFO -> WARN"])
    assert text.startswith("--- /etc/nccl.conf (on the host)\n+++ /etc/nccl.conf (desired)\n")
    assert "-NCCL_DEBUG=INFO\n+NCCL_DEBUG=WARN\n" in text


def test_changed_nccl_conf_lines_are_named() -> None:
    # A hand edit on the host: the rail list lost GPU1's HCA, a debug line was added; comments do not count.
    desired = "# The HCA nearest to each GPU\nNCCL_IB_HCA==mlx5_0,mlx5_3\nNCCL_SOCKET_IFNAME==eth1\n"
    edited = "# edited\nNCCL_IB_HCA==mlx5_0\nNCCL_SOCKET_IFNAME==eth1\nNCCL_DEBUG=INFO\n"
    res = {"files": [{"dest": "/etc/nccl.conf", "state": "updated", "changed": True}]}
    diff = [{"before_header": "/etc/nccl.conf", "after_header": "/etc/nccl.conf", "before": edited, "after": desired}]
    _, lines, _ = messages(_task("managed_files", res, diff=diff))
    assert lines == ["/etc/nccl.conf: NCCL_IB_HCA =mlx5_0 -> =mlx5_0,mlx5_3; NCCL_DEBUG INFO -> (unset)"]
    # Not NAME=VALUE lines (gres.conf): the file differs, the diff says how.
    gres = [{"before_header": "/etc/slurm/gres.conf", "after_header": "/etc/slurm/gres.conf",
             "before": "NodeName=n Name=gpu File=/dev/nvidia0\n", "after": "NodeName=n Name=gpu File=/dev/nvidia1\n"}]
    res = {"files": [{"dest": "/etc/slurm/gres.conf", "state": "updated", "changed": True}]}
    assert messages(_task("managed_files", res, diff=gres))[1] == ["/etc/slurm/gres.conf differs"]


def test_service_state_from_the_units_status() -> None:
    res = {"name": "nvidia-persistenced", "enabled": True, "state": "started",
           "status": {"UnitFileState": "enabled", "ActiveState": "inactive"}}
    assert messages(_task("ansible.builtin.systemd_service", res))[1] == [
        "nvidia-persistenced: enabled, inactive; expected enabled, started"]


def test_holds_and_sysctls_name_their_items() -> None:
    hold = _task("ansible.builtin.dpkg_selections", {}, items=[
        ItemResult("nvidia-utils-570", "changed", True), ItemResult("libnvidia-cfg1-570", "ok", False)])
    state = {"nvidia-utils-570": PackageState("nvidia-utils-570", "570.172.08-0ubuntu1", "install", "installed")}
    assert messages(hold, state=state)[1] == [
        "nvidia-utils-570: 570.172.08-0ubuntu1 installed, as locked; not held, expected held"]
    # The module's own read names the selections and versions (no other read needed).
    res = {"changed_packages": ["nvidia-utils-570", "libnccl2"],
           "before": {"nvidia-utils-570": "install", "libnccl2": "install", "x": "hold"},
           "installed": {"nvidia-utils-570": "570.172.08-0ubuntu1", "libnccl2": "2.26.2-1+cuda12.8",
                         "x": "1.0"}}
    one_call = _task("dpkg_hold", res)
    from gpufleet.drift.dpkg import states_of
    own = {s.name: s for s in states_of("dpkg_hold", res)}
    assert messages(one_call, state=own)[:2] == ("hold", [
        "nvidia-utils-570: 570.172.08-0ubuntu1 installed, as locked; not held, expected held",
        "libnccl2: 2.26.2-1+cuda12.8 installed, as locked; not held, expected held"])
    # Releasing a hold before a move (selection install) is said as such, not as "not held".
    release = _task("dpkg_hold", {"changed_packages": ["libnccl2"], "before": {"libnccl2": "hold"},
                                  "installed": {"libnccl2": "2.26.2-1+cuda12.8"}},
                    diff=[{"before": "libnccl2 hold\n", "after": "libnccl2 install\n",
                           "before_header": "dpkg selections", "after_header": "dpkg selections"}])
    assert messages(release)[1] == ["libnccl2: held at 2.26.2-1+cuda12.8, released to move to the locked version"]
    sysctl = _task("ansible.posix.sysctl", {}, items=[ItemResult("vm.max_map_count=1048576", "changed", True)])
    assert messages(sysctl)[1] == ["sysctl vm.max_map_count differs, expected 1048576"]
    # host_tuning's one-call module: the settings that differ (file or running value), as the loop said them.
    settings = [{"name": "vm.max_map_count", "value": "1048576", "changed": True, "file": True, "running": False},
                {"name": "kernel.numa_balancing", "value": "0", "changed": False, "file": False, "running": False}]
    one = _task("sysctl_settings", {"settings": settings, "file_changed": True})
    assert messages(one)[:2] == ("sysctl", ["sysctl vm.max_map_count differs, expected 1048576"])
    foreign = _task("sysctl_settings", {"settings": settings[1:], "file_changed": True}, task="Set the kernel settings")
    assert messages(foreign)[1] == ["sysctl file: Set the kernel settings: lines other than the settings"]


def test_unknown_tasks_fall_back_to_name_and_message() -> None:
    task = _task("ansible.builtin.debug", {"msg": "would install x"}, task="Report")
    task.msg = "would install x"
    assert messages(task) == ("other", ["Report: would install x"], "")


def test_managed_files_name_each_file_and_keep_the_diffs() -> None:
    res = {"files": [
        {"dest": "/etc/nccl.conf", "state": "updated", "changed": True},
        {"dest": "/etc/apt/preferences.d/gpufleet-nccl.pref", "state": "unchanged", "changed": False},
        {"dest": "/etc/slurm/gres.conf", "state": "created", "changed": True},
        {"dest": "/usr/local/sbin/x", "state": "attributes", "changed": True,
         "before": {"mode": "0644", "uid": 0, "gid": 0}, "after": {"mode": "0755", "uid": 0, "gid": 0}},
    ]}
    diff = [{"before_header": "/etc/nccl.conf", "after_header": "/etc/nccl.conf",
             "before": "NCCL_DEBUG=INFO\n", "after": "NCCL_DEBUG=WARN\n"}]
    kind, lines, text = messages(_task("managed_files", res, diff=diff))
    assert kind == "file"
    # nccl.conf is NAME=VALUE lines: the changed setting is named, with both values.
    assert lines == ["/etc/nccl.conf: NCCL_DEBUG INFO -> WARN", "/etc/slurm/gres.conf missing",
                     "/usr/local/sbin/x: mode 0644 -> 0755"]
    assert "-NCCL_DEBUG=INFO\n+NCCL_DEBUG=WARN\n" in text


def test_an_index_refresh_alone_does_not_claim_that_packages_differ() -> None:
    raw = {"changed": True, "cache_updated": False,
           "invocation": {"module_args": {"update_cache": True, "name": None, "upgrade": "no"}}}
    task = _task("ansible.builtin.apt", {"changed": True}, task="Refresh the package index when the repository changed")
    assert messages(task, raw)[1] == ["Refresh the package index when the repository changed: the package index "
                                      "would be refreshed (no package named)"]


def test_kubelet_config_dir_drop_in_reads_as_a_missing_file() -> None:
    """Issue 30 point 5 (a): drift names the kubelet unit drop-in host_tuning would write (kind file, its diff)."""
    path = "/etc/systemd/system/kubelet.service.d/90-gpufleet-config-dir.conf"
    after = '[Service]\nEnvironment="KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml --config-dir=/d"\n'
    diff = [{"before_header": path, "after_header": path, "before": "", "after": after}]
    kind, lines, text = messages(_task("kubelet_config_dir", {"kubelet": "dropin", "config_dir": "/d"}, diff=diff,
                                       task="Make the kubelet read the drop-in directory"))
    assert (kind, lines) == ("file", [f"{path} missing"]) and "+[Service]" in text
