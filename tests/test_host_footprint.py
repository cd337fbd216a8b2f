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
from tests.ansible_local import RUN_MODULE, local_host

MODULE = REPO_ROOT / "ansible" / "library" / "host_footprint.py"
PLUGIN = REPO_ROOT / "roles" / "host_footprint" / "action_plugins" / "host_footprint.py"
DEFAULTS = yaml.safe_load((REPO_ROOT / "roles" / "host_footprint" / "defaults" / "main.yml").read_text())


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
    rec = {"role_a": {"inputs": "i", "footprint": "d", "cluster": "c"},
           "site": {"inputs": "i", "footprint": "d", "cluster": "c"}}
    held = plugin.reuse({"converged": True, "digest": "d", "recorded": rec}, ["role_b", "site"], "i", "c")
    assert held["converged"] is True and held["reread"] is False
    only_a = {"role_a": rec["role_a"]}
    assert plugin.reuse({"converged": True, "digest": "d", "recorded": only_a}, ["role_b", "site"], "i", "c")[
        "converged"] is False
    # Another cluster holds only for a role that does not read it.
    assert plugin.reuse({"converged": True, "digest": "d", "recorded": rec}, ["role_b", "site"], "i", "c2")[
        "converged"] is False
    assert plugin.reuse({"converged": True, "digest": "d", "recorded": rec}, ["role_b", "site"], "i", "c2", False)[
        "converged"] is True
    assert plugin.reuse({"converged": False, "digest": "d", "recorded": rec}, ["role_b"], "i") is None
    assert plugin.reuse({"skipped": True}, ["role_b"], "i") is None
    assert plugin.reuse({}, ["role_b"], "i") is None


# -- what the roles name is covered -------------------------------------------------------------------------------

#: Absolute paths the roles name that are not host state a role manages or decides from: programs they run (those
#: a probing role runs or checks are in its meta/footprint.yml, test_hole4_every_program...), the
#: kernel's module tree (the release is in the digest), the distribution's keyrings, sysfs/procfs they read through
#: the kernel section, block devices (their mdadm.conf, fstab entry and mount are in the digest), the daemons' own
#: state and logs that slurm.conf points at, node_exporter's textfile directory (metrics programs rewrite every
#: few minutes; in a digest they would make every run look unconverged), and text that only mentions a path.
NOT_STATE = ("/usr/bin/", "/usr/sbin/", "/lib/modules/", "/usr/share/keyrings/", "/proc/", "/dev/md", "/dev/nvme",
             "/sys/bus/pci/devices/", "/lib/systemd/system/", "/usr/local/cuda-", "/usr/local/cuda/bin",
             "/var/lib/slurm/", "/var/log/", "/var/lib/node_exporter/")
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
        # A role's meta/footprint.yml is the list of what it relies on (test_hole4_every_program... checks it).
        if (not f.is_file() or f.suffix not in (".yml", ".j2") or "host_footprint" in f.parts
                or f.name == "footprint.yml"):
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
    rec = {"site": {"inputs": "i", "footprint": "d", "cluster": "c"}}
    held = plugin.already_recorded({"converged": True, "digest": "d", "recorded": rec}, ["site"], "i", "c")
    assert held["converged"] is True and held["reason"] == "recorded (site), unchanged"
    assert plugin.already_recorded({"converged": True, "digest": "d", "recorded": rec}, ["slurm"], "i", "c") is None
    assert plugin.already_recorded({"converged": False, "digest": "d", "recorded": rec}, ["site"], "i", "c") is None
    # A record whose cluster moved writes the new one (a role that does not read it still records it for site).
    assert plugin.already_recorded({"converged": True, "digest": "d", "recorded": rec}, ["site"], "i", "c2") is None


def test_the_skipped_tags_a_record_ignores_are_on_no_role_task() -> None:
    ignored = set(DEFAULTS["host_footprint_ignored_skip_tags"])
    for f in (REPO_ROOT / "roles").rglob("tasks/*.yml"):
        text = f.read_text()
        assert not any(re.search(rf"\b{re.escape(t)}\b", text) for t in ignored), f


# -- issue 26: what the roles decide from, beyond the host's own files ----------------------------------------------

def _ansible_run(tmp_path: Path, host: Path, groups: dict[str, list[str]], scope: str, *options: str,
                 playbook: str = "host_footprint.yml", **extra_vars: Any) -> dict[str, Any]:
    """tests/playbooks/host_footprint.yml (or ``playbook``) on the scratch host: the probe's and the record's
    answers for one scope.

    Hosts other than ``node`` exist in the inventory only (never in the play: its hosts are the group ``target``).
    """
    hosts = sorted({h for members in groups.values() for h in members} | {"node"})
    inventory = {"all": {"hosts": {h: local_host(ansible_become=False) for h in hosts},
                         "children": {g: {"hosts": {h: {} for h in members}}
                                      for g, members in {**groups, "target": ["node"]}.items()}}}
    out = tmp_path / "answers.json"
    out.unlink(missing_ok=True)
    reads = {"root": str(host), "units": False, "nvidia_smi": "", "stamp": "/var/lib/gpufleet/footprint.json",
             "paths": ["/etc/apt", "/etc/nccl.conf", "/usr/local/cuda"], "blockers": [], "kernel_modules": []}
    extra = {"scope": scope, "out_file": str(out), "__host_footprint_reads": reads, **extra_vars}
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps(inventory))
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO_ROOT / "ansible" / "ansible.cfg"), "ANSIBLE_FORCE_COLOR": "0",
           "ANSIBLE_CACHE_PLUGIN": "memory", "ANSIBLE_STDOUT_CALLBACK": "default"}
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                           "-e", json.dumps(extra), *options, str(REPO_ROOT / "tests" / "playbooks" / playbook)],
                          env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return dict(json.loads(out.read_text()))


GROW = {"system": ["ctl"], "gpu": ["node"]}


def test_hole1_group_membership_is_an_input_of_the_roles_that_read_it(tmp_path: Path, host: Path) -> None:
    """A node added to the gpu group changes slurm.conf on every Slurm host: slurm's probe no longer holds, while a
    role that reads nothing of the cluster (nccl) still skips. Before issue 26 both said converged."""
    for scope in ("slurm", "nccl"):
        assert _ansible_run(tmp_path, host, GROW, scope)["record"]["reason"] == f"recorded ({scope})"
        assert _ansible_run(tmp_path, host, GROW, scope)["probe"]["converged"] is True
    grown = {"system": ["ctl"], "gpu": ["node", "node2"]}
    slurm = _ansible_run(tmp_path, host, grown, "slurm")["probe"]
    assert slurm["converged"] is False
    assert slurm["reason"].startswith("cluster changed since the last converge"), slurm["reason"]
    assert _ansible_run(tmp_path, host, grown, "nccl")["probe"]["converged"] is True


def _sandbox_groups(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, gpu_nodes: int) -> dict[str, list[str]]:
    """The group map Ansible reads from the inventory `gpufleet up --stack local --gpu-nodes N` writes (the CLI's
    sizing and inventory writer, no Docker), less all/ungrouped, which _ansible_run's inventory adds itself."""
    from ansible.inventory.manager import InventoryManager
    from ansible.parsing.dataloader import DataLoader

    import gpufleet.inventory.writer
    from gpufleet.sandbox import backend
    from gpufleet.workflow import resolve_stack

    monkeypatch.setattr(gpufleet.inventory.writer, "INVENTORIES_DIR", tmp_path / f"inventories-{gpu_nodes}")
    monkeypatch.setattr(backend, "machine_capacity", lambda meminfo=None: 64)
    hosts = resolve_stack("local", up=True, gpu_nodes=gpu_nodes).inventory
    groups = InventoryManager(loader=DataLoader(), sources=[str(hosts)]).get_groups_dict()
    return {g: list(members) for g, members in groups.items() if g not in ("all", "ungrouped")}


@pytest.mark.slow
def test_growing_and_shrinking_the_sandbox_reruns_slurm_where_nothing_else_changed(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, host: Path) -> None:
    """Issue 26 point 3, the CLI's part: `gpufleet up --gpu-nodes 8` on a 2-node sandbox, then `--gpu-nodes 1`.
    The probing host's own variables and state are the same throughout; only the group map the sandbox inventory
    gives moves, and slurm.conf on every Slurm host lists that group. slurm's probe must not hold after either, or
    the converge keeps the old node list (molecule/slurm/grow_shrink.yml proves the same live)."""
    sizes = {n: _sandbox_groups(monkeypatch, tmp_path, n) for n in (2, 8, 1)}
    assert [len(sizes[n]["gpu"]) for n in (2, 8, 1)] == [2, 8, 1]
    assert _ansible_run(tmp_path, host, sizes[2], "slurm")["record"]["reason"] == "recorded (slurm)"
    assert _ansible_run(tmp_path, host, sizes[2], "slurm")["probe"]["converged"] is True
    for n in (8, 1):
        probe = _ansible_run(tmp_path, host, sizes[n], "slurm")["probe"]
        assert probe["converged"] is False, (n, probe["reason"])
        assert probe["reason"].startswith("cluster changed since the last converge"), probe["reason"]


def test_hole1_which_roles_read_the_cluster_is_derived_from_their_files() -> None:
    plugin = _plugin()
    readers = plugin.cluster_readers()
    assert "groups" in readers["slurm"] and not readers["nvidia_driver"] and "drain" not in readers
    assert plugin.reads_cluster("site", readers) and plugin.reads_cluster("slurm", readers)
    assert not plugin.reads_cluster("nccl", readers)
    two = {"groups": {"all": ["a", "b"], "gpu": ["b"]}, "hostvars": {"a": {}, "b": {}}}
    three = {"groups": {"all": ["a", "b", "c"], "gpu": ["b", "c"]}, "hostvars": {"a": {}, "b": {}, "c": {}}}
    assert plugin.cluster_digest(two, readers, []) != plugin.cluster_digest(three, readers, [])
    # slurm renders topology.conf from every host's gpufleet_place (roles/slurm/vars/main.yml): once a probing
    # role reads other hosts' variables, every host's role inputs are in the digest.
    assert "hostvars" in readers["slurm"]
    hv = {"groups": {"all": ["a", "b"]}, "hostvars": {"a": {"gpufleet_place": {"switch": "l1"}}, "b": {}}}
    moved = {**hv, "hostvars": {"a": {"gpufleet_place": {"switch": "l2"}}, "b": {}}}
    assert plugin.cluster_digest(hv, readers, []) != plugin.cluster_digest(moved, readers, [])
    groups_only = {"x": ["groups"]}
    assert plugin.cluster_digest(hv, groups_only, []) == plugin.cluster_digest(moved, groups_only, [])


def test_hole5_start_at_task_records_nothing(tmp_path: Path, host: Path) -> None:
    """A run started at the record (the role's tasks skipped) must not make the changed state the converged one."""
    _ansible_run(tmp_path, host, GROW, "nccl")
    (host / "etc/nccl.conf").write_text("NCCL_DEBUG=INFO\n")  # a change the role's skipped tasks would repair
    rec = _ansible_run(tmp_path, host, GROW, "nccl", "--start-at-task",
                       "host_footprint : Record the converged state for the next run's probe")["record"]
    assert rec["reason"].startswith("not recorded: --start-at-task"), rec
    probe = _ansible_run(tmp_path, host, GROW, "nccl", "--check")["probe"]
    assert probe["converged"] is False and probe["reason"].endswith("path:/etc/nccl.conf"), probe["reason"]


def test_hole5_limit_records_nothing_for_a_role_that_reads_other_hosts(tmp_path: Path, host: Path) -> None:
    _ansible_run(tmp_path, host, GROW, "slurm")
    (host / "etc/nccl.conf").write_text("NCCL_DEBUG=INFO\n")
    assert _ansible_run(tmp_path, host, GROW, "slurm", "--limit", "node")["record"]["reason"] == (
        "not recorded: --limit leaves out hosts this role reads")
    assert _ansible_run(tmp_path, host, GROW, "slurm", "--check")["probe"]["converged"] is False
    # A role that reads only its own host records under --limit (the limit leaves out nothing it reads).
    assert _ansible_run(tmp_path, host, GROW, "nccl", "--limit", "node")["record"]["reason"] == "recorded (nccl)"


def test_hole5_partial_runs_are_named() -> None:
    plugin = _plugin()
    probed = {"footprint_state": "record", "scopes": ["nvidia_repo"], "probed": ["nccl", "nvidia_repo"]}
    roles = plugin.cluster_readers()
    assert plugin.partial_run({}, "nccl", False, probed, roles) == ""
    assert plugin.partial_run({"step": True}, "nccl", False, probed) == "--step may have skipped tasks"
    assert plugin.partial_run({"subset": "node"}, "nccl", False, probed) == ""
    assert plugin.partial_run({"subset": "node"}, "slurm", True, probed).startswith("--limit")
    # Only another role's probe ran: this run did not start at this role's beginning.
    other = {"footprint_state": "record", "scopes": ["cudnn"], "probed": ["cudnn"]}
    assert plugin.partial_run({}, "nccl", False, other, roles) == "the nccl role's probe did not run this run"
    # Scopes that are no role have no probe of their own (molecule/shared/break_one.yml records a baseline).
    assert plugin.partial_run({}, "site", True, other, roles) == ""
    assert plugin.partial_run({}, "restore-baseline", True, other, roles) == ""


def test_hole3_a_link_counts_with_its_final_target(host: Path) -> None:
    """/usr/local/cuda -> /etc/alternatives/cuda -> /usr/local/cuda-12.8: replacing or removing the directory at the
    end changes no link's text."""
    (host / "etc/alternatives").mkdir(parents=True)
    (host / "usr/local/cuda-12.8/bin").mkdir(parents=True)
    (host / "usr/local/cuda").symlink_to("/etc/alternatives/cuda")
    (host / "etc/alternatives/cuda").symlink_to("/usr/local/cuda-12.8")
    paths = ["/usr/local/cuda", "/etc/nccl.conf"]
    run(host, "record", ["role_a"], paths=paths)
    assert run(host, paths=paths)["converged"] is True
    (host / "usr/local/cuda-12.8/bin").rmdir()  # the toolkit's tree lost an entry
    res = run(host, paths=paths)
    assert res["converged"] is False and res["reason"].endswith("path:/usr/local/cuda"), res["reason"]
    run(host, "record", ["role_a"], paths=paths)
    (host / "usr/local/cuda-12.8").rmdir()
    assert run(host, paths=paths)["reason"].endswith("path:/usr/local/cuda")
    plugin_free = host / "usr/local/cuda-12.8"
    plugin_free.mkdir()
    run(host, "record", ["role_a"], paths=paths)
    plugin_free.rmdir()
    plugin_free.mkdir()  # replaced: a new directory under the same name
    assert run(host, paths=paths)["converged"] is False


def test_hole3_link_loops_and_relative_links_resolve_inside_the_root(tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("hf_module", MODULE)
    assert spec and spec.loader
    root = str(tmp_path) + "/"
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/os-release").symlink_to("../usr/lib/os-release")
    (tmp_path / "etc/a").symlink_to("/etc/b")
    (tmp_path / "etc/b").symlink_to("a")
    code = ("import sys, ansible.module_utils as m\n"
            f"m.__path__.append({str(REPO_ROOT / 'ansible' / 'module_utils')!r})\n"
            "import runpy; g = runpy.run_path(sys.argv[1])\n"
            "print(g['final_target'](sys.argv[2], '/etc/os-release'), g['final_target'](sys.argv[2], '/etc/a'))\n")
    out = subprocess.run([sys.executable, "-c", code, str(MODULE), root], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["/usr/lib/os-release", "/etc/a"]


def test_hole4_files_a_role_runs_count(host: Path) -> None:
    """Removing /usr/bin/nvidia-ctk changes neither dpkg's database nor a listed tree; the role lists it."""
    (host / "usr/bin").mkdir(parents=True)
    (host / "usr/bin/nvidia-ctk").write_bytes(b"\x7fELF")
    files = ["/usr/bin/nvidia-ctk", "/usr/local/cuda-*"]
    run(host, "record", ["role_a"], files=files)
    assert run(host, files=files)["converged"] is True
    (host / "usr/bin/nvidia-ctk").unlink()
    res = run(host, files=files)
    assert res["converged"] is False and res["reason"].endswith("files"), res["reason"]


def test_hole4_through_the_plugin_a_role_listed_file_is_read(tmp_path: Path, host: Path) -> None:
    """End to end: the plugin adds every role's meta/footprint.yml list to the reads (before: converged)."""
    (host / "usr/bin").mkdir(parents=True)
    (host / "usr/bin/nvidia-ctk").write_bytes(b"\x7fELF")
    _ansible_run(tmp_path, host, GROW, "nvidia_container_toolkit")
    (host / "usr/bin/nvidia-ctk").unlink()
    probe = _ansible_run(tmp_path, host, GROW, "nvidia_container_toolkit", "--check")["probe"]
    assert probe["converged"] is False and probe["reason"].endswith("files"), probe["reason"]
    assert "/usr/bin/nvidia-ctk" in _plugin().relies_on()


_RUNS = re.compile(r"^\s*(?:argv:\s*\[\s*['\"]?|ansible\.builtin\.command:\s+|cmd:\s+)"
                   r"([A-Za-z0-9_./{}-][A-Za-z0-9_./{}\s-]*?)['\",\s\]]", re.M)
#: Programs whose state the footprint holds otherwise (dpkg's database, unit states) or that only read.
_BASE_PROGRAMS = {"systemctl", "dpkg-query", "dpkg", "which", "journalctl", "command"}


def test_hole4_every_program_and_file_a_probing_role_runs_or_checks_is_listed_by_it() -> None:
    """Absolute programs and toolkit paths the roles name, and the first word of each command they run (a role
    default's value where it is one), are in the role's meta/footprint.yml or under host_footprint_paths."""
    patterns = DEFAULTS["host_footprint_paths"]
    missing = []
    for role in sorted(p for p in (REPO_ROOT / "roles").iterdir() if p.is_dir()):
        text = "\n".join(f.read_text() for f in sorted(role.rglob("*")) if f.suffix in (".yml", ".j2") and f.is_file()
                         and f.parent.name != "meta")
        if "tasks_from: probe" not in text:
            continue
        meta = role / "meta" / "footprint.yml"
        listed = ((yaml.safe_load(meta.read_text()) or {}).get("relies_on") or []) if meta.exists() else []
        defaults: dict[str, Any] = {}
        for part in ("defaults", "vars"):
            if (role / part / "main.yml").exists():
                defaults |= yaml.safe_load((role / part / "main.yml").read_text()) or {}
        named = {m.group(1).rstrip("/.") for m in _PATH.finditer(text)
                 if m.group(1).startswith(("/usr/bin/", "/usr/sbin/", "/usr/local/cuda-", "/lib/systemd/system/"))}
        for m in _RUNS.finditer(text):
            word = m.group(1).split()[0] if m.group(1).split() else ""
            ref = re.fullmatch(r"\{\{\s*(\w+)\s*\}\}", m.group(1).strip())
            if ref and isinstance(defaults.get(ref.group(1)), str):
                word = defaults[ref.group(1)]
            if word and "{" not in word and word not in _BASE_PROGRAMS:
                named.add(word)
        for var, value in defaults.items():
            if var.endswith(("_nvidia_smi", "_ctk")) and isinstance(value, str):
                named.add(value)
        for name in sorted(named):
            name = re.sub(r"\{\{.*?\}\}", "*", name)
            ok = any(fnmatch.fnmatchcase(name, p) or p.rsplit("/", 1)[-1] == name or fnmatch.fnmatchcase(p, name)
                     for p in listed) or _covered(name, patterns)
            if not ok:
                missing.append(f"{role.name}: {name}")
    assert not missing, "run or checked by a role but in no meta/footprint.yml:\n" + "\n".join(missing)


def _topo(nvlink: int, numa: tuple[str, ...] = ("0-47", "48-95")) -> str:
    sys.path.insert(0, str(REPO_ROOT))
    from gpufleet.module_utils.topology import build_board, render_topo_m
    return render_topo_m(build_board(gpus=4, nvlink=nvlink, numa_cpus=numa, nics=2))


@pytest.mark.parametrize("after", [_topo(12), _topo(18, ("0-95", "0-95")), _topo(18).replace("NIC0", "NICX")])
def test_hole2_the_topology_the_roles_render_from_is_state(host: Path, after: str) -> None:
    """A lost NVLink, a NUMA change, a swapped HCA: gres.conf and NCCL_IB_HCA go stale, the GPU settings do not move."""
    (host / "topo.txt").write_text(_topo(18))
    (host / "smi.xml").write_text("<nvidia_smi_log><driver_version>570.1</driver_version></nvidia_smi_log>")
    smi = host / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nif [ "$1" = topo ]; then cat {host / "topo.txt"}; else cat {host / "smi.xml"}; fi\n')
    smi.chmod(0o755)
    rec = run(host, "record", ["role_a"], nvidia_smi=str(smi))
    assert run(host, nvidia_smi=str(smi))["converged"] is True
    (host / "topo.txt").write_text(after)
    res = run(host, nvidia_smi=str(smi))
    assert res["converged"] is False and res["reason"].endswith("topology"), res["reason"]
    assert "topology" in rec["sections"]


def test_hole3_a_link_into_a_run_time_tree_counts_without_its_modification_time(host: Path) -> None:
    """kernfs stamps a directory when a child appears (/sys/class/infiniband/* link into /sys/devices): not a change;
    the target replaced is."""
    (host / "run/gpufleet").mkdir(parents=True)
    (host / "sys/devices/pci0/mlx5_0").mkdir(parents=True)
    (host / "run/gpufleet/hca").symlink_to("/sys/devices/pci0/mlx5_0")
    run(host, "record", ["role_a"])
    (host / "sys/devices/pci0/mlx5_0/ports").mkdir()
    assert run(host)["converged"] is True
    (host / "sys/devices/pci0/mlx5_0/ports").rmdir()
    (host / "sys/devices/pci0/mlx5_0").rename(host / "sys/devices/pci0/gone")
    (host / "sys/devices/pci0/mlx5_0").mkdir()
    assert run(host)["reason"].endswith("path:/run/gpufleet")


# -- issue 33 point 5: a host that changes costs what it did before the skip --------------------------------------

def test_a_probe_answers_from_a_stamp_without_this_runs_inputs() -> None:
    plugin = _plugin()
    rec = {"nccl": {"inputs": "old", "footprint": "d", "cluster": "c"}, "site": {"inputs": "old", "footprint": "d"}}
    answer = plugin.unrecorded({"recorded": rec}, ["cudnn", "site"], "new")
    assert answer["converged"] is False and answer["reread"] is False
    assert answer["reason"].startswith("no record of a converge for cudnn, site with this run's inputs")
    # An entry with this run's inputs may hold (whatever its digest): the host is read.
    assert plugin.unrecorded({"recorded": {**rec, "site": {"inputs": "new", "footprint": "x"}}},
                             ["cudnn", "site"], "new") is None
    # No stamp read this run (a first probe, a skipped record's result), or a failed read: the host is read.
    assert plugin.unrecorded({}, ["cudnn", "site"], "new") is None
    assert plugin.unrecorded({"skipped": True, "changed": False}, ["cudnn", "site"], "new") is None
    assert plugin.unrecorded({"failed": True, "recorded": {}}, ["cudnn", "site"], "new") is None
    assert plugin.unrecorded({"recorded": {}}, ["*"], "new")["converged"] is False


def _site_run(tmp_path: Path, host: Path, *options: str, changes: dict[str, str] | None = None,
              **extra: Any) -> dict[str, Any]:
    """tests/playbooks/host_footprint_site.yml: nccl and cudnn probed and recorded as under site.yml, then the site
    record; for each role the full reading beside the probe's answer."""
    return _ansible_run(tmp_path, host, GROW, "site", *options, playbook="host_footprint_site.yml",
                        scopes=["nccl", "cudnn"], changes=changes or {}, **extra)


def _agree(run: dict[str, Any]) -> list[dict[str, Any]]:
    """Each probe's answer is the full reading's (the shortcut may say "not converged" when nothing changed, never
    "converged" when a full read says otherwise; in these runs they are equal)."""
    for role in run["roles"]:
        assert role["probe"]["converged"] == role["full"]["converged"], role
    return list(run["roles"])


def test_under_site_yml_roles_leave_their_records_to_the_site_record(tmp_path: Path, host: Path) -> None:
    """A fresh host: one module run reads the stamp; the second role answers from it; one stamp write (site).

    Before issue 33 point 5 each role ran the module for its probe and again for its record (four reads, three
    writes here). Each later run's answers equal a full reading's."""
    nccl, cudnn = _agree(_site_run(tmp_path, host, changes={"nccl": "NCCL_DEBUG=INFO\n"}))
    assert nccl["probe"]["reread"] is True and nccl["probe"]["converged"] is False
    assert nccl["record"]["reason"] == "left to the site record (nccl)" and nccl["record"]["reread"] is False
    assert cudnn["probe"]["reread"] is False and "with this run's inputs" in cudnn["probe"]["reason"]
    assert cudnn["record"]["reason"] == "left to the site record (cudnn)"
    stamp = json.loads((host / "var/lib/gpufleet/footprint.json").read_text())
    assert set(stamp["scopes"]) == {"site"}

    # Unchanged: the first probe reads and holds through the site scope, the second reuses that reading.
    nccl, cudnn = _agree(_site_run(tmp_path, host))
    assert nccl["probe"]["converged"] is True and nccl["probe"]["reread"] is True
    assert cudnn["probe"]["converged"] is True and cudnn["probe"]["reread"] is False

    # A break the first role repairs: the second role's probe reads the host again (its scope has this run's
    # inputs) and holds, as the full reading does.
    (host / "etc/nccl.conf").write_text("NCCL_DEBUG=TRACE\n")
    nccl, cudnn = _agree(_site_run(tmp_path, host, changes={"nccl": "NCCL_DEBUG=INFO\n"}))
    assert nccl["probe"]["converged"] is False
    assert cudnn["probe"]["converged"] is True and cudnn["probe"]["reread"] is True

    # New inputs (a changed host variable): the second role answers from the stamp read by the first.
    nccl, cudnn = _agree(_site_run(tmp_path, host, gpufleet_bench_knob=2))
    assert nccl["probe"]["converged"] is False and cudnn["probe"]["reread"] is False


def test_a_limited_run_records_each_role_that_reads_only_its_host_with_the_last_reading(
        tmp_path: Path, host: Path) -> None:
    """--limit refuses the site scope (site reads the cluster). The site record writes instead, in its one write, an
    entry for each role probed on the host that reads only the host, with the run's last reading: a no-op rerun of
    a node converged with --limit skips them. Recorded as each role ended (before this), nccl's entry went stale when
    cudnn changed the host after it, and the rerun ran nccl again (the bench's no-op rerun of a --limit converge:
    25 s against 5 s)."""
    changes = {"nccl": "NCCL_DEBUG=INFO\n", "cudnn": "NCCL_DEBUG=WARN\n"}
    run = _site_run(tmp_path, host, "--limit", "node", changes=changes)
    nccl, cudnn = _agree(run)
    assert nccl["record"]["reason"] == "left to the site record (nccl)"
    assert cudnn["record"]["reason"] == "left to the site record (cudnn)"
    assert run["site"]["reason"] == "recorded (cudnn, nccl)"
    stamp = json.loads((host / "var/lib/gpufleet/footprint.json").read_text())
    assert set(stamp["scopes"]) == {"cudnn", "nccl"}  # no site scope: it would claim the cluster

    # The no-op rerun with the same --limit: both probes hold, as the full readings do.
    nccl, cudnn = _agree(_site_run(tmp_path, host, "--limit", "node", changes=changes))
    assert nccl["probe"]["converged"] is True and cudnn["probe"]["converged"] is True
    # An unlimited run holds too (the role entries), and its site record adds the site scope.
    nccl, cudnn = _agree(_site_run(tmp_path, host, changes=changes))
    assert nccl["probe"]["converged"] is True and cudnn["probe"]["converged"] is True
    stamp = json.loads((host / "var/lib/gpufleet/footprint.json").read_text())
    assert set(stamp["scopes"]) == {"cudnn", "nccl", "site"}


def test_a_limited_run_gives_no_entry_to_a_role_that_reads_other_hosts() -> None:
    """slurm.conf lists the cluster: under --limit slurm's probe ran but it gets no entry (issue 26, hole 5);
    --start-at-task and --step are not a limited run (the per-role records stay, and refuse what they must)."""
    plugin = _plugin()
    readers = {"nccl": [], "slurm": ["groups"], "cudnn": []}
    assert plugin.limited_scopes({"probed": ["slurm", "nccl", "cudnn", "site"]}, readers) == ["cudnn", "nccl"]
    assert plugin.limit_only({"subset": "node"}) is True
    assert plugin.limit_only({"subset": "node", "start_at_task": "x"}) is False
    assert plugin.limit_only({"subset": "node", "step": True}) is False
    assert plugin.limit_only({}) is False


def test_site_yml_defers_the_role_records_of_every_play_it_imports() -> None:
    site = yaml.safe_load((REPO_ROOT / "ansible" / "site.yml").read_text())
    imports = [p for p in site if "ansible.builtin.import_playbook" in p]
    roles_plays = [p for p in imports if "lock_check" not in p["ansible.builtin.import_playbook"]]
    assert roles_plays and all(p["vars"]["host_footprint_defer_to_site"] is True for p in roles_plays)
    assert DEFAULTS["host_footprint_defer_to_site"] is False


# -- issue 33 point 4: one probe per host before any role --------------------------------------------------------

def _site_first_run(tmp_path: Path, host: Path, *options: str, changes: dict[str, str] | None = None,
                    **extra: Any) -> dict[str, Any]:
    """tests/playbooks/host_footprint_site_first.yml: site.yml's first play (the site probe, converged hosts into
    gpufleet_converged), then nccl and cudnn and the site record on the hosts left; full readings beside."""
    return _ansible_run(tmp_path, host, GROW, "site", *options, playbook="host_footprint_site_first.yml",
                        scopes=["nccl", "cudnn"], changes=changes or {}, **extra)


def test_site_yml_probes_each_host_once_and_leaves_a_converged_host_out_agreeing_with_full_readings(
        tmp_path: Path, host: Path) -> None:
    """A converged host costs site.yml's first play (one module run, no role task); a host that is not converged
    goes through the roles, whose first probe answers from the site probe's reading. Every answer equals a full
    reading's, and the cluster digest computed once for the run equals the one each host computes itself."""
    run = _site_first_run(tmp_path, host, changes={"nccl": "NCCL_DEBUG=INFO\n"})
    assert run["site_probe"]["converged"] is False and run["site_probe"]["reread"] is True
    assert run["site_full"]["converged"] is False
    assert run["site_probe"]["cluster"] == run["site_full"]["cluster"]  # the run's, once = each host's own
    assert run["converged_group"] == []
    nccl, cudnn = _agree(run)
    assert nccl["probe"]["reread"] is False and nccl["probe"]["reason"].endswith("(read earlier this run)")
    assert run["site"]["reason"] == "recorded (site)"
    stamp = json.loads((host / "var/lib/gpufleet/footprint.json").read_text())
    assert stamp["scopes"]["site"]["roles"] == ["cudnn", "nccl"]

    # Unchanged: converged at the first play, out of every later play; the probe names the roles it skips.
    run = _site_first_run(tmp_path, host, changes={"nccl": "NCCL_DEBUG=INFO\n"})
    assert run["site_probe"]["converged"] is True and run["site_full"]["converged"] is True
    assert run["site_probe"]["covers"] == ["cudnn", "nccl"]
    assert run["converged_group"] == ["node"] and run["roles"] == [] and run["site"] == {}

    # A break: not converged, the roles run and their probes agree with full readings; nccl repairs it.
    (host / "etc/nccl.conf").write_text("NCCL_DEBUG=TRACE\n")
    run = _site_first_run(tmp_path, host, changes={"nccl": "NCCL_DEBUG=INFO\n"})
    assert run["site_probe"]["converged"] is False and run["site_full"]["converged"] is False
    assert run["site_probe"]["reason"].startswith("state changed since the last converge")
    nccl, cudnn = _agree(run)
    assert nccl["probe"]["converged"] is False and nccl["probe"]["reread"] is False
    assert nccl["probe"]["reason"].startswith("state changed since the last converge")
    assert cudnn["probe"]["converged"] is True and cudnn["probe"]["reread"] is True  # nccl changed the host
    assert _site_first_run(tmp_path, host, changes={"nccl": "NCCL_DEBUG=INFO\n"})["site_probe"]["converged"] is True

    # New inputs (a changed host variable): no host converged, the later plays take every host.
    run = _site_first_run(tmp_path, host, gpufleet_bench_knob=3)
    assert run["site_probe"]["converged"] is False and run["site_full"]["converged"] is False
    assert [r["probe"]["converged"] for r in _agree(run)] == [False, False]


def test_a_reading_is_reused_after_the_site_probe_only(tmp_path: Path) -> None:
    """The first role's probe answers from site.yml's site probe whatever it said (nothing ran in between); any
    other reading that said "not converged" is read again (a role ran since), and a blocker always reads again."""
    plugin = _plugin()
    rec = {"nccl": {"inputs": "i", "footprint": "d", "cluster": "c"}, "site": {"inputs": "i", "footprint": "d0",
                                                                          "cluster": "c", "roles": ["nccl"]}}
    site = {"footprint_state": "probe", "scopes": ["site", "site"], "converged": False, "digest": "d",
            "recorded": rec, "reason": "state changed since the last converge: path:/etc/nccl.conf"}
    held = plugin.reuse(site, ["nccl", "site"], "i", "c")
    assert held["converged"] is True and held["reread"] is False  # nccl's own entry holds for this digest
    other = plugin.reuse(site, ["cudnn", "site"], "i", "c")
    assert other["converged"] is False and other["reason"].startswith("state changed since the last converge")
    assert plugin.reuse({**site, "scopes": ["nccl", "site"]}, ["cudnn", "site"], "i", "c") is None
    assert plugin.reuse({**site, "blockers": ["/run/gpufleet/x.reboot-required"]}, ["nccl", "site"], "i", "c") is None
    assert plugin.covers(rec) == ["nccl"] and plugin.covers({}) == []
    # The run's own group is no part of the cluster digest.
    base = {"groups": {"all": ["a"], "gpu": ["a"]}}
    assert plugin.cluster_digest({"groups": {**base["groups"], "gpufleet_converged": ["a"]}}, {}, []) == \
        plugin.cluster_digest(base, {}, [])


def test_site_yml_leaves_converged_hosts_out_of_every_play_after_its_probe() -> None:
    """Every play site.yml runs after its first (imported ones included) takes its hosts less gpufleet_converged,
    and the first play is the site probe; the playbooks run alone leave out nobody (the group never exists)."""
    site = yaml.safe_load((REPO_ROOT / "ansible" / "site.yml").read_text())
    plays: list[dict[str, Any]] = []
    for play in site:
        if "ansible.builtin.import_playbook" in play:
            plays += yaml.safe_load((REPO_ROOT / "ansible" / play["ansible.builtin.import_playbook"]).read_text())
        else:
            plays.append(play)
    names = [p["name"] for p in plays]
    first = names.index("Converged hosts")
    assert plays[first]["tasks"][0]["ansible.builtin.import_role"] == {"name": "host_footprint", "tasks_from": "site"}
    assert all("gpufleet_converged" not in str(p["hosts"]) for p in plays[:first + 1])
    assert all(str(p["hosts"]).endswith(":!~^(gpufleet_converged|ungrouped)$") for p in plays[first + 1:]), names
