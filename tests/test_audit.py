"""``gpufleet audit`` (issue 28 points 1-3): read-only collector, facts through the existing parsers, findings,
proposed stack, CLI contract. Fixtures: tests/fixtures/audit (built from ../shared/fixtures/real, see SOURCES.md)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from gpufleet import REPO_ROOT
from gpufleet.audit import build_facts, find_all
from gpufleet.audit.collect import AUDIT_PLAYBOOK, Collected, from_stats, read_facts_dir, run_audit
from gpufleet.audit.facts import (
    HostFacts,
    Package,
    parse_apt_config,
    parse_apt_policy,
    parse_apt_sources,
    parse_dropins,
    same_uri,
)
from gpufleet.audit.findings import gpufleet_source
from gpufleet.audit.reads import MISSING, RawRead, managed_sysctls, playbook_vars, reads
from gpufleet.cli import app
from gpufleet.lock import load_lock

FIXTURES = REPO_ROOT / "tests" / "fixtures" / "audit"
CLEAN, FLEET, FOREIGN = FIXTURES / "clean", FIXTURES / "fleet", FIXTURES / "foreign"
#: The one definition of the sandbox's foreign kinds (issue 28 point 5), made by molecule/shared/foreign.yml.
FOREIGN_KINDS = REPO_ROOT / "molecule" / "shared" / "foreign_kinds.yml"
SHARED = REPO_ROOT.parent / "shared" / "fixtures" / "real"
REPO = "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64"
runner = CliRunner()


def facts_of(path: Path) -> list[HostFacts]:
    c = read_facts_dir(path)
    return [build_facts(h, raw, pool=c.pools.get(h)) for h, raw in sorted(c.raw.items())]


def audit(*args: str) -> tuple[int, dict[str, Any]]:
    res = runner.invoke(app, ["audit", *args, "--json"])
    assert "Traceback" not in res.output
    return res.exit_code, json.loads(res.stdout)


# --- facts: the existing parsers read the real captures ---------------------------------------------------------

def test_facts_come_from_the_real_captures_through_the_existing_parsers() -> None:
    f = {x.host: x for x in facts_of(FLEET)}
    k = f["keyring-a"]
    assert k.os == "Ubuntu 22.04.4 LTS" and k.kernel == "5.15.0-105-generic"
    assert k.smi is not None and k.smi.driver_version == "535.54.03" and k.gpu_model == "a100-sxm4-80gb"
    assert k.topology is not None and k.topology.gpu_count == 8 and len(k.topology.nic_labels) == 12  # DGX A100
    assert {p.ca for p in k.ib_ports} >= {"mlx5_0", "mlx5_1"} and k.fabric == "infiniband"
    assert k.versions() == {"driver": "535.54.03", "cuda": "12.1.1", "nccl": "2.17.1-1+cuda12.1"}
    assert k.packages["libnccl2"].origin == REPO and not k.packages["libnccl2"].held
    # Which keyring apt checks it with: both, since two sources name the repository (the conflict below).
    assert k.keyring(k.packages["libnccl2"]) == ("/etc/apt/keyrings/cuda-archive-keyring.asc, "
                                                 "/usr/share/keyrings/cuda-archive-keyring.gpg")
    assert k.memlock["* hard"] == "unlimited"
    assert f["legacy-a"].gpu_model == "a100-sxm4-40gb" and f["legacy-a"].versions()["driver"] == "510.47.03"
    assert f["messy-b"].run_install == ["/usr/bin/nvidia-uninstall", "/var/log/nvidia-installer.log"]


def test_a_host_without_nvidia_smi_is_still_audited() -> None:
    login = {x.host: x for x in facts_of(CLEAN)}["login-0"]
    assert login.smi is None and login.gpu_count == 0
    assert login.problems == ["no nvidia-smi on the host (GPUs not audited)"]
    assert login.os == "Ubuntu 22.04.4 LTS" and login.apt_sources


def test_apt_sources_one_line_and_deb822_with_options() -> None:
    text = (f"/etc/apt/sources.list.d/a.list:deb [signed-by=/usr/share/keyrings/k.gpg arch=amd64] {REPO}/ /\n"
            "/etc/apt/sources.list.d/b.sources:Types: deb\n"
            f"/etc/apt/sources.list.d/b.sources:URIs: {REPO}/\n"
            "/etc/apt/sources.list.d/b.sources:Suites: /\n"
            "/etc/apt/sources.list.d/b.sources:Trusted: yes\n"
            "/etc/apt/sources.list.d/b.sources:\n"
            "/etc/apt/sources.list.d/c.list:# deb [trusted=yes] http://example.invalid/ x main\n")
    entries = parse_apt_sources(text)
    assert [(e.file.rsplit("/", 1)[1], e.signed_by, e.insecure) for e in entries] == [
        ("a.list", "/usr/share/keyrings/k.gpg", ()), ("b.sources", None, ("trusted",))]
    assert entries[0].repository == entries[1].repository == f"{REPO} /"


def test_apt_policy_origin_of_the_installed_version() -> None:
    text = ("libnccl2:\n  Installed: 2.21.5-1+cuda12.4\n  Candidate: 2.23.4-1+cuda12.6\n  Version table:\n"
            "     2.23.4-1+cuda12.6 600\n        600 https://other.example/repo  Packages\n"
            " *** 2.21.5-1+cuda12.4 600\n        600 https://nvidia.example/repo  Packages\n"
            "        100 /var/lib/dpkg/status\n"
            "nvidia-utils-535:\n  Installed: 535.54.03-0ubuntu1\n  Candidate: 535.54.03-0ubuntu1\n"
            "  Version table:\n *** 535.54.03-0ubuntu1 100\n        100 /var/lib/dpkg/status\n")
    assert parse_apt_policy(text) == {"libnccl2": "https://nvidia.example/repo", "nvidia-utils-535": "local"}


def test_apt_config_unattended_upgrades() -> None:
    on = 'APT::Periodic::Unattended-Upgrade "1";\nUnattended-Upgrade::Package-Blacklist "";\n' \
         'Unattended-Upgrade::Package-Blacklist:: "nvidia-";\nUnattended-Upgrade::Package-Blacklist:: "libnccl";\n'
    assert parse_apt_config(on) == (True, ["nvidia-", "libnccl"])
    assert parse_apt_config('APT::Periodic::Unattended-Upgrade "0";\n') == (False, [])


# --- findings: each fires on the host that has the problem, none on the clean fixture ---------------------------

def test_the_clean_fixture_has_no_finding() -> None:
    facts = facts_of(CLEAN)
    assert len(facts) == 3
    assert find_all(facts) == []


def test_an_unheld_package_whose_version_does_not_follow_the_driver_is_no_finding() -> None:
    # libxnvctrl0 comes with hwloc's plugins (Slurm, PMIx) from Debian's main archive at its own version; the
    # sandbox image carries it, and converge does not hold it (the lock's NVIDIA_UNPINNED_PATTERN).
    clean = facts_of(CLEAN)
    gpu = next(h for h in clean if h.smi is not None)
    gpu.packages["libxnvctrl0"] = Package("libxnvctrl0", "525.85.05-3~deb12u1", held=False, origin="local")
    assert "libxnvctrl0" in gpu.nvidia_packages
    assert find_all(clean) == []
    gpu.packages["libnvidia-ml1"] = Package("libnvidia-ml1", "535.261.03-1~deb12u1", held=False, origin="local")
    assert [f.message for f in find_all(clean) if f.id == "unheld-packages"] == [
        "1 NVIDIA package(s) not held: libnvidia-ml1"]


@pytest.mark.parametrize(("finding", "severity", "hosts", "text"), [
    ("version-skew", "warning", ("keyring-a", "messy-b"), "cuda differs within pool messy: 12.1.1 on keyring-a; "
                                                          "12.4.1 on messy-b"),
    ("version-skew", "warning", ("keyring-a", "messy-b"), "kernel differs within pool messy"),
    ("lock-refused", "error", ("legacy-a",), "CUDA 12.4.1 needs driver >= 550.54.15"),
    ("unheld-packages", "warning", ("keyring-a",), "4 NVIDIA package(s) not held: cuda-toolkit-12-1, libnccl2"),
    ("unattended-upgrades", "warning", ("keyring-a",), "unattended-upgrades is on and may replace"),
    ("persistence-off", "warning", ("keyring-a",), "persistence mode off on GPU 0"),
    ("power-limit-skew", "warning", ("keyring-a", "messy-b"), "400 W on messy-b GPU0; 500 W on keyring-a GPU0"),
    ("numa-balancing", "warning", ("keyring-a",), "kernel.numa_balancing = 1"),
    ("shared-filesystem", "warning", ("messy-b",), "one file system (198.51.100.5@o2ib:/ai)"),
    ("rdma-without-peermem", "warning", ("keyring-a",), "nvidia_peermem is not loaded"),
    ("source-conflict", "error", ("keyring-a",), 'Conflicting values set for option Signed-By'),
    ("source-conflict", "error", ("messy-b",), "/etc/apt/sources.list.d/cuda-copy.list (no signed-by, trusted)"),
    ("source-unsigned", "security", ("messy-b",), "trusted=yes on " + REPO),
    ("run-installer", "warning", ("messy-b",), "NVIDIA's .run installer"),
])
def test_each_finding_fires_where_the_problem_is(finding: str, severity: str, hosts: tuple[str, ...],
                                                 text: str) -> None:
    found = [f for f in find_all(facts_of(FLEET)) if f.id == finding and f.hosts == hosts and text in f.message]
    assert found, [(f.id, f.hosts, f.message) for f in find_all(facts_of(FLEET)) if f.id == finding]
    assert found[0].severity == severity and found[0].fix


def test_findings_are_sorted_security_first_and_only_planted_ones() -> None:
    found = find_all(facts_of(FLEET))
    assert found[0].id == "source-unsigned"
    # legacy-a only breaks the lock's rules: nothing else is planted there.
    assert {f.id for f in found if "legacy-a" in f.hosts} == {"lock-refused"}


def test_conflicting_sources_use_the_drift_security_grammar() -> None:
    # A deb822 stanza whose URI differs only by the trailing slash is the same repository for apt.
    f = facts_of(FLEET)[0]
    assert f.host == "keyring-a"
    assert {e.repository for e in f.apt_sources if "nvidia" in e.uri} == {f"{REPO} /"}


# --- foreign kinds (issue 28 point 5): each difference named -------------------------------------------------------

@pytest.mark.parametrize(("finding", "host", "text"), [
    # (a) NVIDIA's install guide: the cuda-keyring source alone (gpufleet's file name, another keyring).
    ("foreign-source", "guide-0", "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list (/, signed-by "
                                  "/usr/share/keyrings/cuda-archive-keyring.gpg)"),
    ("unheld-packages", "guide-0", "3 NVIDIA package(s) not held: cuda-drivers-535"),
    ("persistence-off", "guide-0", "persistence mode off on GPU 0"),
    # (b) Debian's own driver: its archive named as the origin, the older version in the pool's skew.
    ("foreign-source", "debian-0", "4 NVIDIA package(s) installed from http://deb.debian.org/debian, a source "
                                   "gpufleet did not write (/etc/apt/sources.list (bookworm, no signed-by)"),
    ("unheld-packages", "debian-0", "not held: libcuda1, libnvidia-ml1, nvidia-alternative, nvidia-smi"),
    ("version-skew", "debian-0", "driver differs within pool foreign: 535.261.03 on debian-0; 535.54.03 on guide-0; "
                                 "570.172.08 on role-0"),
    # (c) NVIDIA's Ansible role: one package at a version, the driver it pulled newer; persistenced override.
    ("driver-package-skew", "role-0", "driver packages at 2 versions (570.133.20: cuda-drivers-570; 570.172.08: "
                                      "nvidia-driver-570-open, nvidia-utils-570)"),
    ("unit-override", "role-0", "nvidia-persistenced.service runs with a drop-in gpufleet does not write: "
                                "/etc/systemd/system/nvidia-persistenced.service.d/override.conf (ExecStart=; "
                                "ExecStart=/usr/bin/nvidia-persistenced --verbose)"),
    ("foreign-source", "role-0", "/usr/share/keyrings/cuda-archive-keyring.gpg"),
])
def test_each_foreign_kind_difference_is_named(finding: str, host: str, text: str) -> None:
    found = [f for f in find_all(facts_of(FOREIGN)) if f.id == finding and host in f.hosts and text in f.message]
    assert found, [(f.id, f.hosts, f.message) for f in find_all(facts_of(FOREIGN)) if f.id == finding]
    assert found[0].severity == "warning" and found[0].fix


def test_foreign_kinds_get_only_their_findings() -> None:
    found = find_all(facts_of(FOREIGN))
    per_host = {h: {f.id for f in found if h in f.hosts} - {"version-skew", "lock-refused"}
                for h in ("guide-0", "debian-0", "role-0")}
    assert per_host == {
        "guide-0": {"foreign-source", "unheld-packages", "persistence-off"},
        "debian-0": {"foreign-source", "unheld-packages"},
        "role-0": {"foreign-source", "unheld-packages", "driver-package-skew", "unit-override"}}


def test_gpufleets_own_sources_are_not_foreign() -> None:
    # gpufleet's keyring (roles/nvidia_repo's default) or a gpufleet- file or keyring; cuda-keyring's same file name
    # with its own keyring is not gpufleet's.
    cuda = "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list"
    entries = parse_apt_sources(
        f"{cuda}:deb [signed-by=/etc/apt/keyrings/cuda-archive-keyring.asc] {REPO}/ /\n"
        f"{cuda}:deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {REPO}/ /\n"
        "/etc/apt/sources.list.d/gpufleet-nvidia-distro.sources:Types: deb\n"
        "/etc/apt/sources.list.d/gpufleet-nvidia-distro.sources:URIs: http://deb.debian.org/debian\n"
        "/etc/apt/sources.list.d/gpufleet-nvidia-distro.sources:Suites: bookworm\n"
        "/etc/apt/sources.list.d/gpufleet-nvidia-distro.sources:Components: non-free\n")
    assert [gpufleet_source(e) for e in entries] == [True, False, True]
    # apt-cache policy prints file:///srv/x/ as file:/srv/x (the sandbox's fixture repository).
    assert same_uri("file:///srv/gpufleet-repo/ubuntu2204/x86_64/", "file:/srv/gpufleet-repo/ubuntu2204/x86_64")
    assert not same_uri("http://deb.debian.org/debian", "http://deb.debian.org/debian-security")


def test_clean_and_converged_hosts_have_no_foreign_finding() -> None:
    # gpufleet's source (and a second one for the same repository, which is the conflict) is no foreign origin.
    ids = {f.id for f in find_all(facts_of(CLEAN) + facts_of(FLEET))}
    assert not ids & {"foreign-source", "driver-package-skew", "unit-override"}


def test_dropins_read_without_comments() -> None:
    text = "/etc/systemd/system/x.service.d/a.conf:[Service]\n/etc/systemd/system/x.service.d/a.conf:# why\n" \
           "/etc/systemd/system/x.service.d/a.conf:ExecStart=\n/etc/systemd/system/x.service.d/a.conf:\n"
    assert parse_dropins(text) == {"/etc/systemd/system/x.service.d/a.conf": ["[Service]", "ExecStart="]}


def test_a_gpufleet_named_dropin_is_not_an_override() -> None:
    raw = {k: RawRead(0, "") for k in ("dpkg",)}
    raw["unit_dropins"] = RawRead(0, "/etc/systemd/system/nvidia-persistenced.service.d/gpufleet-x.conf:[Service]\n")
    assert not [f for f in find_all([build_facts("h", raw)]) if f.id == "unit-override"]


def test_the_foreign_kinds_definition_is_plain_data_the_audit_and_docs_know() -> None:
    text = FOREIGN_KINDS.read_text()
    assert "{{" not in text and "{%" not in text, "plain data: values reach Ansible as written"
    kinds: dict[str, Any] = yaml.safe_load(text)
    assert set(kinds) == {"cuda_keyring", "debian_nonfree", "nvidia_role"}
    fields = {"title", "keyrings", "sources", "install", "sources_after", "files", "services", "gpu_standin",
              "expect", "adopt"}
    emitted = set(re.findall(r'Finding\("([a-z-]+)"', (REPO_ROOT / "gpufleet" / "audit" / "findings.py").read_text()))
    docs = (REPO_ROOT / "docs" / "audit.md").read_text()
    for name, kind in kinds.items():
        assert set(kind) == fields, name
        assert set(kind["expect"]) <= emitted, name
        assert f"`{name}`" in docs, f"docs/audit.md does not describe foreign kind {name}"
        # Nothing held or pinned: a kind installs by name or name=version only.
        assert all(re.fullmatch(r"[a-z0-9][a-z0-9.+-]*(=[A-Za-z0-9.+~:-]+)?", p) for p in kind["install"]), name
    for fid in emitted:
        assert f"`{fid}`" in docs, f"docs/audit.md does not explain finding {fid}"
    # The maker reads every field that makes state (title and expect are for people and the verifier).
    maker = (REPO_ROOT / "molecule" / "shared" / "foreign.yml").read_text()
    assert set(re.findall(r"__kind\.([a-z_]+)", maker)) == fields - {"title", "expect", "adopt"}


# --- proposed stack -------------------------------------------------------------------------------------------

def test_proposed_stack_is_accepted_by_lock_check(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.adopted.yaml"
    code, data = audit("--facts", str(CLEAN), "--write-stack", str(path))
    assert code == 0 and data["proposed_stack"]["written"] == str(path)
    spec, lock = load_lock(str(path))
    assert spec.backend == "existing" and lock.profile == "a100-cuda12.4"
    (pool,) = spec.gpu_pools
    assert pool.gpu == "a100-sxm4-80gb" and [h.name for h in pool.hosts] == ["clean-a", "clean-b"]
    assert pool.power_limit == "500" and pool.fabric == "infiniband"
    text = path.read_text()
    assert "#   driver: 535.54.03 -> 550.163.01" in text and "left out: login-0" in text
    res = runner.invoke(app, ["lock", "check", "--stack", str(path)])
    assert res.exit_code == 0, res.output


def test_proposed_stack_groups_hosts_by_hardware(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.fleet.yaml"
    code, _ = audit("--facts", str(FLEET), "--write-stack", str(path))
    assert code == 2
    spec, _ = load_lock(str(path))
    assert {p.gpu: sorted(h.name for h in p.hosts) for p in spec.gpu_pools} == {
        "a100-sxm4-40gb": ["legacy-a"], "a100-sxm4-80gb": ["keyring-a", "messy-b"]}
    # Power limits differ in the 80 GB pool: none proposed (the finding says so), the 40 GB pool keeps its 400 W.
    assert {p.gpu: p.power_limit for p in spec.gpu_pools} == {"a100-sxm4-40gb": "400", "a100-sxm4-80gb": None}


def test_nothing_is_written_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    before = sorted(p.name for p in (REPO_ROOT / "stacks").iterdir())
    code, data = audit("--facts", str(CLEAN))
    assert code == 0 and data["proposed_stack"]["written"] is None
    assert sorted(p.name for p in (REPO_ROOT / "stacks").iterdir()) == before and list(tmp_path.iterdir()) == []


def test_write_stack_never_overwrites(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.mine.yaml"
    path.write_text("config: {}\n")
    code, data = audit("--facts", str(CLEAN), "--write-stack", str(path))
    assert code == 1 and data["error"]["kind"] == "output problem" and data["error"]["key"] == "--write-stack"
    assert path.read_text() == "config: {}\n"


@pytest.mark.skipif(not SHARED.is_dir(), reason=f"reference data folder {SHARED} is absent")
def test_a_gpu_outside_the_catalog_is_audited_but_left_out_of_the_stack(tmp_path: Path) -> None:
    # Real capture: a GeForce RTX 3060 (telegraf testdata); gpufleet's catalog has no entry, so no lock rule applies.
    facts = tmp_path / "f"
    shutil.copytree(CLEAN / "clean-a", facts / "rtx-0")
    shutil.copy(SHARED / "nvidia-smi-xml" / "rtx-3060_driver570.124.04_telegraf.xml", facts / "rtx-0" / "smi_xml.txt")
    code, data = audit("--facts", str(facts))
    assert code == 0 and data["findings"] == []
    assert data["hosts"][0]["gpu"] == {"name": "NVIDIA GeForce RTX 3060", "model": None, "count": 1}
    assert data["proposed_stack"]["profile"] is None and data["proposed_stack"]["left_out"] == [
        "rtx-0: GPU NVIDIA GeForce RTX 3060 is not in gpufleet's catalog"]
    code, err = audit("--facts", str(facts), "--write-stack", str(tmp_path / "Pulumi.x.yaml"))
    assert code == 1 and err["error"]["kind"] == "output problem" and not (tmp_path / "Pulumi.x.yaml").exists()


def test_write_stack_needs_a_stack_name(tmp_path: Path) -> None:
    code, err = audit("--facts", str(CLEAN), "--write-stack", str(tmp_path / "My_Stack.yaml"))
    assert code == 1 and err["error"]["kind"] == "invalid option" and "DNS-1123" in err["error"]["message"]
    assert not (tmp_path / "My_Stack.yaml").exists()


# --- CLI: error contract, per-host failures, report folder -------------------------------------------------------

@pytest.mark.parametrize(("args", "kind"), [
    ((), "invalid option"),
    (("--facts", str(CLEAN), "--stack", "local"), "invalid option"),
    (("--facts", "/nonexistent/audit"), "input error"),
    (("-i", "/nonexistent/inventory.yml"), "input error"),
])
def test_json_error_contract(args: tuple[str, ...], kind: str) -> None:
    code, data = audit(*args)
    assert code == 1 and data["error"]["kind"] == kind and data["error"]["fix"]


def test_a_stack_without_inventory_is_the_contracts_error() -> None:
    # onprem-h100 is an example stack: no inventories/onprem-h100 exists until `gpufleet up` wrote it.
    code, data = audit("--stack", "onprem-h100")
    assert code == 1 and data["error"]["kind"] == "missing inventory" and "gpufleet up" in data["error"]["fix"]


def test_a_bad_rc_file_is_an_input_error(tmp_path: Path) -> None:
    shutil.copytree(CLEAN, tmp_path / "f")
    (tmp_path / "f" / "clean-a" / "topo.rc").write_text("boom\n")
    code, data = audit("--facts", str(tmp_path / "f"))
    assert code == 1 and data["error"]["file"].endswith("clean-a/topo.rc")


def test_a_failed_host_is_reported_and_the_others_finish(tmp_path: Path) -> None:
    shutil.copytree(CLEAN, tmp_path / "f")
    (tmp_path / "f" / "down-0").mkdir()
    (tmp_path / "f" / "down-0" / "failed").write_text("unreachable\n")
    code, data = audit("--facts", str(tmp_path / "f"))
    assert code == 1
    assert data["failed_hosts"] == {"down-0": "unreachable"}
    assert [h["host"] for h in data["hosts"]] == ["clean-a", "clean-b", "login-0"]


def test_text_output_has_progress_table_and_findings() -> None:
    res = runner.invoke(app, ["audit", "--facts", str(FLEET)])
    assert res.exit_code == 2
    assert "keyring-a: audited" in res.output and "gpufleet audit" in res.output
    assert "[security] source-unsigned messy-b" in res.output


def test_report_folder_saves_raw_reads_that_audit_again(tmp_path: Path) -> None:
    out = tmp_path / "report"
    code, data = audit("--facts", str(FLEET), "--report", str(out))
    assert code == 2
    saved = json.loads((out / "audit.json").read_text())
    assert saved["findings"] == data["findings"]
    assert yaml.safe_load((out / "Pulumi.proposed.yaml").read_text())["config"]["gpufleet:backend"] == "existing"
    code2, again = audit("--facts", str(out / "raw"))
    assert code2 == 2 and again["findings"] == data["findings"]
    # A folder gpufleet did not write is refused (gpufleet.outdir).
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine")
    code3, err = audit("--facts", str(FLEET), "--report", str(foreign))
    assert code3 == 1 and err["error"]["kind"] == "output folder problem"


# --- the collector: read-only by construction -------------------------------------------------------------------

#: Programs a read may run: each only reads (no option of theirs used here writes).
READ_ONLY = {"cat", "uname", "dpkg-query", "apt-mark", "grep", "apt-config", "stat", "nvidia-smi", "ibdev2netdev",
             "ibstat", "ls", "sysctl", "systemctl"}


def test_reads_only_run_read_only_programs() -> None:
    for key, r in reads().items():
        assert r.argv[0] in READ_ONLY, key
    assert reads()["holds"].argv == ("apt-mark", "showhold")
    assert reads()["services"].argv[1] == "is-active"
    assert all("=" not in a for a in reads()["sysctl"].argv[1:]), "sysctl NAME=VALUE would write"
    assert managed_sysctls()[0] == "kernel.numa_balancing" and "vm.max_map_count" in managed_sysctls()
    # apt-cache as root would rewrite /var/cache/apt/*.bin: the cache file names are emptied.
    argv = playbook_vars()["gpufleet_audit_apt_policy_argv"]
    assert argv[0] == "apt-cache" and argv[-1] == "policy"
    assert "Dir::Cache::pkgcache=" in argv and "Dir::Cache::srcpkgcache=" in argv


def test_playbook_tasks_only_read() -> None:
    (play,) = yaml.safe_load(AUDIT_PLAYBOOK.read_text())
    assert play["gather_facts"] is False
    for task in play["tasks"]:
        module = next(k for k in task if k.startswith("ansible.builtin."))
        assert module in ("ansible.builtin.command", "ansible.builtin.set_stats"), task["name"]
        if module == "ansible.builtin.command":
            assert set(task[module]) == {"argv"}, "argv only: no shell, no creates/removes/chdir"
            assert task["changed_when"] is False and task["failed_when"] is False and task["check_mode"] is False


def test_the_playbook_runs_and_reports_every_read(tmp_path: Path) -> None:
    # The real playbook on the controller (connection local): reads only, so safe on any machine.
    inv = tmp_path / "inventory.json"
    inv.write_text(json.dumps({"all": {"hosts": {"ctl": {
        "ansible_connection": "local", "ansible_python_interpreter": sys.executable, "gpufleet_pool": "here"}}}}))
    from gpufleet.ansible_run import run_playbook

    def with_bash(*args: Any, **kw: Any) -> Any:
        # bash stands in for an NVIDIA package so that the apt-cache policy read runs here too.
        kw["extravars"] = {**kw["extravars"], "gpufleet_audit_nvidia_package": "^bash$"}
        return run_playbook(*args, **kw)

    apt_cache = Path("/var/cache/apt")
    before = {p.name: p.stat().st_mtime_ns for p in apt_cache.glob("*")} if apt_cache.is_dir() else {}
    collected = run_audit(inv, limit=None, hosts="all", live=False, runner=with_bash)
    assert collected.failed == {} and collected.pools == {"ctl": "here"}
    # apt-cache kept its cache in memory: nothing under /var/cache/apt was written.
    assert ({p.name: p.stat().st_mtime_ns for p in apt_cache.glob("*")} if apt_cache.is_dir() else {}) == before
    raw = collected.raw["ctl"]
    assert set(reads()) <= set(raw)
    uname = subprocess.run(["uname", "-r"], capture_output=True, text=True, check=True).stdout.strip()
    assert raw["kernel"].rc == 0 and raw["kernel"].stdout.strip() == uname
    f = build_facts("ctl", raw, pool="here")
    assert f.kernel == uname and "kernel.numa_balancing" in f.sysctls
    if shutil.which("apt-cache") is not None and "bash" in f.packages:
        assert raw["apt_policy"].rc == 0 and raw["apt_policy"].stdout.startswith("bash:")
    if shutil.which("nvidia-smi") is None:
        assert raw["smi_xml"].rc == MISSING and f.smi is None


def test_from_stats_keeps_only_known_reads() -> None:
    stats = {"gpufleet_audit": {
        "a": {"pool": "p", "reads": {"kernel": {"rc": 0, "stdout": "6.1\n"}, "evil": {"rc": 0, "stdout": "x"},
                                     "smi_xml": {"rc": 2, "stdout": "", "msg": "Error executing command."}}},
        "b": "not a mapping"}}
    c = from_stats(stats)
    assert set(c.raw) == {"a"} and set(c.raw["a"]) == {"kernel", "smi_xml"} and c.pools == {"a": "p"}
    assert c.raw["a"]["smi_xml"].rc == MISSING


def test_run_audit_reports_unreachable_and_failed_hosts() -> None:
    from gpufleet.ansible_run.results import HostStats, RunResult, TaskResult

    def fake(playbook: Path, inventory: Path, **kw: Any) -> RunResult:
        assert playbook == AUDIT_PLAYBOOK and kw["extravars"]["gpufleet_audit_reads"] == \
            playbook_vars()["gpufleet_audit_reads"]
        r = RunResult(rc=4, status="failed")
        r.hosts = {"ok": HostStats(), "gone": HostStats(unreachable=1), "nosudo": HostStats(failed=1)}
        r.tasks = [TaskResult(host="nosudo", play="Audit hosts (read-only)", role=None,
                              task="Read (with sudo, reads that need root)", action="ansible.builtin.command",
                              status="failed", changed=False, msg="Missing sudo password")]
        r.custom_stats = {"gpufleet_audit": {"ok": {"pool": "", "reads": {"kernel": {"rc": 0, "stdout": "6.1"}}}}}
        return r

    c = run_audit(Path("inv"), limit=None, hosts="all", live=False, runner=fake)
    assert isinstance(c, Collected) and set(c.raw) == {"ok"}
    assert c.failed == {"gone": "unreachable",
                        "nosudo": "Read (with sudo, reads that need root): Missing sudo password"}
