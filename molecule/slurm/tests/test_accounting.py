"""slurm, accounting (issue 29 point 2) and PMIx (point 7): slurmdbd with MariaDB on the controller (the system node),
a job's GPUs in sacct, the database password only in the two files that hold it (and never in ansible-playbook -v
--diff output, a check run's or a converge's), PMIx steps through Debian's mpi_pmix plugin."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

CONTROL, NODE = "gpufleet-mol-slurm-0", "gpufleet-mol-slurm-1"
DBD_CONF, PASS_FILE = "/etc/slurm/slurmdbd.conf", "/etc/slurm/slurmdbd.storage-pass"


def _control(host):
    if host.backend.get_hostname() != CONTROL:
        pytest.skip("slurmdbd and MariaDB run on the controller")


def _password(host) -> str:
    return host.check_output(f"cat {PASS_FILE}").strip()


def _show_config(host):
    out = host.check_output("scontrol show config")
    return {k.strip(): v.strip() for k, _, v in (ln.partition("=") for ln in out.splitlines()) if _}


def test_database_and_slurmdbd_run_on_the_system_node_only(host):
    name = host.backend.get_hostname()
    for unit in ("mariadb", "slurmdbd"):
        svc = host.service(unit)
        if name == CONTROL:
            assert svc.is_running and svc.is_enabled, unit
        else:
            assert not svc.is_running, f"{unit} runs on the GPU node"


def test_password_files_are_root_and_slurm_only(host):
    _control(host)
    conf, secret = host.file(DBD_CONF), host.file(PASS_FILE)
    assert (conf.mode, conf.user, conf.group) == (0o600, "slurm", "slurm")
    assert (secret.mode, secret.user, secret.group) == (0o600, "root", "root")
    pw = _password(host)
    assert re.fullmatch(r"[0-9a-f]{64}", pw), "not the generated secret's shape"
    assert f"StoragePass={pw}\n" in host.check_output(f"cat {DBD_CONF}") + "\n"


def test_controller_runs_accounting_and_fair_share(host):
    _control(host)
    conf = _show_config(host)
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd", conf
    assert conf["AccountingStorageHost"] == CONTROL, conf
    assert "gres/gpu" in conf["AccountingStorageTRES"].split(","), conf
    # The containers' cgroup tree is read-only (test_slurm.py): usage is gathered from /proc here.
    assert conf["JobAcctGatherType"] == "jobacct_gather/linux", conf
    assert conf["PriorityType"] == "priority/multifactor", conf
    assert conf["PriorityWeightFairShare"] == "10000", conf


def test_sacct_lists_a_job_with_its_gpus(host):
    _control(host)
    job = host.check_output("sbatch --parsable --wait --nodes=1 --gres=gpu:2 --time=1 --wrap hostname").split(";")[0]
    out = ""
    for _ in range(30):
        out = host.check_output(f"sacct --noheader -X -j {job} -o JobID,AllocTRES%60,State")
        if "gres/gpu=2" in out and "COMPLETED" in out:
            break
        time.sleep(2)
    assert "gres/gpu=2" in out and "COMPLETED" in out, out
    # The record is in MariaDB, not only in slurmctld's memory.
    rows = host.check_output(
        f"mariadb -NBe 'SELECT COUNT(*) FROM slurm_acct_db.gpufleet_job_table WHERE id_job={int(job)}'")
    assert rows.strip() == "1", rows


def test_the_password_is_in_no_other_file_or_log(host):
    # Every file of the controller but the two that hold it, and the journal (where Ansible's modules log their
    # arguments unless no_log), searched for the password. The pattern comes from the password file (grep -f): a
    # command line holding it would itself be logged (testinfra runs commands through Ansible's command module).
    _control(host)
    files = host.run(f"grep -rlsF -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev -f {PASS_FILE} / "
                     "|| true")
    assert sorted(files.stdout.split()) == [DBD_CONF, PASS_FILE], files.stdout
    journal = host.run(f"journalctl --no-pager -o export | grep -caF -f {PASS_FILE} || true")
    assert journal.stdout.strip() == "0", journal.stdout


def _ansible_playbook(*args: str) -> subprocess.CompletedProcess[str]:
    """ansible-playbook over molecule's inventory and configuration (the verifier's environment is molecule's)."""
    scenario = Path(os.environ["MOLECULE_SCENARIO_DIRECTORY"])
    project = Path(os.environ["MOLECULE_PROJECT_DIRECTORY"])
    inventory = str(Path(os.environ["MOLECULE_INVENTORY_FILE"]).parent)
    exe = str(Path(sys.executable).parent / "ansible-playbook")
    env = dict(os.environ)
    # What molecule/shared/base.yml gives molecule's own runs, where the verifier's environment lacks it.
    for key, value in (("ANSIBLE_ROLES_PATH", project / "roles"),
                       ("ANSIBLE_COLLECTIONS_PATH", project / ".collections"),
                       ("ANSIBLE_LIBRARY", project / "ansible/library"),
                       ("ANSIBLE_MODULE_UTILS", project / "ansible/module_utils"),
                       ("ANSIBLE_FILTER_PLUGINS", project / "ansible/filter_plugins"),
                       ("ANSIBLE_CONFIG", Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "ansible.cfg")):
        env.setdefault(key, str(value))
    env["ANSIBLE_FORCE_COLOR"] = "0"
    return subprocess.run([exe, "-v", "--diff", "--inventory", inventory, "-e", '{"host_footprint_probe": false}',
                           *args, str(scenario / "converge.yml")],
                          capture_output=True, text=True, env=env, timeout=900, check=False)


def test_the_password_never_reaches_ansible_output(host):
    # slurmdbd.conf edited and world-readable: a check run (what gpufleet drift runs: --check --diff) reports it,
    # a converge rewrites it; both at -v with diffs on, and neither output holds the password.
    _control(host)
    pw = _password(host)
    host.run(f"sed -i 's/^LogFile=.*/LogFile=\\/tmp\\/x.log/' {DBD_CONF} && chmod 0644 {DBD_CONF}")
    try:
        check = _ansible_playbook("--check")
        out = check.stdout + check.stderr
        assert check.returncode == 0, out[-4000:]
        assert "Report the accounting files that differ" in out and DBD_CONF in out, out[-4000:]
        assert pw not in out
        converge = _ansible_playbook()
        out = converge.stdout + converge.stderr
        assert converge.returncode == 0, out[-4000:]
        assert re.search(r"changed: \[" + CONTROL + r"\]", out), out[-4000:]
        assert pw not in out
    finally:
        host.run(f"chmod 0600 {DBD_CONF}")
    conf = host.file(DBD_CONF)
    assert conf.mode == 0o600 and "LogFile=/var/log/slurm/slurmdbd.log" in conf.content_string
    assert host.service("slurmdbd").is_running


def test_srun_offers_pmix_and_runs_a_pmix_step(host):
    # Point 7: Debian's slurm-wlm-basic-plugins ships mpi_pmix (pmix_v4); it opens libpmix.so (libpmix-dev), which
    # the role installs. The nccl-tests sbatch template (gpufleet/validation/templates) runs srun --mpi=pmix.
    _control(host)
    listed = host.run("srun --mpi=list")
    out = listed.stdout + listed.stderr
    assert listed.rc == 0 and re.search(r"\bpmix\b", out), out
    step = host.run(f"srun --mpi=pmix --nodes=1 --ntasks=1 --time=1 --nodelist={shlex.quote(NODE)} printenv PMIX_RANK")
    assert step.rc == 0 and step.stdout.strip() == "0", step.stdout + step.stderr
