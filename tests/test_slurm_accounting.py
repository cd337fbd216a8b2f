"""roles/slurm's accounting (issue 29 point 2), PMIx (point 7) and the NVSwitch health check derived from the pool's
GPU model, rendered by Ansible through the role's preflight, defaults, vars and templates (the harness of
tests/test_slurm_conf.py). The running slurmdbd, MariaDB, sacct and srun --mpi=pmix are proven by the `slurm`
Molecule scenario (molecule/slurm/tests/test_accounting.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from gpufleet.inventory.writer import cluster_vars
from gpufleet.spec import load_spec
from tests.test_slurm_conf import _run, _settings

pytestmark = pytest.mark.slow

#: A password of the shape the role generates (32 random bytes as hex), given here as a stack secret.
SECRET = "0123456789abcdef" * 4


def test_slurm_conf_sends_jobs_to_slurmdbd_with_gpus_tracked_and_fair_share(tmp_path: Path) -> None:
    rc, log, out = _run(tmp_path, ["slurm.conf"])
    assert rc == 0, log
    conf = _settings(out / "ctl.slurm.conf")
    assert conf["AccountingStorageType"] == "accounting_storage/slurmdbd"
    # The database runs on the controller (a system node), which slurmctld reaches it on.
    assert conf["AccountingStorageHost"] == "ctl"
    assert conf["AccountingStorageTRES"] == "gres/gpu"
    # A real host (proctrack/cgroup, the role's default) gathers job usage from its cgroups.
    assert conf["JobAcctGatherType"] == "jobacct_gather/cgroup"
    assert conf["PriorityType"] == "priority/multifactor"
    assert (conf["PriorityDecayHalfLife"], conf["PriorityWeightFairshare"], conf["PriorityWeightAge"],
            conf["PriorityWeightJobSize"], conf["PriorityWeightTRES"]) == ("7-0", "10000", "1000", "1000",
                                                                          "GRES/gpu=1000")
    # PMIx is there for jobs that ask (srun --mpi=pmix); plain steps start no PMIx server.
    assert conf["MpiDefault"] == "none"


def test_containers_gather_job_usage_from_proc(tmp_path: Path) -> None:
    # The test bed's nodes have a read-only /sys/fs/cgroup (molecule/shared/base.yml: proctrack/linuxproc).
    rc, log, out = _run(tmp_path, ["slurm.conf"], slurm_proctrack_type="proctrack/linuxproc",
                        slurm_task_plugin="task/none")
    assert rc == 0, log
    assert _settings(out / "ctl.slurm.conf")["JobAcctGatherType"] == "jobacct_gather/linux"


def test_accounting_off_leaves_slurmdbd_out(tmp_path: Path) -> None:
    rc, log, out = _run(tmp_path, ["slurm.conf"], slurm_accounting=False)
    assert rc == 0, log
    conf = _settings(out / "ctl.slurm.conf")
    assert not {"AccountingStorageType", "AccountingStorageHost", "AccountingStorageTRES"} & set(conf)


def test_slurmdbd_conf_names_the_database_the_role_creates(tmp_path: Path) -> None:
    rc, log, out = _run(tmp_path, ["slurmdbd.conf"], slurm_dbd_storage_pass=SECRET)
    assert rc == 0, log
    conf = _settings(out / "ctl.slurmdbd.conf")
    assert conf == {"AuthType": "auth/munge", "DbdHost": "ctl", "SlurmUser": "slurm",
                    "LogFile": "/var/log/slurm/slurmdbd.log", "StorageType": "accounting_storage/mysql",
                    "StorageHost": "localhost", "StorageLoc": "slurm_acct_db", "StorageUser": "slurm",
                    "StoragePass": SECRET}


@pytest.mark.parametrize("secret", ["short", "has a space in it ok", "ends-with#comment-0123"])
def test_a_password_slurmdbd_conf_or_sql_would_misread_is_refused_without_showing_it(
        tmp_path: Path, secret: str) -> None:
    rc, log, _ = _run(tmp_path, ["slurm.conf"], slurm_dbd_storage_pass=secret)
    assert rc != 0
    assert "Assert the accounting database password given as a secret is a long plain word" in log
    assert secret not in log


def test_preflight_refuses_the_database_on_a_gpu_node(tmp_path: Path) -> None:
    # The controller (and so slurmdbd and MariaDB) put on the GPU group: refused while accounting is on.
    rc, log, _ = _run(tmp_path, ["slurm.conf"], slurm_controller_group="gpu")
    assert rc != 0
    assert "Assert the accounting database runs on the controller, a system node" in log
    assert "never on a GPU node" in log
    (tmp_path / "off").mkdir()
    rc, log, _ = _run(tmp_path / "off", ["slurm.conf"], slurm_controller_group="gpu", slurm_accounting=False)
    assert rc == 0, log


def _health_program(out: Path, host: str) -> str:
    files = json.loads((out / f"{host}.vars.json").read_text())["__slurm_health_files"]
    return str(next(f["content"] for f in files if f["dest"] == "/usr/local/sbin/gpufleet-slurm-healthcheck"))


def test_nvswitch_health_check_follows_the_pools_gpu_model(tmp_path: Path) -> None:
    # The pools as gpufleet's inventory writer describes them from a real stack (an HGX H100 SXM5 pool) and a PCIe
    # pool: the health program requires fabric manager on the HGX node only, with nothing set by hand.
    pools = dict(cluster_vars(load_spec("onprem-h100"))["gpufleet_pools"])
    hgx = next(name for name, p in pools.items() if p["role"] == "gpu")
    assert pools[hgx]["nvswitch"] is True
    pools["pcie"] = {**pools[hgx], "gpu": "h100-pcie-80gb", "nvswitch": False}
    gpu = {"gpu-hgx": {"gpufleet_pool": hgx}, "gpu-pcie": {"gpufleet_pool": "pcie"}}
    rc, log, out = _run(tmp_path, [], gpu=gpu, gpufleet_pools=pools, dump_vars=["__slurm_health_files"])
    assert rc == 0, log
    assert '"--nvswitch"' in _health_program(out, "gpu-hgx")
    assert '"--nvswitch"' not in _health_program(out, "gpu-pcie")


#: The names under which the database password travels through roles/slurm (whole names: not ..._pass_file).
_SECRET = re.compile(r"\b(__slurm_dbd_pass_value|__slurm_dbd_pass_read|slurm_dbd_storage_pass)\b")
_TASK_KEYS = {"name", "when", "register", "become", "no_log", "notify", "tags", "changed_when", "failed_when",
              "check_mode", "environment", "delegate_to", "run_once", "retries", "delay", "until", "loop",
              "loop_control", "vars", "ignore_errors"}


def test_the_password_travels_only_in_no_log_module_arguments() -> None:
    # Ansible runs a task's `environment:` as part of the command line it executes on the host: sudo logs that line
    # to the journal and -vvv prints it (the first Molecule run found the password in the journal so). The
    # password may only be a module argument of a no_log task (the shell module's stdin, managed_files' content).
    import yaml

    from gpufleet import REPO_ROOT

    found = []
    for path in sorted((REPO_ROOT / "roles" / "slurm" / "tasks").glob("*.yml")):
        for task in yaml.safe_load(path.read_text()) or []:
            env = json.dumps(task.get("environment", {}))
            args = json.dumps({k: v for k, v in task.items() if k not in _TASK_KEYS})
            if _SECRET.search(env):
                found.append(f"{path.name}: {task['name']}: in environment")
            if _SECRET.search(args) and task.get("no_log") is not True:
                found.append(f"{path.name}: {task['name']}: not no_log")
    assert found == []
