"""Helpers for testinfra verifiers: read real state off a node (packages, holds, units, simulator)."""

from __future__ import annotations

import csv
import io
from typing import Any

from gpufleet.lock.packages import driver_names
from gpufleet.lock.versions import driver_branch


def driver_packages(version: str, module: str = "open") -> list[str]:
    """The co-versioned driver packages of ``version``, named by the lock (the one place NVIDIA's naming lives)."""
    return driver_names(driver_branch(version), module)


def installed_version(host: Any, pkg: str) -> str | None:
    r = host.run("dpkg-query -W -f='${Status}|${Version}' %s", pkg)
    # Status is "<want> ok installed"; want is "hold" for held packages.
    if r.rc != 0 or not r.stdout.split("|", 1)[0].endswith(" ok installed"):
        return None
    return str(r.stdout.split("|", 1)[1])


def selection(host: Any, pkg: str) -> str:
    r = host.run("dpkg --get-selections %s", pkg)
    parts = r.stdout.split()
    return parts[1] if len(parts) == 2 else "absent"


def assert_locked(host: Any, pkg: str, version: str, pref_file: str) -> None:
    """Fail unless ``pkg`` is locked at exactly ``version``: installed at it, held, pinned at priority 1001
    by a stanza of ``pref_file`` and apt's candidate at that priority. The message names the package and,
    for every check that fails, the expected and the found value."""
    problems = []
    found = installed_version(host, pkg)
    if found != version:
        problems.append(f"installed version {found or 'none'}, expected {version}")
    held = selection(host, pkg)
    if held != "hold":
        problems.append(f"dpkg selection {held}, expected hold")
    pref = host.file(pref_file).content_string
    stanza = f"Package: {pkg}\nPin: version {version}\nPin-Priority: 1001"
    if stanza not in pref:
        ours = [s.strip() for s in pref.split("\n\n") if f"Package: {pkg}\n" in s + "\n"]
        problems.append(f"{pref_file} pins {ours or 'nothing'}, expected {stanza!r}")
    policy = host.run("apt-cache policy %s", pkg).stdout
    if f"*** {version} 1001" not in policy:
        chosen = [ln.strip() for ln in policy.splitlines() if ln.strip().startswith("***")]
        problems.append(f"apt-cache policy marks {chosen or 'nothing'}, expected '*** {version} 1001'")
    assert not problems, f"{pkg} is not locked at {version}: " + "; ".join(problems)


def query_gpus(host: Any, *fields: str) -> list[dict[str, str]]:
    r = host.run("nvidia-smi --query-gpu=%s --format=csv,noheader,nounits", ",".join(fields))
    assert r.rc == 0, f"nvidia-smi failed ({r.rc}): {r.stdout}{r.stderr}"
    rows = list(csv.reader(io.StringIO(r.stdout), skipinitialspace=True))
    return [dict(zip(fields, (c.strip() for c in row), strict=True)) for row in rows if row]
