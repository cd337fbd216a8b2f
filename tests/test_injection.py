"""Stack values are data, never code (issue 12 points 1 and 2).

Two layers, each tested on its own:

1. Validation at the source: a stack value holding ``{{ lookup('pipe', 'touch MARKER') }}`` (host address,
   ansible_user, cluster name, Lustre fsname) or a line break (host name) is refused by ``lock check`` and
   ``plan``; nothing runs, the marker never appears.
2. Data to Ansible: even a value that got past validation reaches Ansible ``!unsafe``: the inventory written by
   gpufleet.inventory.writer is listed by ``ansible-inventory`` and used by a real ``ansible-playbook`` run
   (``connection: local``, templating every value) and the marker still never appears. The same inventory
   written with plain ``yaml.safe_dump`` (what the writer did before) does create the marker: the check is
   sensitive to the defect it guards against.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet.cli import app
from gpufleet.inventory import write_inventory
from gpufleet.inventory.writer import cluster_vars
from gpufleet.lock import resolve_lock
from gpufleet.spec import ClusterSpec, Host, Lustre, LustreVolume, Storage, load_spec
from gpufleet.validation.bench import BenchJob, BenchSettings, render_sbatch

BIN = Path(sys.executable).parent
runner = CliRunner()


def payload(marker: Path) -> str:
    return "{{ lookup('pipe', 'touch " + str(marker) + "') }}"


STACK = """\
config:
  gpufleet:backend: existing
  gpufleet:clusterName: {cluster}
  gpufleet:lock:
    profile: h100-cuda12.8
  gpufleet:storage:
    lustre:
      fsname: {fsname}
      datasets: {{mount_path: /lustre/datasets, capacity_gib: 10}}
      checkpoints: {{mount_path: /lustre/checkpoints, capacity_gib: 10}}
  gpufleet:pools:
    - name: system
      role: system
      count: 1
      hosts: [{{name: {name}, address: {address}, user: {user}}}]
    - name: gpu
      role: gpu
      gpu: h100-sxm5-80gb
      count: 1
      hosts: [{{name: gpu-0, address: 192.0.2.20}}]
"""
SAFE = {"cluster": "lab", "fsname": "ai", "name": "sys-0", "address": "192.0.2.10", "user": "ubuntu"}


@pytest.mark.parametrize("field", ["address", "user", "cluster", "fsname", "name"])
def test_lock_check_and_plan_refuse_a_template_and_run_nothing(field: str, tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    values = {k: v for k, v in SAFE.items()}
    values[field] = '"' + payload(marker).replace('"', '\\"') + '"'
    path = tmp_path / "Pulumi.lab.yaml"
    path.write_text(STACK.format(**values))
    for argv in (["lock", "check"], ["plan"], ["plan", "--json"]):
        result = runner.invoke(app, [*argv, "--stack", str(path)])
        assert result.exit_code == 1, result.output
        assert "error: stack file problem" in result.stderr
        assert not marker.exists()
    assert not (tmp_path / "inventories").exists()


def test_a_host_name_with_a_newline_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.lab.yaml"
    path.write_text(STACK.format(**(SAFE | {"name": '"sys-0\\nSlurmUser=root"'})))
    result = runner.invoke(app, ["lock", "check", "--stack", str(path)])
    assert result.exit_code == 1
    assert "gpufleet:pools[0].hosts[0].name = 'sys-0\\nSlurmUser=root': not an RFC 1123 host name" in result.stderr


def test_sbatch_template_refuses_a_line_break_that_got_past_validation() -> None:
    job = BenchJob("nccl-single-x", "single-node", ("gpu-0\nrm -rf /",))
    with pytest.raises(ValueError, match="not a single plain word"):
        render_sbatch(job, BenchSettings(gpus_per_node=8))
    ok = render_sbatch(BenchJob("nccl-single-gpu-0", "single-node", ("gpu-0",)), BenchSettings(gpus_per_node=8))
    assert "#SBATCH --nodelist=gpu-0\n" in ok


def _unvalidated_spec(marker: Path) -> ClusterSpec:
    """A spec whose values skipped validation (model_construct): what the writer must still render as data."""
    good = load_spec("onprem-h100")
    evil = payload(marker)
    lustre = Lustre.model_construct(mgs_nids=[], fsname=evil,
                                    datasets=LustreVolume(mount_path="/d", capacity_gib=1),
                                    checkpoints=LustreVolume(mount_path="/c", capacity_gib=1))
    return good.model_copy(update={"cluster_name": evil, "storage": Storage.model_construct(lustre=lustre,
                                                                                          local_nvme=None)})


PLAY = """\
- name: Use every value the inventory gives (templating each)
  hosts: all
  connection: local
  gather_facts: false
  tasks:
    - name: Print the values
      ansible.builtin.debug:
        msg: "{{ ansible_host }} {{ ansible_user }} {{ gpufleet_cluster_name }} {{ gpufleet_lustre.fsname }}"
"""


def _ansible(inventory: Path, play: Path, env: dict[str, str]) -> tuple[str, str]:
    listed = subprocess.run([str(BIN / "ansible-inventory"), "-i", str(inventory), "--list"],
                            capture_output=True, text=True, env=env, timeout=120, check=False)
    assert listed.returncode == 0, listed.stderr
    ran = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(play), "--limit", "sys-0"],
                         capture_output=True, text=True, env=env, timeout=180, check=False)
    return listed.stdout, ran.stdout + ran.stderr


@pytest.mark.skipif(shutil.which("ansible-playbook", path=str(BIN)) is None, reason="ansible-playbook not installed")
def test_inventory_values_reach_ansible_as_data(tmp_path: Path) -> None:
    marker = tmp_path / "MARKER"
    spec = _unvalidated_spec(marker)
    lock = resolve_lock(load_spec("onprem-h100"))
    hosts = {"system": [Host.model_construct(name="sys-0", address=payload(marker), connection="ssh",
                                             user=payload(marker))],
             "h100-a": [Host(name="gpu-0", address="192.0.2.20")]}
    inv = tmp_path / "inv"
    hosts_file = write_inventory(spec, lock, hosts, inv)
    assert "!unsafe" in hosts_file.read_text()
    play = tmp_path / "play.yml"
    play.write_text(PLAY)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1"}

    listed, output = _ansible(hosts_file, play, env)
    assert not marker.exists(), output
    assert "ok=1" in output, output
    assert f"touch {marker}" in listed  # the literal text, not its result
    assert output.count(f"lookup('pipe', 'touch {marker}')") == 4, output

    # The same data written as the writer did before (plain safe_dump): Ansible runs the command.
    (inv / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {"system": {"hosts": {"sys-0": {
        "ansible_host": payload(marker), "ansible_user": payload(marker)}}}}}}))
    (inv / "group_vars" / "all" / "cluster.yml").write_text(yaml.safe_dump(cluster_vars(spec)))
    _ansible(hosts_file, play, env)
    assert marker.exists(), "the control case should have run the lookup (test not sensitive)"


SLURM_PLAY = """\
- name: Render slurm.conf as the slurm role does
  hosts: ctl
  connection: local
  gather_facts: false
  vars_files: [{defaults}, {role_vars}]
  tasks:
    - name: Render
      ansible.builtin.copy:
        content: "{{{{ lookup('ansible.builtin.template', '{template}') }}}}"
        dest: "{out}"
        mode: "0644"
"""


@pytest.mark.parametrize(("compute", "ok"), [("gpu-0", True), ("'gpu-0\\nSlurmUser=root'", False),
                                             ("'gpu-0 CPUs=999'", False)])
def test_slurm_conf_refuses_a_host_name_that_would_add_lines(tmp_path: Path, compute: str, ok: bool) -> None:
    """A hand-written inventory skips gpufleet's validation: the template itself refuses a name that is not a word."""
    inventory = tmp_path / "hosts.yml"
    inventory.write_text("all:\n  children:\n    system:\n      hosts:\n        ctl: {}\n"
                         f"    gpu:\n      hosts:\n        {compute}: {{}}\n")
    out = tmp_path / "slurm.conf"
    play = tmp_path / "play.yml"
    roles = Path(__file__).resolve().parents[1] / "roles" / "slurm"
    play.write_text(SLURM_PLAY.format(defaults=roles / "defaults" / "main.yml", role_vars=roles / "vars" / "main.yml",
                                      template=roles / "templates" / "slurm.conf.j2", out=out))
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")} | {
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1"}
    ran = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(inventory), str(play),
                          "-e", "slurm_gpus_per_node=0", "-e", f"ansible_python_interpreter={sys.executable}"],
                         capture_output=True, text=True, env=env, timeout=180,
                         check=False)
    if ok:
        assert ran.returncode == 0, ran.stdout + ran.stderr
        assert "NodeName=gpu-0 CPUs=1 RealMemory=1024 State=UNKNOWN\n" in out.read_text()
    else:
        assert ran.returncode != 0
        assert "slurm.conf: not a single word: gpu-0" in ran.stdout
        assert not out.exists()
