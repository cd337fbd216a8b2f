"""roles/host_footprint: the module's digest on a scratch tree, probe and record, the action plugin's inputs and reuse,
and the coverage of its path list over every absolute path the roles name."""

from __future__ import annotations

import fnmatch
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpufleet import REPO_ROOT

MODULE = REPO_ROOT / "ansible" / "library" / "host_footprint.py"
PLUGIN = REPO_ROOT / "roles" / "host_footprint" / "action_plugins" / "host_footprint.py"
DEFAULTS = yaml.safe_load((REPO_ROOT / "roles" / "host_footprint" / "defaults" / "main.yml").read_text())
RUN_MODULE = (
    "import runpy, sys, ansible.module_utils as m\n"
    f"m.__path__.append({str(REPO_ROOT / 'ansible' / 'module_utils')!r})\n"
    "path = sys.argv[1]; sys.argv = [path]; runpy.run_path(path, run_name='__main__')\n"
)


def run(root: Path, state: str = "probe", scopes: list[str] | None = None, inputs: str = "i1",
        check: bool = False, **reads: Any) -> dict[str, Any]:
    args = {"state": state, "scopes": scopes or ["role_a", "site"], "inputs": inputs,
            "reads": {"root": str(root), "units": False, "nvidia_smi": "", "stamp": "/var/lib/gpufleet/footprint.json",
                      "paths": ["/etc/apt", "/etc/nccl.conf", "/run/gpufleet", "/dev/nvidia*"],
                      "blockers": ["/run/gpufleet/*.reboot-required"], "kernel_modules": ["nvidia*"], **reads},
            "_ansible_check_mode": check}
    proc = subprocess.run([sys.executable, "-c", RUN_MODULE, str(MODULE)],
                          input=json.dumps({"ANSIBLE_MODULE_ARGS": args}), capture_output=True, text=True, check=False)
    return dict(json.loads(proc.stdout))


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """A scratch host: apt configuration, a managed file, dpkg status, kernel files, a sysctl file and its value."""
    (tmp_path / "etc/apt/preferences.d").mkdir(parents=True)
    (tmp_path / "etc/apt/preferences.d/gpufleet-nccl.pref").write_text("Pin-Priority: 1001\n")
    (tmp_path / "etc/nccl.conf").write_text("NCCL_DEBUG=WARN\n")
    (tmp_path / "var/lib/dpkg").mkdir(parents=True)
    (tmp_path / "var/lib/dpkg/status").write_text("Package: libnccl2\nStatus: hold ok installed\nVersion: 2.26.2\n")
    (tmp_path / "proc/sys/vm").mkdir(parents=True)
    (tmp_path / "proc/sys/vm/max_map_count").write_text("1048576\n")
    (tmp_path / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz iommu=pt\n")
    (tmp_path / "proc/modules").write_text("nvidia 1 0 - Live 0x0\nxt_nat 1 0 - Live 0x0\n")
    (tmp_path / "proc/mounts").write_text("/dev/md0 /scratch xfs rw,noatime 0 0\noverlay /var/lib/x overlay rw 0 0\n")
    (tmp_path / "etc/sysctl.d").mkdir(parents=True)
    (tmp_path / "etc/sysctl.d/90-gpufleet.conf").write_text("# managed\nvm.max_map_count=1048576\n")
    (tmp_path / "etc/fstab").write_text("/dev/md0 /scratch xfs noatime 0 0\n")
    return tmp_path


def recorded(host: Path) -> dict[str, Any]:
    return dict(run(host, "record", ["role_a"]))


def test_probe_without_a_record_is_not_converged(host: Path) -> None:
    res = run(host)
    assert res["converged"] is False and res["reason"] == "no record of a converge" and res["changed"] is False
    assert not (host / "var/lib/gpufleet/footprint.json").exists()


def test_record_then_probe_holds_and_the_stamp_has_digests_only(host: Path) -> None:
    rec = recorded(host)
    assert rec["changed"] is False and set(rec["recorded"]) == {"role_a"}
    stamp = host / "var/lib/gpufleet/footprint.json"
    assert oct(stamp.stat().st_mode & 0o777) == "0o600"
    text = stamp.read_text()
    assert "NCCL_DEBUG" not in text and "1048576" not in text
    res = run(host)
    assert res["converged"] is True and res["digest"] == rec["digest"], res["reason"]
    assert res["reason"] == "as the last converge (role_a) left it"
    # A scope the stamp does not hold does not count.
    assert run(host, scopes=["role_b"])["converged"] is False


def test_check_mode_record_writes_nothing(host: Path) -> None:
    run(host, "record", ["role_a"], check=True)
    assert not (host / "var/lib/gpufleet/footprint.json").exists()


@pytest.mark.parametrize(("what", "section"), [
    (lambda h: (h / "etc/nccl.conf").write_text("NCCL_DEBUG=INFO\n"), "path:/etc/nccl.conf"),
    (lambda h: os.chmod(h / "etc/nccl.conf", 0o600), "path:/etc/nccl.conf"),
    (lambda h: (h / "etc/apt/preferences.d/gpufleet-nccl.pref").unlink(), "path:/etc/apt"),
    (lambda h: (h / "etc/apt/preferences.d/extra.pref").symlink_to("/dev/null"), "path:/etc/apt"),
    (lambda h: (h / "run/gpufleet").mkdir(parents=True), "path:/run/gpufleet"),
    (lambda h: (h / "dev").mkdir() or (h / "dev/nvidia0").write_text(""), "path:/dev/nvidia*"),
    (lambda h: (h / "var/lib/dpkg/status").write_text("Package: libnccl2\nStatus: install ok installed\n"), "dpkg"),
    (lambda h: (h / "proc/sys/vm/max_map_count").write_text("65530\n"), "kernel"),
    (lambda h: (h / "proc/cmdline").write_text("BOOT_IMAGE=/vmlinuz\n"), "kernel"),
    (lambda h: (h / "proc/modules").write_text("xt_nat 1 0 - Live 0x0\n"), "kernel"),
    (lambda h: (h / "proc/mounts").write_text("/dev/md0 /scratch xfs ro,noatime 0 0\n"), "kernel"),
])
def test_each_kind_of_change_makes_the_probe_differ_and_names_its_section(host: Path, what: Any,
                                                                          section: str) -> None:
    recorded(host)
    what(host)
    res = run(host)
    assert res["converged"] is False
    assert res["reason"] == f"state changed since the last converge: {section}"


def test_what_does_not_count_leaves_it_converged(host: Path) -> None:
    """A module outside the globs, a mount outside fstab, a file outside the paths: not the roles' state."""
    recorded(host)
    (host / "proc/modules").write_text("nvidia 1 0 - Live 0x0\nxt_nat 1 0 - Live 0x0\nbr_netfilter 1 0 - Live 0\n")
    pod = "tmpfs /var/lib/kubelet/pods/x tmpfs rw 0 0\n"
    (host / "proc/mounts").write_text((host / "proc/mounts").read_text() + pod)
    (host / "etc/hostname").write_text("renamed\n")
    assert run(host)["converged"] is True


def test_other_inputs_and_blockers_are_not_converged(host: Path) -> None:
    recorded(host)
    assert run(host, inputs="i2")["reason"].startswith("inputs changed since the last converge")
    (host / "run/gpufleet").mkdir(parents=True)
    (host / "run/gpufleet/nvidia-driver.reboot-required").write_text("loaded 1 installed 2\n")
    recorded(host)  # a record with the marker present still never holds while it is there
    res = run(host)
    assert res["converged"] is False and res["reason"].startswith("pending: ")


def test_a_record_keeps_only_scopes_of_the_current_state(host: Path) -> None:
    recorded(host)
    run(host, "record", ["site"])
    assert set(json.loads((host / "var/lib/gpufleet/footprint.json").read_text())["scopes"]) == {"role_a", "site"}
    (host / "etc/nccl.conf").write_text("NCCL_DEBUG=INFO\n")
    run(host, "record", ["role_b"])
    assert set(json.loads((host / "var/lib/gpufleet/footprint.json").read_text())["scopes"]) == {"role_b"}


def test_a_failing_nvidia_smi_blocks_and_a_missing_one_is_state(host: Path) -> None:
    smi = host / "nvidia-smi"
    smi.write_text("#!/bin/sh\nexit 9\n")
    smi.chmod(0o755)
    run(host, "record", ["role_a"], nvidia_smi=str(smi))
    res = run(host, nvidia_smi=str(smi))
    assert res["converged"] is False and "nvidia-smi -q -x failed with exit 9" in res["reason"]
    run(host, "record", ["role_a"], nvidia_smi=str(host / "absent"))
    assert run(host, nvidia_smi=str(host / "absent"))["converged"] is True


def test_gpu_settings_are_state(host: Path) -> None:
    """The settings gpu_settings manages, read from a real H100 capture, and changed as -pl would change it."""
    xml = REPO_ROOT.parent / "shared" / "fixtures" / "real"
    captures = sorted(xml.rglob("*.xml"))
    if not captures:
        pytest.skip("no real nvidia-smi XML capture in ../shared")
    text = captures[0].read_text()
    (host / "smi.xml").write_text(text)
    smi = host / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\ncat {host / 'smi.xml'}\n")
    smi.chmod(0o755)
    run(host, "record", ["role_a"], nvidia_smi=str(smi))
    assert run(host, nvidia_smi=str(smi))["converged"] is True
    limit = re.search(r"<power_limit>\s*([0-9.]+) W\s*</power_limit>|<current_power_limit>([0-9.]+) W", text)
    if limit is None:
        pytest.skip(f"{captures[0].name}: no power limit field")
    old = limit.group(0)
    (host / "smi.xml").write_text(text.replace(old, old.replace(limit.group(1) or limit.group(2), "123.00"), 1))
    res = run(host, nvidia_smi=str(smi))
    assert res["converged"] is False and res["reason"].endswith("gpus")


# -- the action plugin -------------------------------------------------------------------------------------------

def _plugin() -> Any:
    spec = importlib.util.spec_from_file_location("host_footprint_action", PLUGIN)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_inputs_take_role_and_gpufleet_variables_less_the_runtime_ones() -> None:
    plugin = _plugin()
    variables = {"nvidia_driver_version": "570.172.08", "gpufleet_pools": {"a": 1}, "nccl_conf": {"X": "1"},
                 "nvidia_driver_reboot_required": True, "gpufleet_remediate_drain": ["n1"], "__nccl_x": 1,
                 "ansible_host": "10.0.0.1", "unrelated": 2}
    picked = plugin.select_inputs(variables, plugin.role_prefixes(), DEFAULTS["host_footprint_inputs_exclude"])
    assert picked == {"gpufleet_pools": {"a": 1}, "nccl_conf": {"X": "1"}, "nvidia_driver_version": "570.172.08"}
    base = plugin.inputs_digest(variables, DEFAULTS["host_footprint_inputs_exclude"], "2.19.4")
    assert plugin.inputs_digest({**variables, "gpufleet_remediate_drain": []},
                                DEFAULTS["host_footprint_inputs_exclude"], "2.19.4") == base
    assert plugin.inputs_digest({**variables, "nvidia_driver_version": "575.57.08"},
                                DEFAULTS["host_footprint_inputs_exclude"], "2.19.4") != base
    assert plugin.inputs_digest(variables, DEFAULTS["host_footprint_inputs_exclude"], "2.20.0") != base
    # The lock's variables without a role prefix count too (gpufleet_defaults is their one home).
    assert "kernel_version" in plugin.default_names()
    assert plugin.inputs_digest({**variables, "kernel_version": "6.8.0-60"},
                                DEFAULTS["host_footprint_inputs_exclude"], "2.19.4") != base


def test_code_digest_follows_the_role_code(tmp_path: Path) -> None:
    plugin = _plugin()
    for top in ("roles/a/tasks", "ansible/library"):
        (tmp_path / top).mkdir(parents=True)
    (tmp_path / "roles/a/tasks/main.yml").write_text("---\n")
    (tmp_path / "ansible/library/m.py").write_text("x = 1\n")
    before = plugin.code_digest(tmp_path)
    (tmp_path / "ansible/library/__pycache__").mkdir()
    (tmp_path / "ansible/library/__pycache__/m.cpython-311.pyc").write_bytes(b"\0")
    assert plugin.code_digest(tmp_path) == before
    (tmp_path / "roles/a/tasks/main.yml").write_text("---\n- name: x\n")
    assert plugin.code_digest(tmp_path) != before


def test_a_probe_reuses_only_a_converged_reading() -> None:
    plugin = _plugin()
    rec = {"role_a": {"inputs": "i", "footprint": "d"}, "site": {"inputs": "i", "footprint": "d"}}
    held = plugin.reuse({"converged": True, "digest": "d", "recorded": rec}, ["role_b", "site"], "i")
    assert held["converged"] is True and held["reread"] is False
    only_a = {"role_a": rec["role_a"]}
    assert plugin.reuse({"converged": True, "digest": "d", "recorded": only_a}, ["role_b", "site"], "i")[
        "converged"] is False
    assert plugin.reuse({"converged": False, "digest": "d", "recorded": rec}, ["role_b"], "i") is None
    assert plugin.reuse({"skipped": True}, ["role_b"], "i") is None
    assert plugin.reuse({}, ["role_b"], "i") is None


# -- what the roles name is covered -------------------------------------------------------------------------------

#: Absolute paths the roles name that are not host state a role manages or decides from: programs they run, the
#: kernel's module tree (the release is in the digest), the distribution's keyrings, sysfs/procfs they read through
#: the kernel section, block devices (their mdadm.conf, fstab entry and mount are in the digest), the daemons' own
#: state and logs that slurm.conf points at, and text that only mentions a path.
NOT_STATE = ("/usr/bin/", "/usr/sbin/", "/lib/modules/", "/usr/share/keyrings/", "/proc/", "/dev/md", "/dev/nvme",
             "/sys/bus/pci/devices/", "/lib/systemd/system/", "/usr/local/cuda-", "/usr/local/cuda/bin",
             "/var/lib/slurm/", "/var/log/")
#: /dev/urandom: where roles/slurm draws a new munge key from (the key it writes, /etc/munge, is in the footprint).
NOT_STATE_EXACT = {"/dev/null", "/dev/urandom", "/etc/default/grub", "/etc/sysctl"}
_PATH = re.compile(r"(?<![\w.{}-])(/(?:etc|usr|run|var|opt|dev|sys|srv|boot)/[A-Za-z0-9_./*-]+)")


def _covered(path: str, patterns: list[str]) -> bool:
    for pat in patterns:
        if path == pat or path.startswith(pat.rstrip("/") + "/") or fnmatch.fnmatchcase(path, pat):
            return True
        if path.startswith(pat.split("*")[0]) and "*" in pat:
            return True
        if pat.startswith(path + "/"):  # a directory the roles name, whose entries that count are listed
            return True
    return False


def test_every_path_the_roles_name_is_in_the_footprint() -> None:
    patterns = DEFAULTS["host_footprint_paths"]
    missing = set()
    for f in (REPO_ROOT / "roles").rglob("*"):
        if not f.is_file() or f.suffix not in (".yml", ".j2") or "host_footprint" in f.parts:
            continue
        for m in _PATH.finditer(f.read_text()):
            path = m.group(1).rstrip("/.")
            if path.startswith(NOT_STATE) or path in NOT_STATE_EXACT or _covered(path, patterns):
                continue
            missing.add(f"{f.relative_to(REPO_ROOT)}: {path}")
    assert not missing, "paths the roles name but roles/host_footprint does not read:\n" + "\n".join(sorted(missing))


_SET = re.compile(r"^\s*(?:register:\s*([a-z]\w*)|([a-z]\w*):)", re.M)


def test_variables_set_at_run_time_are_left_out_of_the_inputs() -> None:
    """A set_fact key or register name that carries a role prefix must be excluded, or two runs of one stack differ."""
    plugin = _plugin()
    prefixes = plugin.role_prefixes()
    rx = re.compile("^({})_".format("|".join(prefixes)))
    exclude = DEFAULTS["host_footprint_inputs_exclude"]
    found = set()
    for f in [*(REPO_ROOT / "roles").rglob("tasks/*.yml"), *(REPO_ROOT / "ansible" / "playbooks").glob("*.yml")]:
        for task in yaml.safe_load(f.read_text()) or []:
            stack = [task]
            while stack:
                t = stack.pop()
                if not isinstance(t, dict):
                    continue
                for key in ("block", "rescue", "always", "tasks"):
                    stack.extend(t.get(key) or [])
                names = [t["register"]] if isinstance(t.get("register"), str) else []
                sf = t.get("ansible.builtin.set_fact") or t.get("set_fact")
                if isinstance(sf, dict):
                    names += [k for k in sf if k != "cacheable"]
                found |= {n for n in names if rx.match(n)}
    unlisted = sorted(n for n in found if not any(fnmatch.fnmatchcase(n, g) for g in exclude))
    assert not unlisted, f"set during a run but counted as inputs: {unlisted} (host_footprint_inputs_exclude)"
    assert found, "the scan found no run-time variable at all: the scan is broken"


def test_every_role_that_manages_a_host_probes_first_and_records_last() -> None:
    managing = ["cuda_toolkit", "cudnn", "dcgm", "gpu_settings", "host_tuning", "local_scratch", "lustre_client",
                "nccl", "nvidia_container_toolkit", "nvidia_driver", "nvidia_repo", "slurm"]
    for role in [*managing, "rdma"]:
        path = REPO_ROOT / "roles" / role / "tasks" / ("fabric.yml" if role == "rdma" else "main.yml")
        tasks = yaml.safe_load(path.read_text())
        first, end, last = tasks[0], tasks[1], tasks[-1]
        assert first["ansible.builtin.import_role"] == {"name": "host_footprint", "tasks_from": "probe"}, path
        assert first["vars"] == {"host_footprint_scope": role}, path
        assert end["ansible.builtin.meta"] == "end_role" and end["when"] == "__host_footprint.converged", path
        assert last["ansible.builtin.import_role"] == {"name": "host_footprint", "tasks_from": "record"}, path
        assert last["vars"] == {"host_footprint_scope": role}, path
    site = yaml.safe_load((REPO_ROOT / "ansible" / "site.yml").read_text())
    record = site[-1]["tasks"][0]
    assert record["ansible.builtin.import_role"]["tasks_from"] == "record"
    assert record["vars"] == {"host_footprint_scope": "site"}


def test_a_record_after_a_converged_reading_runs_nothing_when_the_stamp_holds_the_scope() -> None:
    plugin = _plugin()
    rec = {"site": {"inputs": "i", "footprint": "d"}}
    held = plugin.already_recorded({"converged": True, "digest": "d", "recorded": rec}, ["site"], "i")
    assert held["converged"] is True and held["reason"] == "recorded (site), unchanged"
    assert plugin.already_recorded({"converged": True, "digest": "d", "recorded": rec}, ["slurm"], "i") is None
    assert plugin.already_recorded({"converged": False, "digest": "d", "recorded": rec}, ["site"], "i") is None


def test_the_skipped_tags_a_record_ignores_are_on_no_role_task() -> None:
    ignored = set(DEFAULTS["host_footprint_ignored_skip_tags"])
    for f in (REPO_ROOT / "roles").rglob("tasks/*.yml"):
        text = f.read_text()
        assert not any(re.search(rf"\b{re.escape(t)}\b", text) for t in ignored), f
