"""Bad input, second round (issue 27, class 2): semantic duplicates and overlaps the field grammars cannot see.

Each test is for a class of spelling, not one example: addresses compare as addresses (any spelling of one IPv6
or IPv4 address, IPv4-mapped IPv6 included), namespaces against every platform namespace the chart catalog
names, networks as networks, paths after normalisation. Every refusal is the contract: exit 1, one line naming
file, key, value and fix, and with ``--json`` the same as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpufleet.errors import ConfigError
from gpufleet.spec import load_spec
from tests.test_bad_inputs import GOOD, HEAD, POOLS
from tests.test_bad_inputs_round2 import contract_error, invoke


def _stack(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "Pulumi.lab.yaml"
    f.write_text(text, encoding="utf-8")
    return f


def refused(tmp_path: Path, text: str, key: str, fragment: str) -> dict[str, str]:
    """The stack is refused by ``lock check`` with one problem at ``key`` whose message holds ``fragment``."""
    f = _stack(tmp_path, text)
    contract_error(["lock", "check", "--stack", str(f)], fragment)
    code, stdout, _ = invoke(["lock", "check", "--stack", str(f), "--json"])
    assert code == 1
    errors = [e for e in json.loads(stdout)["errors"] if e["key"] == key]
    assert len(errors) == 1, json.loads(stdout)["errors"]
    assert fragment in errors[0]["message"] and errors[0]["fix"] and errors[0]["file"] == str(f)
    return errors[0]


def accepted(tmp_path: Path, text: str) -> None:
    f = _stack(tmp_path, text)
    code, _, stderr = invoke(["lock", "check", "--stack", str(f)])
    assert code == 0, stderr


# --- one host in two places under two spellings --------------------------------------------------------------

def _two_pools(first: str, second: str) -> str:
    return GOOD.replace("address: 192.0.2.10", f'address: "{first}"').replace("address: 192.0.2.21",
                                                                              f'address: "{second}"')


@pytest.mark.parametrize(("first", "second"), [
    ("2001:db8::a", "2001:0db8:0000:0000:0000:0000:0000:000a"),
    ("2001:db8::a", "2001:DB8::A"),
    ("2001:db8::a", "2001:db8:0:0::a"),
    ("192.0.2.10", "::ffff:192.0.2.10"),
    ("gpu-a.example.com", "GPU-A.example.com"),
])
def test_one_address_in_two_pools_under_two_spellings_is_refused(tmp_path: Path, first: str, second: str) -> None:
    err = refused(tmp_path, _two_pools(first, second), "gpufleet:pools[1].hosts[1].address",
                  "is in pools system and gpu (gpufleet:pools[0].hosts[0].address is the same address")
    assert err["value"] == second and f", written {first})" in err["message"]


def test_distinct_addresses_still_pass(tmp_path: Path) -> None:
    accepted(tmp_path, _two_pools("2001:db8::a", "2001:db8::b"))


def test_one_host_name_twice_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, GOOD.replace("name: gpu-1", "name: sys-0"), "gpufleet:pools[1].hosts[1].name",
            "host sys-0 is in pools system and gpu (gpufleet:pools[0].hosts[0].name is the same name)")


# --- workload namespaces ---------------------------------------------------------------------------------------

def _namespaces(*names: str) -> str:
    return HEAD + f"  gpufleet:workloadNamespaces: [{', '.join(names)}]\n" + POOLS


def test_a_workload_namespace_listed_twice_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, _namespaces("training", "research", "training"), "gpufleet:workloadNamespaces[2]",
            "listed twice: gpufleet:workloadNamespaces[0] is training too")


def _platform_namespaces() -> list[str]:
    from gpufleet.catalog.charts import CHARTS
    from gpufleet.infra.charts import GPUFLEET_NAMESPACE

    # Every chart's namespace (kube-system is refused earlier, as a Kubernetes system namespace).
    return sorted({c.namespace for c in CHARTS.values()} - {"kube-system"} | {GPUFLEET_NAMESPACE})


@pytest.mark.parametrize("namespace", _platform_namespaces())
def test_a_workload_namespace_equal_to_a_platform_namespace_is_refused(tmp_path: Path, namespace: str) -> None:
    refused(tmp_path, _namespaces("training", namespace), "gpufleet:workloadNamespaces[1]",
            f"{namespace} is a platform namespace gpufleet installs into")


def test_platform_namespaces_come_from_the_chart_catalog() -> None:
    from gpufleet.infra.charts import GPU_OPERATOR_NAMESPACE, KUEUE_NAMESPACE, PLATFORM_NAMESPACES

    assert {"gpu-operator", GPU_OPERATOR_NAMESPACE, KUEUE_NAMESPACE, "gpufleet"} <= PLATFORM_NAMESPACES


# --- networks --------------------------------------------------------------------------------------------------

def _networks(body: str) -> str:
    return HEAD + f"  gpufleet:networks: {{{body}}}\n" + POOLS


@pytest.mark.parametrize(("body", "key", "fragment"), [
    ('data_cidr: "0.0.0.0/0"', "gpufleet:networks.data_cidr", "a /0 is every address"),
    ('data_cidr: "::/0"', "gpufleet:networks.data_cidr", "a /0 is every address"),
    ('management_cidr: "0.0.0.0/0", data_cidr: "198.51.100.0/24"', "gpufleet:networks.management_cidr",
     "a /0 is every address"),
    ('management_cidr: "192.0.2.0/24", data_cidr: "192.0.2.0/24"', "gpufleet:networks.data_cidr",
     "is the management network (gpufleet:networks.management_cidr = 192.0.2.0/24)"),
    ('management_cidr: "192.0.2.0/24", data_cidr: "192.0.2.7/24"', "gpufleet:networks.data_cidr",
     "is the management network"),
    ('management_cidr: "10.0.0.0/8", data_cidr: "10.1.0.0/16"', "gpufleet:networks.data_cidr",
     "overlaps the management network 10.0.0.0/8"),
    ('management_cidr: "2001:db8::/48", data_cidr: "2001:db8:0:1::/64"', "gpufleet:networks.data_cidr",
     "overlaps the management network"),
])
def test_catch_all_and_overlapping_networks_are_refused(tmp_path: Path, body: str, key: str, fragment: str) -> None:
    refused(tmp_path, _networks(body), key, fragment)


def test_separate_networks_pass(tmp_path: Path) -> None:
    accepted(tmp_path, _networks('management_cidr: "192.0.2.0/24", data_cidr: "198.51.100.0/24"'))


# --- MIG strategy and the catalog ------------------------------------------------------------------------------

@pytest.mark.parametrize("strategy", ["single", "mixed"])
def test_a_mig_strategy_on_gpus_without_mig_is_refused(tmp_path: Path, strategy: str) -> None:
    from gpufleet.catalog import GPUS

    no_mig = sorted(k for k, m in GPUS.items() if not m.mig)
    assert no_mig, "the catalog has a GPU without MIG"
    text = HEAD + f"  gpufleet:migStrategy: {strategy}\n" + \
        POOLS.replace("h100-sxm5-80gb", no_mig[0])
    f = _stack(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_spec(str(f))
    problems = [p for p in e.value.problems if p.key == "gpufleet:migStrategy"]
    assert len(problems) == 1 and problems[0].value == strategy
    assert f"no GPU pool has a GPU with MIG (GPU pools: gpu ({no_mig[0]})" in problems[0].rule
    assert "migStrategy: none" in problems[0].fix


def test_a_mig_strategy_on_mig_gpus_passes(tmp_path: Path) -> None:
    accepted(tmp_path, HEAD + "  gpufleet:migStrategy: mixed\n" + POOLS)


# --- paths: normalised before the blocklist, '..' refused -----------------------------------------------------

def _scratch(path: str) -> str:
    return HEAD + f'  gpufleet:storage: {{local_nvme: {{mount_path: "{path}"}}}}\n' + POOLS


@pytest.mark.parametrize("path", ["/usr/", "/usr//", "//usr", "/usr/.", "/./usr", "/", "//", "/etc", "/boot/"])
def test_scratch_on_a_system_directory_is_refused_in_any_spelling(tmp_path: Path, path: str) -> None:
    refused(tmp_path, _scratch(path), "gpufleet:storage.local_nvme.mount_path", "is a system directory")


@pytest.mark.parametrize("path", ["/x/../usr", "/scratch/..", "/../usr", "/scratch/../../etc"])
def test_dot_dot_in_a_mount_path_is_refused(tmp_path: Path, path: str) -> None:
    refused(tmp_path, _scratch(path), "gpufleet:storage.local_nvme.mount_path", "a '..' segment")


def _lustre(datasets: str, checkpoints: str, subdir: str = "/datasets") -> str:
    return HEAD + ("  gpufleet:storage:\n    lustre:\n      mgs_nids: [10.0.0.5@o2ib]\n"
                   f'      datasets: {{mount_path: "{datasets}", subdir: "{subdir}", capacity_gib: 1024}}\n'
                   f'      checkpoints: {{mount_path: "{checkpoints}", capacity_gib: 1024}}\n') + POOLS


@pytest.mark.parametrize(("text", "key", "fragment"), [
    (_lustre("/lustre/../usr", "/lustre/checkpoints"), "gpufleet:storage.lustre.datasets.mount_path", "'..'"),
    (_lustre("/usr/", "/lustre/checkpoints"), "gpufleet:storage.lustre.datasets.mount_path",
     "is a system directory"),
    (_lustre("/lustre/datasets", "/lustre/checkpoints", "/datasets/../../x"),
     "gpufleet:storage.lustre.datasets.subdir", "'..'"),
])
def test_lustre_paths_are_normalised_and_leave_no_root(tmp_path: Path, text: str, key: str, fragment: str) -> None:
    refused(tmp_path, text, key, fragment)


def test_paths_are_stored_in_their_one_spelling(tmp_path: Path) -> None:
    """Trailing-slash and ``//`` variants are one path: stored normalised, the role's separate-mount check and
    the inventory compare what the kernel mounts."""
    f = _stack(tmp_path, _lustre("/lustre//datasets/", "/lustre/./checkpoints", "//datasets/"))
    lustre = load_spec(str(f)).storage.lustre
    assert lustre is not None
    assert (lustre.datasets.mount_path, lustre.datasets.subdir, lustre.checkpoints.mount_path) == (
        "/lustre/datasets", "/datasets", "/lustre/checkpoints")
    f = _stack(tmp_path, _lustre("/lustre/data/", "/lustre/data"))
    lustre = load_spec(str(f)).storage.lustre
    assert lustre is not None and lustre.datasets.mount_path == lustre.checkpoints.mount_path == "/lustre/data"


def test_scratch_on_a_lustre_mount_point_is_refused_in_any_spelling(tmp_path: Path) -> None:
    text = _lustre("/lustre/datasets", "/lustre/checkpoints").replace(
        "  gpufleet:storage:\n", '  gpufleet:storage:\n    local_nvme: {mount_path: "/lustre//datasets/"}\n')
    refused(tmp_path, text, "gpufleet:storage.local_nvme.mount_path",
            "is the mount path of the Lustre datasets volume")


def test_system_paths_are_the_roles_list() -> None:
    import yaml

    from gpufleet import REPO_ROOT
    from gpufleet.spec import system_paths

    vars_file = REPO_ROOT / "roles" / "local_scratch" / "vars" / "main.yml"
    assert list(system_paths()) == yaml.safe_load(vars_file.read_text())["local_scratch_system_paths"]
    assert {"/", "/usr", "/boot", "/etc", "/var", "/home", "/tmp"} <= set(system_paths())
    preflight = (REPO_ROOT / "roles" / "local_scratch" / "tasks" / "preflight.yml").read_text()
    assert "not in local_scratch_system_paths" in preflight and "'/usr'" not in preflight


def test_the_roles_preflight_refuses_every_spelling_of_a_system_directory(tmp_path: Path) -> None:
    """The role compares the path as written with its list, so it refuses a path that is not in its one
    spelling (inventories written by hand never went through the stack's normalisation)."""
    from tests.ansible_local import local_host, run_playbook

    lsblk = str(Path(__file__).parent / "fixtures" / "lsblk" / "dgx-h100_8-empty-u2.json")
    paths = {"usr-slash": "/usr/", "dot-dot": "/x/../usr", "usr": "/usr", "double": "//usr", "etc": "/etc",
             "good": "/scratch", "good-nested": "/data/scratch"}
    hosts = {name: local_host(local_scratch_mount_path=path, local_scratch_lsblk_json_file=lsblk,
                              ansible_become=False) for name, path in paths.items()}
    res = run_playbook(tmp_path, "local_scratch_preflight.yml", {"all": {"hosts": hosts}})
    log = " ".join(res.stdout.split())
    assert res.returncode == 2, res.stdout + res.stderr  # the refused hosts fail, the good ones plan
    for name, path in paths.items():
        refused_here = f"local_scratch: local_scratch_mount_path={path}," in log
        assert refused_here == (not name.startswith("good")), (name, res.stdout)
    recap = [ln.split() for ln in res.stdout.splitlines() if ln.startswith("good")]
    assert len(recap) == 2 and all("failed=0" in r for r in recap), recap


@pytest.mark.parametrize("second", ["/dev/nvme2n1", "/dev//nvme2n1", "/dev/./nvme2n1", "/dev/nvme2n1/"])
def test_one_drive_listed_twice_is_refused_in_any_spelling(tmp_path: Path, second: str) -> None:
    text = HEAD + f'  gpufleet:storage: {{local_nvme: {{devices: [/dev/nvme2n1, "{second}"]}}}}\n' + POOLS
    refused(tmp_path, text, "gpufleet:storage.local_nvme.devices[1]",
            "listed twice: gpufleet:storage.local_nvme.devices[0] is the same drive")


@pytest.mark.parametrize("path", ["/dev/../etc/passwd", "/dev/nvme0n1/.."])
def test_a_device_path_that_leaves_dev_is_refused(tmp_path: Path, path: str) -> None:
    text = HEAD + f'  gpufleet:storage: {{local_nvme: {{devices: ["{path}"]}}}}\n' + POOLS
    refused(tmp_path, text, "gpufleet:storage.local_nvme.devices[0]", "'..'")


def test_a_taint_key_and_effect_twice_in_a_pool_is_refused(tmp_path: Path) -> None:
    pools = POOLS.replace("      gpu: h100-sxm5-80gb\n", "      gpu: h100-sxm5-80gb\n      taints: [{key: example.com/"
                          "team, value: a}, {key: example.com/team, value: b}, {key: example.com/team, "
                          "effect: NoExecute}]\n")
    refused(tmp_path, HEAD + pools, "gpufleet:pools[1].taints[1]",
            "pool gpu has this key and effect twice (gpufleet:pools[1].taints[0])")


def test_no_workload_namespace_is_refused(tmp_path: Path) -> None:
    # bench-render took the first workload namespace: an empty list was an IndexError traceback.
    text = HEAD + "  gpufleet:workloadNamespaces: []\n" + POOLS
    refused(tmp_path, text, "gpufleet:workloadNamespaces", "at least 1 item")
    f = _stack(tmp_path, text)
    contract_error(["bench", "bench-render", "--stack", str(f), "--out", str(tmp_path / "b"), "--no-check"],
                   "gpufleet:workloadNamespaces")


def test_a_stack_without_pools_is_refused(tmp_path: Path) -> None:
    # The old code accepted it: `plan` declared nothing and exited 0, `lock check` called it valid.
    refused(tmp_path, HEAD + "  gpufleet:pools: []\n", "gpufleet:pools", "at least 1 item")
