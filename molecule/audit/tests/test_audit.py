"""audit: the report names each foreign kind's differences and the gpufleet node's planted source conflict, the
proposed stack passes `gpufleet lock check`, and no node's files or host-state digest changed."""

import json
import os
from pathlib import Path

import pytest
import yaml

OUT = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
NODE = "gpufleet-mol-audit-0"
#: The one definition of the foreign kinds (molecule/shared/foreign_kinds.yml) and which node is which kind.
KINDS = yaml.safe_load((Path(__file__).resolve().parents[2] / "shared" / "foreign_kinds.yml").read_text())
FOREIGN = {"gpufleet-mol-audit-keyring": "cuda_keyring", "gpufleet-mol-audit-debian": "debian_nonfree",
           "gpufleet-mol-audit-role": "nvidia_role"}
NODES = [NODE, *FOREIGN]
#: Read from the container host's kernel (a container has no sysctl of its own): not a property of the node.
HOST_KERNEL = {"numa-balancing"}
#: Findings of a pool: they list every host of the pool, the message says which host differs.
POOL_LEVEL = {"version-skew", "power-limit-skew", "lock-refused"}


def _report() -> dict:
    return json.loads((OUT / "audit.json").read_text())


def _ids(node: str) -> set[str]:
    return {f["id"] for f in _report()["findings"] if node in f["hosts"]} - HOST_KERNEL - POOL_LEVEL


def _driver_groups() -> list[str]:
    """The driver skew's groups ("<version> on <hosts>"), one per version the pool runs."""
    (skew,) = [f for f in _report()["findings"] if f["id"] == "version-skew" and f["message"].startswith("driver ")]
    return skew["message"].split(": ", 1)[1].split("; ")


def _messages(node: str, fid: str) -> str:
    """Every message of finding ``fid`` naming ``node``, one per line (one per origin, per drop-in, per component)."""
    found = [f["message"] for f in _report()["findings"] if f["id"] == fid and node in f["hosts"]]
    assert found, fid
    return "\n".join(found)


def _host(node: str) -> dict:
    return next(h for h in _report()["hosts"] if h["host"] == node)


@pytest.mark.parametrize("node", NODES)
def test_the_audit_changed_no_file(host, node):
    assert (OUT / f"changed-files-{node}.txt").read_text().strip() == ""


@pytest.mark.parametrize("node", NODES)
def test_the_host_state_digest_is_unchanged(host, node):
    # roles/host_footprint's reader, read right before and right after the audit.
    digests = json.loads((OUT / f"footprint-{node}.json").read_text())
    assert digests["before"] and digests["before"] == digests["after"]


def test_every_node_was_audited(host):
    assert sorted(h["host"] for h in _report()["hosts"]) == sorted(NODES)
    assert _report()["failed_hosts"] == {}


@pytest.mark.parametrize("node", sorted(FOREIGN))
def test_each_foreign_kind_gets_exactly_its_findings(host, node):
    expect = set(KINDS[FOREIGN[node]]["expect"])
    assert _ids(node) == expect - POOL_LEVEL
    # The pool's driver skew names the node apart from the gpufleet node exactly when its kind expects it.
    (group,) = [g for g in _driver_groups() if node in g.split(" on ", 1)[1].split(", ")]
    assert (NODE not in group) == ("version-skew" in expect), group


def test_the_gpufleet_node_gets_only_the_planted_conflict(host):
    assert _ids(NODE) == {"source-conflict"}


def test_the_conflicting_source_is_named(host):
    found = [f for f in _report()["findings"] if f["id"] == "source-conflict"]
    assert [f["hosts"] for f in found] == [[NODE]]
    assert "/etc/apt/sources.list.d/cuda-keyring.list" in found[0]["message"]
    assert "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list" in found[0]["message"]


def test_what_gpufleet_installed_is_read(host):
    h = _host(NODE)
    assert h["gpu"]["count"] > 0 and h["versions"]["driver"] == "570.172.08"
    held = {p["name"]: p["held"] for p in h["packages"]}
    assert held.get("nvidia-utils-570") is True


def test_a_cuda_keyring_node_names_its_source_and_keyring(host):
    node = "gpufleet-mol-audit-keyring"
    h = _host(node)
    assert h["versions"]["driver"] == "590.48.01" and h["gpu"]["count"] > 0
    assert h["packages"] and not any(p["held"] for p in h["packages"])
    assert {p["keyring"] for p in h["packages"] if p["name"] == "cuda-drivers"} == {
        "/usr/share/keyrings/cuda-archive-keyring.gpg"}
    msg = _messages(node, "foreign-source")
    assert "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list" in msg and "/usr/share/keyrings/" in msg
    assert "590.48.01 on gpufleet-mol-audit-keyring" in _messages(node, "version-skew")


def test_debians_own_driver_is_named_with_its_archive(host):
    node = "gpufleet-mol-audit-debian"
    h = _host(node)
    pkgs = {p["name"]: p for p in h["packages"]}
    # Real packages from Debian's archive, at bookworm's version although bookworm-security has a newer one.
    assert pkgs["nvidia-smi"]["version"] == "535.261.03-1" and not pkgs["nvidia-smi"]["held"]
    assert pkgs["nvidia-smi"]["origin"] == "http://deb.debian.org/debian"
    assert h["versions"]["driver"] == "535.261.03"
    assert "http://deb.debian.org/debian" in _messages(node, "foreign-source")
    assert "535.261.03 on gpufleet-mol-audit-debian" in _messages(node, "version-skew")


def test_nvidia_roles_node_names_the_pin_and_the_override(host):
    node = "gpufleet-mol-audit-role"
    pkgs = {p["name"]: p for p in _host(node)["packages"]}
    assert pkgs["cuda-drivers-570"]["version"] == "570.133.20-1"
    assert "570.133.20: cuda-drivers-570" in _messages(node, "driver-package-skew")
    msg = _messages(node, "unit-override")
    assert "nvidia-persistenced.service.d/override.conf" in msg and "--verbose" in msg
    # Persistence is on there (the role enables nvidia-persistenced): no persistence finding.
    assert all(g["persistence_mode"] for g in _host(node)["gpus"])


def test_the_proposed_stack_passes_lock_check(host):
    proposal = _report()["proposed_stack"]
    assert proposal["left_out"] == []
    assert sorted(h for p in proposal["pools"] for h in p["hosts"]) == sorted(NODES)
    check = json.loads((OUT / "lock-check.json").read_text())
    assert check["rc"] == 0, check
    assert json.loads(check["stdout"])["valid"] is True


def test_the_report_folder_holds_the_raw_reads(host):
    for node in NODES:
        assert (OUT / "audit-report" / "raw" / node / "smi_xml.txt").read_text().lstrip().startswith("<?xml")
    assert (OUT / "audit-report" / "audit.json").is_file()
