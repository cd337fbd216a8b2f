"""Getting the raw reads: from the hosts (ansible/playbooks/audit.yml through gpufleet.ansible_run), or offline
from a folder of saved outputs (``--facts DIR``: ``DIR/<host>/<key>.txt``, the layout ``--report`` saves too).

Per host, either raw reads or the reason there are none (unreachable, no sudo): one host's failure never stops
the others.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpufleet import REPO_ROOT
from gpufleet.audit.reads import KEYS, MISSING, RawRead, playbook_vars
from gpufleet.errors import InputError
from gpufleet.inputs import read_text

AUDIT_PLAYBOOK = REPO_ROOT / "ansible" / "playbooks" / "audit.yml"
#: The set_stats key audit.yml reports under: {host: {key: {rc, stdout}}}.
STATS_KEY = "gpufleet_audit"
#: In a --facts host folder: the pool the host belongs to (optional), and why it could not be read (optional).
POOL_FILE, FAILED_FILE = "pool", "failed"
#: What the command module says when it could not start the program (older ansible-core names the errno, newer
#: ones hide the exception behind a generic message): the read's program is not installed.
_NOT_STARTED = ("No such file or directory", "Error executing command.")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


@dataclass
class Collected:
    raw: dict[str, dict[str, RawRead]] = field(default_factory=dict)
    pools: dict[str, str] = field(default_factory=dict)
    #: host -> why it was not audited.
    failed: dict[str, str] = field(default_factory=dict)


def read_facts_dir(path: Path) -> Collected:
    """Saved raw outputs: one folder per host, ``<key>.txt`` its stdout (rc 0), ``<key>.rc`` a non-zero status."""
    if not path.is_dir():
        raise InputError.one(str(path), "not a folder of saved audit outputs",
                             "pass a folder with one sub-folder per host (<host>/<read>.txt), e.g. a --report "
                             "folder's raw/", key="--facts", kind="input error")
    out = Collected()
    for host_dir in sorted(p for p in path.iterdir() if p.is_dir()):
        host = host_dir.name
        if not _HOST.match(host):
            continue
        if (host_dir / FAILED_FILE).is_file():
            out.failed[host] = read_text(host_dir / FAILED_FILE, "log").strip() or "failed"
            continue
        reads: dict[str, RawRead] = {}
        for key in KEYS:
            txt, rc = host_dir / f"{key}.txt", host_dir / f"{key}.rc"
            if not txt.is_file() and not rc.is_file():
                continue
            code = 0
            if rc.is_file():
                text = read_text(rc, "log").strip()
                if not re.fullmatch(r"-?\d{1,3}", text):
                    raise InputError.one(str(rc), "not an exit status", "write the command's exit status (0-255)",
                                         value=text[:40], kind="input error")
                code = int(text)
            reads[key] = RawRead(code, read_text(txt, "log") if txt.is_file() else "")
        out.raw[host] = reads
        if (host_dir / POOL_FILE).is_file():
            out.pools[host] = read_text(host_dir / POOL_FILE, "log").strip()
    if not out.raw and not out.failed:
        raise InputError.one(str(path), "holds no host folder", "pass a folder with one sub-folder per host",
                             key="--facts", kind="input error")
    return out


def from_stats(stats: Mapping[str, Any]) -> Collected:
    """audit.yml's set_stats data (``{host: {pool, reads: {key: {rc, stdout, msg}}}}``) -> raw reads per host; values
    it could not have sent are dropped."""
    out = Collected()
    reported = stats.get(STATS_KEY)
    if not isinstance(reported, Mapping):
        return out
    for host, entry in reported.items():
        reads = entry.get("reads") if isinstance(entry, Mapping) else None
        if not isinstance(reads, Mapping):
            continue
        host_reads: dict[str, RawRead] = {}
        for key, r in reads.items():
            if key in KEYS and isinstance(r, Mapping):
                rc, stdout = r.get("rc"), str(r.get("stdout") or "")
                # A program the command module could not start (rc 2, a msg of _NOT_STARTED) is "not installed",
                # the status a --facts folder writes as 127.
                if not stdout and any(m in str(r.get("msg") or "") for m in _NOT_STARTED):
                    rc = MISSING
                host_reads[str(key)] = RawRead(rc if isinstance(rc, int) else MISSING, stdout)
        out.raw[str(host)] = host_reads
        if isinstance(pool := entry.get("pool"), str) and pool:
            out.pools[str(host)] = pool
    return out


def run_audit(inventory: Path, *, limit: str | None, hosts: str, live: bool,
              console: Any = None, runner: Callable[..., Any] | None = None) -> Collected:
    """Run audit.yml (reads only) and collect per host; failed and unreachable hosts get their reason."""
    from gpufleet.ansible_run import run_playbook
    from gpufleet.drift.runner import _first_failure

    run = runner or run_playbook
    result = run(AUDIT_PLAYBOOK, inventory, limit=limit, live=live, console=console,
                 extravars={**playbook_vars(), "gpufleet_audit_hosts": hosts})
    out = from_stats(result.custom_stats)
    for host in result.unreachable_hosts:
        out.failed[host] = "unreachable"
        out.raw.pop(host, None)
    for host in result.failed_hosts:
        out.failed[host] = _first_failure(result, host)
        out.raw.pop(host, None)
    return out


def save_raw(collected: Collected, write: Callable[[str, str], object]) -> None:
    """The raw reads in --facts layout (``raw/<host>/<key>.txt`` and ``.rc``), so a report can be re-audited."""
    for host, reads in collected.raw.items():
        for key, r in reads.items():
            write(f"raw/{host}/{key}.txt", r.stdout)
            if r.rc:
                write(f"raw/{host}/{key}.rc", f"{r.rc}\n")
        if host in collected.pools:
            write(f"raw/{host}/{POOL_FILE}", collected.pools[host] + "\n")
    for host, why in collected.failed.items():
        write(f"raw/{host}/{FAILED_FILE}", why + "\n")
