"""audit: the report names the planted source conflict and what gpufleet installed; no file on the node changed."""

import json
import os
from pathlib import Path

OUT = Path(os.environ.get("MOLECULE_EPHEMERAL_DIRECTORY", "/nonexistent"))
NODE = "gpufleet-mol-audit-0"


def _report() -> dict:
    return json.loads((OUT / "audit.json").read_text())


def test_the_audit_changed_no_file(host):
    assert (OUT / "changed-files.txt").read_text().strip() == ""


def test_the_host_state_digest_is_unchanged(host):
    # roles/host_footprint's reader, read right before and right after the audit.
    digests = json.loads((OUT / "footprint.json").read_text())
    assert digests["before"] and digests["before"] == digests["after"]


def test_the_conflicting_source_is_named(host):
    found = [f for f in _report()["findings"] if f["id"] == "source-conflict"]
    assert [f["hosts"] for f in found] == [[NODE]]
    assert "/etc/apt/sources.list.d/cuda-keyring.list" in found[0]["message"]
    assert "/etc/apt/sources.list.d/cuda-ubuntu2204-x86_64.list" in found[0]["message"]


def test_what_gpufleet_installed_is_read(host):
    (h,) = _report()["hosts"]
    assert h["host"] == NODE and h["gpu"]["count"] > 0
    assert h["versions"]["driver"] == "570.172.08"
    held = {p["name"]: p["held"] for p in h["packages"]}
    assert held.get("nvidia-utils-570") is True


def test_the_report_folder_holds_the_raw_reads(host):
    assert (OUT / "audit-report" / "raw" / NODE / "smi_xml.txt").read_text().lstrip().startswith("<?xml")
    assert (OUT / "audit-report" / "audit.json").is_file()
