"""Slurm node records read with one grammar, and what slurm.conf declares for a node against what slurmd finds on it.

This module is the one copy of the grammar of Slurm's node records: ``slurmd -C`` (the hardware as slurmd detects
it), a slurm.conf ``NodeName=`` line and ``scontrol --oneliner show node``. It uses only the standard library because
it is also Ansible module_utils (``ansible/module_utils/gpufleet_slurm_node.py`` is a link to this file): roles/slurm's
``slurm_node_hardware`` module reads ``slurmd -C`` on each compute node with it; the slurm scenario's verifier reads
``scontrol show node`` and slurm.conf with it.

``slurmd -C`` prints the node's hardware "in the same format as used in slurm.conf to describe a node's configuration
plus its uptime" (slurmd(8), https://slurm.schedmd.com/slurmd.html), e.g. on an 8x H100 p5.48xlarge (quoted from
https://github.com/aws/aws-parallelcluster/issues/5797 in aws-samples/awsome-distributed-training,
1.architectures/2.aws-parallelcluster/README.md)::

    NodeName=p5-st-p5-1 CPUs=192 Boards=1 SocketsPerBoard=2 CoresPerSocket=48 ThreadsPerCore=2 RealMemory=2047961
    UpTime=2-00:08:02

(one line there, UpTime on a line of its own here as in other releases: both are read.)

What slurmctld does with a difference (``validate_node_specs`` in
src/slurmctld/node_mgr.c; https://slurm.schedmd.com/slurm.conf.html, NodeName and SlurmdParameters): a node that
registers with fewer CPUs, a smaller Sockets x CoresPerSocket x ThreadsPerCore or less RealMemory than slurm.conf
declares is set INVALID_REG and drained ("Low CPUs", "Low socket*core*thread count", "Low RealMemory"), unless
``SlurmdParameters=config_overrides``, with which slurmd registers the declared configuration whatever it finds (meant
for testing). More than declared, or another shape with the same total, registers; Slurm then schedules by the
declaration, so what differs still deserves a line in the run's summary.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

#: The fields compared, as slurm.conf names them (slurm.conf.html NodeName).
FIELDS = ("CPUs", "Sockets", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
#: slurmctld's drain reason for each check that refuses a registration (node_mgr.c validate_node_specs).
REASONS = {"CPUs": "Low CPUs", "layout": "Low socket*core*thread count", "RealMemory": "Low RealMemory"}
#: One Key=Value word of a record: a key is a letter then letters, digits and '_' (scontrol's keys, slurm.conf's).
_KEY = re.compile(r"([A-Za-z][A-Za-z0-9_]*)=(.*)\Z", re.S)


class SlurmNodeError(ValueError):
    """The text is not the node record it should be (a field missing or not a whole number)."""


def parse_fields(text: str) -> dict[str, str]:
    """The Key=Value words of one node record, in order of appearance; a key seen twice keeps its first value.

    Words are split on whitespace; a word that is no ``Key=`` belongs to the value before it (scontrol prints a few
    values with spaces: ``OS=Linux 6.1.0 #1 SMP ...``, ``Reason=...``). Lines are joined: slurmd -C prints UpTime on
    a line of its own, scontrol without --oneliner one record over several lines.
    """
    out: dict[str, str] = {}
    last: str | None = None
    for word in text.split():
        m = _KEY.match(word)
        if m:
            last = m.group(1)
            if last in out:
                last = None  # a repeated key: its words go nowhere
                continue
            out[last] = m.group(2)
        elif last is not None:
            out[last] = f"{out[last]} {word}"
    return out


def _need(fields: Mapping[str, str], key: str, what: str) -> int:
    value = _int(fields, key, what)
    if value is None:
        raise SlurmNodeError(f"{what}: no {key}")
    return value


def _int(fields: Mapping[str, str], key: str, what: str) -> int | None:
    raw = fields.get(key)
    if raw is None:
        return None
    if not re.fullmatch(r"[0-9]+", raw):
        raise SlurmNodeError(f"{what}: {key}={raw!r} is not a whole number")
    return int(raw)


@dataclass(frozen=True)
class NodeLayout:
    """A node's CPUs and their layout as Slurm counts them; ``real_memory`` in MB, None where not declared."""

    cpus: int
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    real_memory: int | None

    @property
    def slots(self) -> int:
        """Sockets x CoresPerSocket x ThreadsPerCore: the total slurmctld checks a registration against."""
        return self.sockets * self.cores_per_socket * self.threads_per_core

    def value(self, name: str) -> int | None:
        return {"CPUs": self.cpus, "Sockets": self.sockets, "CoresPerSocket": self.cores_per_socket,
                "ThreadsPerCore": self.threads_per_core, "RealMemory": self.real_memory}[name]

    def to_dict(self) -> dict[str, int | None]:
        return {n: self.value(n) for n in FIELDS}


def parse_slurmd_c(text: str) -> tuple[str, NodeLayout]:
    """``slurmd -C``'s output: (NodeName, the hardware). Sockets are Boards x SocketsPerBoard (slurm.conf.html:
    SocketsPerBoard and Sockets are the same count on a one-board node, which is every x86 node)."""
    fields = parse_fields(text)
    what = "slurmd -C"
    missing = [k for k in ("NodeName", "CPUs", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore", "RealMemory")
               if k not in fields]
    if missing:
        raise SlurmNodeError(f"{what}: no {', '.join(missing)} in {text.strip()[:200]!r}")
    boards = _int(fields, "Boards", what) or 1
    spb, cps, tpc, cpus = (_need(fields, k, what) for k in ("SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore",
                                                            "CPUs"))
    return fields["NodeName"], NodeLayout(cpus, boards * spb, cps, tpc, _need(fields, "RealMemory", what))


def declared_layout(fields: Mapping[str, str]) -> NodeLayout:
    """What a slurm.conf NodeName line (its fields) declares, with slurm.conf.html's defaults for what it leaves out:
    CoresPerSocket and ThreadsPerCore 1; Sockets inferred from CPUs, CoresPerSocket and ThreadsPerCore (a line with
    CPUs only is CPUs sockets of one core: the 192:1:1 of a bare ``CPUs=192``); CPUs the product of the layout."""
    what = f"slurm.conf NodeName={fields.get('NodeName', '?')}"
    cps = _int(fields, "CoresPerSocket", what) or 1
    tpc = _int(fields, "ThreadsPerCore", what) or 1
    boards = _int(fields, "Boards", what) or 1
    cpus = _int(fields, "CPUs", what)
    sockets = _int(fields, "Sockets", what) or _int(fields, "SocketsPerBoard", what)
    if sockets is not None:
        sockets *= boards
    elif cpus is not None:
        sockets = max(1, cpus // (cps * tpc))
    else:
        sockets = boards
    return NodeLayout(cpus if cpus is not None else sockets * cps * tpc, sockets, cps, tpc,
                      _int(fields, "RealMemory", what))


@dataclass(frozen=True)
class Difference:
    """One field slurm.conf declares otherwise than the hardware has; ``refused``: slurmctld refuses the registration
    for it (without config_overrides), and ``reason`` is the drain reason it then sets."""

    field: str
    declared: int
    found: int
    refused: bool
    reason: str = ""

    def words(self) -> str:
        return f"{self.field} declared {self.declared}, slurmd -C {self.found}"


def compare(declared: NodeLayout, found: NodeLayout) -> list[Difference]:
    """Every field that differs, in FIELDS order. RealMemory counts only when the hardware has less than declared
    (declaring less than the node has keeps memory for the system, the usual practice) or when nothing is declared
    (then nothing is compared)."""
    low_slots = found.slots < declared.slots
    out: list[Difference] = []
    for name in FIELDS:
        want, have = declared.value(name), found.value(name)
        if want is None or have is None or want == have or (name == "RealMemory" and have > want):
            continue
        if name == "CPUs":
            refused, reason = have < want, REASONS["CPUs"]
        elif name == "RealMemory":
            refused, reason = True, REASONS["RealMemory"]
        else:
            refused, reason = low_slots and have < want, REASONS["layout"]
        out.append(Difference(name, want, have, refused, reason if refused else ""))
    return out


@dataclass(frozen=True)
class Verdict:
    """What the converge does about a node: fail with ``failure``, or say ``notice`` ({event, detail}) in the run's
    summary, or neither when slurm.conf declares what the hardware has."""

    differences: tuple[Difference, ...]
    failure: str | None
    notice: dict[str, str] | None


NOTICE_EVENT = "slurm.conf declares another node than slurmd -C finds"


def verdict(host: str, declared: NodeLayout, found: NodeLayout, config_overrides: bool) -> Verdict:
    """Fail where slurmctld would set the node INVALID_REG and drain it (a refused difference, no config_overrides);
    else report every difference as a notice; nothing where they agree."""
    diffs = tuple(compare(declared, found))
    if not diffs:
        return Verdict(diffs, None, None)
    said = "; ".join(d.words() for d in diffs)
    refused = [d for d in diffs if d.refused]
    if refused and not config_overrides:
        reasons = ", ".join(dict.fromkeys(d.reason for d in refused))
        mem = f", slurm_node_real_memory_mb at most {found.real_memory}" if found.real_memory is not None else ""
        failure = (
            f"slurm: {host}: slurm.conf declares more than slurmd -C finds ({said}); slurmctld would set the node "
            f"INVALID_REG and drain it ({reasons}; https://slurm.schedmd.com/slurm.conf.html NodeName). Fix: declare "
            f"the hardware in the group_vars of this host's pool (slurm_node_cpus={found.cpus}, slurm_node_layout="
            f"'Sockets={found.sockets} CoresPerSocket={found.cores_per_socket} ThreadsPerCore={found.threads_per_core}'"
            f"{mem}, as slurmd -C reports it), or put the host in the pool whose hardware it has. "
            f"SlurmdParameters=config_overrides (slurm_slurmd_parameters) accepts any declaration: for test beds only.")
        return Verdict(diffs, failure, None)
    if config_overrides:
        why = "SlurmdParameters=config_overrides: slurmd registers the declaration"
    else:
        why = "Slurm schedules by the declaration"
    return Verdict(diffs, None, {"event": NOTICE_EVENT, "detail": f"{said} ({why})"})
