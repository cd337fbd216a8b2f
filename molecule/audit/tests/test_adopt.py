"""adopt (molecule/audit/adopt.yml, after the audit's checks): converging each foreign node with the stack the audit
proposed adopts it or refuses it with one message and leaves it as it was; after the fix the refusal names, every
node converged: the lock's packages held and pinned (taken over in place where they were at the locked version),
the replaced sources kept and named in the run's summary, a second converge, a check run and the drift check find
nothing. What each kind does is molecule/shared/foreign_kinds.yml's `adopt`."""

import json
import os
import re
from pathlib import Path

import pytest
import yaml
from nodestate import assert_locked, driver_packages

from gpufleet.lock.packages import UBUNTU_REVISION

OUT = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
KINDS = yaml.safe_load((Path(__file__).resolve().parents[2] / "shared" / "foreign_kinds.yml").read_text())
FOREIGN = {"gpufleet-mol-audit-keyring": "cuda_keyring", "gpufleet-mol-audit-debian": "debian_nonfree",
           "gpufleet-mol-audit-role": "nvidia_role"}
REFUSED = {n for n, k in FOREIGN.items() if KINDS[k]["adopt"]["refused"]}
REPO = "/srv/gpufleet-repo/"
MARKER = "# Managed by gpufleet (role nvidia_repo)"
PREF = "/etc/apt/preferences.d/gpufleet-nvidia-driver.pref"


def _json(name: str) -> dict:
    return json.loads((OUT / name).read_text())


def _lock() -> dict:
    return yaml.safe_load((OUT / "adopt-lock" / "group_vars" / "all" / "versions.yml").read_text())


def _failed(run: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for f in run["failed"]:
        out.setdefault(f["host"], []).append(f["msg"] or "")
    return out


def _dpkg(when: str, node: str) -> dict[str, str]:
    """adopt_dpkg.yml's read: 'pkg <name>' -> '<version> <status>', 'list <name>' -> the file list's mtime."""
    out = {}
    for line in (OUT / f"adopt-dpkg-{when}-{node}.txt").read_text().splitlines():
        kind, name, rest = line.split(" ", 2)
        out[f"{kind} {name}"] = rest
    return out


def _foreign(host) -> tuple[str, dict]:
    node = host.backend.get_hostname()
    if node not in FOREIGN:
        pytest.skip("the gpufleet node is converged by molecule's converge")
    return node, KINDS[FOREIGN[node]]


def _audited_driver(node: str) -> str:
    h = next(h for h in json.loads((OUT / "audit.json").read_text())["hosts"] if h["host"] == node)
    return h["versions"]["driver"]


# --- the first converge with the proposed stack -----------------------------------------------------------------

def test_the_check_run_foretells_the_converge(host):
    check, converge = _json("adopt-check.json")["run"], _json("adopt-converge.json")["run"]
    assert set(_failed(check)) == set(_failed(converge)) == REFUSED, (check["failed"], converge["failed"])
    for node in set(FOREIGN) - REFUSED:
        # would change exactly where the converge changed
        assert bool(check["changed"][node]) == bool(converge["changed"][node]) is True, node


@pytest.mark.parametrize("node", sorted(REFUSED))
def test_a_kind_that_cannot_be_adopted_fails_with_one_message_and_is_left_as_it_was(host, node):
    kind = KINDS[FOREIGN[node]]
    for name in ("adopt-check.json", "adopt-converge.json"):
        run = _json(name)["run"]
        (msg,) = _failed(run)[node]
        assert kind["adopt"]["refused"] in msg and "Nothing was changed." in msg and "Fix, either:" in msg, msg
        assert "Traceback" not in json.dumps(run)
        assert run["changed"].get(node, []) == []
    # The fix adopt.yml ran is the command the message names.
    assert re.search(kind["adopt"]["fix"], msg), msg
    assert _dpkg("refused", node) == _dpkg("before", node)


def test_the_summary_names_each_replaced_source_and_its_copy(host):
    summary = _json("adopt-converge.json")["summary"]
    notices = _json("adopt-converge.json")["run"]["notices"]
    for node, kind in FOREIGN.items():
        if node in REFUSED:
            continue
        replaced = [s["path"] for s in KINDS[kind]["sources"] + KINDS[kind]["sources_after"] if REPO in s["content"]]
        assert replaced, kind
        (line,) = [n["line"] for n in notices if n["host"] == node and n["event"] == "replaced apt sources"]
        for path in replaced:
            assert f"{path} (kept as {path}.gpufleet-replaced)" in line
        assert line in summary


# --- after the fix: converged, idempotent, check and drift clean -------------------------------------------------

def test_every_foreign_node_converged_after_the_fix(host):
    run = _json("adopt-fixed.json")["run"]
    assert run["ok"] and run["failed"] == [], run["failed"]
    assert sorted(run["hosts"]) == sorted(FOREIGN)


@pytest.mark.parametrize("name", ["adopt-again.json", "adopt-check-after.json"])
def test_a_second_converge_and_a_check_run_change_nothing(host, name):
    run = _json(name)["run"]
    assert run["ok"] and sorted(run["hosts"]) == sorted(FOREIGN), run["failed"]
    assert run["changed"] == {n: [] for n in FOREIGN}, run["changed"]


def test_the_drift_check_is_clean(host):
    data = _json("adopt-drift.json")
    assert data["exit_code"] == 0 and data["report"]["items"] == [], data["report"]
    assert data["run"]["ok"] and sorted(data["run"]["hosts"]) == sorted(FOREIGN)


# --- each node -----------------------------------------------------------------------------------------------

def test_the_locked_packages_are_held_and_pinned(host):
    _foreign(host)
    lock = _lock()
    for pkg in driver_packages(lock["nvidia_driver_version"], lock["nvidia_driver_kernel_module"]):
        assert_locked(host, pkg, lock["nvidia_driver_version"] + UBUNTU_REVISION, PREF)


def test_packages_at_the_locked_version_were_taken_over_without_a_reinstall(host):
    node, _ = _foreign(host)
    lock = _lock()
    pkgs = driver_packages(lock["nvidia_driver_version"], lock["nvidia_driver_kernel_module"])
    before = _dpkg("before", node)
    if _audited_driver(node) != lock["nvidia_driver_version"]:
        # another version: moved through the upgrade path (installed anew at the lock's version)
        assert any(before.get(f"pkg {p}", "").split(" ")[0] != lock["nvidia_driver_version"] + UBUNTU_REVISION
                   for p in pkgs), node
        return
    for pkg in pkgs:
        assert before[f"pkg {pkg}"].startswith(lock["nvidia_driver_version"] + UBUNTU_REVISION + " ii"), pkg
        now = host.run("stat -c %%Y /var/lib/dpkg/info/%s.list", pkg).stdout.strip()
        assert now == before[f"list {pkg}"], f"{pkg} was reinstalled"


def test_the_replaced_sources_are_kept_and_gpufleet_s_source_stands(host):
    _, kind = _foreign(host)
    for source in kind["sources"] + kind["sources_after"]:
        if REPO not in source["content"]:
            # another repository's source (Debian's archive): not the managed repository's, left alone
            assert host.file(source["path"]).exists
            continue
        assert host.file(source["path"] + ".gpufleet-replaced").content_string == source["content"]
    active = host.run(f"grep -lsE '^[^#]*{REPO}' /etc/apt/sources.list /etc/apt/sources.list.d/*.list "
                      "/etc/apt/sources.list.d/*.sources").stdout.split()
    assert len(active) == 1 and MARKER in host.file(active[0]).content_string, active


def test_other_tools_files_are_kept_and_persistence_runs(host):
    # NVIDIA's role's persistenced override stays (gpufleet neither owns nor removes another tool's files; the
    # audit's unit-override finding names it); the role enables and starts nvidia-persistenced as it ships.
    _, kind = _foreign(host)
    for f in kind["files"]:
        assert host.file(f["path"]).content_string == f["content"], f["path"]
    assert host.service("nvidia-persistenced").is_running
