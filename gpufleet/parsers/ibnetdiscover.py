"""Parser of ``ibnetdiscover`` output (infiniband-diags, rdma-core): the InfiniBand switches, their GUIDs, the
links between them and which hosts' HCAs hang off each.

The format is the one ibnetdiscover(8) documents (rdma-core ``infiniband-diags/man/ibnetdiscover.8.in.rst``):
one record per node, opened by ``vendid=``/``devid=``/``sysimgguid=`` and ``switchguid=``/``caguid=``/
``routerguid=`` lines, then a header ``Switch|Ca|Rt <ports> "<S|H|R>-<guid>" # "<description>" ...`` and one
line per connected port::

    [1]  "H-506b4b03003fa9b6"[1](506b4b03003fa9b6)   # "node018 HCA-1" lid 67 4xEDR     (switch port -> HCA)
    [1](506b4b03003fa98a)  "S-ec0d9a0300ec8240"[36]  # lid 83 lmc 0 "SwitchIB ..." lid 48 4xEDR   (HCA port -> switch)

Tolerated: comment lines (``#``), ``Chassis``/``Non-Chassis Nodes`` headings, blank lines, tabs or spaces. The
host of an HCA is the first word of its NodeDescription (``node018 HCA-1`` -> ``node018``), as the HCA driver
sets it from the host name. A switch with HCAs is a leaf; one with only switch links is above the leaves.

Failure decision: an input without a single Switch record raises :class:`ParseError` (it is not a fabric
capture: ``ibnetdiscover -l`` lists, an ``ibstat``, an error message).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpufleet.parsers.errors import ParseError

#: Nodes a capture may hold: the largest fabrics are tens of thousands of ports; this bounds memory.
MAX_NODES = 200_000
#: Port lines per node (a director switch has up to 800 ports).
MAX_PORTS = 2048

_GUID = r"[0-9a-fA-F]{1,16}"
_HEADER = re.compile(
    rf'^(?P<kind>Switch|Ca|Rt)\s+(?P<ports>\d{{1,4}})\s+"(?P<id>[SHR]-(?P<guid>{_GUID}))"'
    r'(?:\s*#\s*"(?P<desc>[^"]*)"(?P<rest>.*))?\s*$')
_PORT = re.compile(
    rf'^\[(?P<port>\d{{1,4}})\](?:\((?P<port_guid>{_GUID})\))?\s*'
    rf'"(?P<peer>[SHR]-(?P<peer_guid>{_GUID}))"\[(?P<peer_port>\d{{1,4}})\](?:\((?P<peer_port_guid>{_GUID})\))?'
    r'(?:\s*#\s*(?P<comment>.*))?\s*$')
_QUOTED = re.compile(r'"([^"]*)"')
_LID = re.compile(r"\blid\s+(\d{1,5})\b")
_WIDTH_SPEED = re.compile(r"\b(\d{1,2}x[A-Z]{2,4})\s*$")
_HEADING = re.compile(r"^(?:#.*|(?:Non-)?Chassis\b.*|(?:vendid|devid|sysimgguid|switchguid|caguid|routerguid)=.*)$")


def _guid(text: str) -> str:
    """A GUID as ibnetdiscover's node names print it: 16 lower-case hex digits."""
    return text.lower().rjust(16, "0")


@dataclass
class Link:
    """One connected port of a node: its port number and the node and port at the other end."""

    port: int
    peer_guid: str
    peer_kind: str
    peer_port: int
    peer_description: str | None
    width_speed: str | None


@dataclass
class Node:
    kind: str
    guid: str
    ports: int
    description: str | None
    lid: int | None
    links: list[Link] = field(default_factory=list)


@dataclass(frozen=True)
class HostPort:
    """An HCA port cabled to a switch port."""

    host: str
    hca: str | None
    guid: str
    switch_port: int


@dataclass(frozen=True)
class SwitchInfo:
    guid: str
    description: str | None
    lid: int | None
    ports: int
    #: ``leaf`` when HCAs hang off it, else ``spine`` (it links only switches).
    level: str
    hcas: tuple[HostPort, ...]
    #: Switch GUID -> number of cables to it.
    switch_links: dict[str, int]


@dataclass(frozen=True)
class Fabric:
    switches: tuple[SwitchInfo, ...]

    def hosts_by_switch(self) -> dict[str, list[str]]:
        """Leaf switch GUID -> the hosts whose HCAs are cabled to it (sorted, each once)."""
        return {s.guid: sorted({h.host for h in s.hcas}) for s in self.switches if s.hcas}

    def places(self) -> dict[str, dict[str, str]]:
        """Host -> ``{"switch": "S-<guid>"}`` for the stack's hosts[].place, for hosts cabled to one leaf only (a
        multi-rail host on several leaves has no single leaf switch: it is left out)."""
        leaves: dict[str, set[str]] = {}
        for s in self.switches:
            for h in s.hcas:
                leaves.setdefault(h.host, set()).add(s.guid)
        return {h: {"switch": f"S-{next(iter(g))}"} for h, g in sorted(leaves.items()) if len(g) == 1}

    def to_dict(self) -> dict[str, Any]:
        return {
            "switches": [
                {"guid": s.guid, "description": s.description, "lid": s.lid, "ports": s.ports, "level": s.level,
                 "hosts": sorted({h.host for h in s.hcas}),
                 "hcas": [{"host": h.host, "hca": h.hca, "guid": h.guid, "switch_port": h.switch_port}
                          for h in s.hcas],
                 "switch_links": dict(sorted(s.switch_links.items()))}
                for s in self.switches],
            "leaf_switches": sum(1 for s in self.switches if s.level == "leaf"),
            "hosts": sorted({h.host for s in self.switches for h in s.hcas}),
            "place": self.places(),
        }


def _split_description(desc: str) -> tuple[str, str | None]:
    """``node018 HCA-1`` -> (``node018``, ``HCA-1``); a description of one word is the host alone."""
    words = desc.split(None, 1)
    if not words:
        return "", None
    return words[0], (words[1].strip() if len(words) > 1 else None)


def _comment_fields(comment: str | None) -> tuple[str | None, str | None]:
    """The peer's NodeDescription (last quoted string) and the link's width and speed (``4xEDR``)."""
    if not comment:
        return None, None
    quoted = _QUOTED.findall(comment)
    ws = _WIDTH_SPEED.search(comment)
    return (quoted[-1] if quoted else None), (ws.group(1) if ws else None)


def parse_ibnetdiscover_lines(lines: Iterable[str]) -> Fabric:
    """The fabric an ibnetdiscover capture describes; see the module docstring for what is tolerated."""
    nodes: dict[str, Node] = {}
    current: Node | None = None
    for number, raw in enumerate(lines, 1):
        line = raw.strip()
        if not line or _HEADING.match(line):
            continue
        if m := _HEADER.match(line):
            if len(nodes) >= MAX_NODES:
                raise ParseError(f"line {number}: more than {MAX_NODES:,} nodes; not a single fabric's capture")
            rest = m.group("rest") or ""
            lid = _LID.search(rest)
            guid = _guid(m.group("guid"))
            current = Node(m.group("kind"), guid, int(m.group("ports")), m.group("desc"),
                           int(lid.group(1)) if lid else None)
            nodes[f"{m.group('kind')}:{guid}"] = current
            continue
        if (p := _PORT.match(line)) and current is not None:
            if len(current.links) >= MAX_PORTS:
                raise ParseError(f"line {number}: more than {MAX_PORTS} ports on {current.kind} {current.guid}")
            desc, ws = _comment_fields(p.group("comment"))
            current.links.append(Link(int(p.group("port")), _guid(p.group("peer_guid")), p.group("peer")[0],
                                      int(p.group("peer_port")), desc, ws))
    switches = [n for n in nodes.values() if n.kind == "Switch"]
    if not switches:
        raise ParseError("no Switch record: not an ibnetdiscover capture (run `ibnetdiscover` without -l/-H/-S and "
                         "save its whole output)")
    ca_desc = {n.guid: n.description for n in nodes.values() if n.kind == "Ca"}
    out: list[SwitchInfo] = []
    for s in switches:
        hcas: list[HostPort] = []
        peers: dict[str, int] = {}
        for link in s.links:
            if link.peer_kind == "H":
                desc = ca_desc.get(link.peer_guid) or link.peer_description or ""
                host, hca = _split_description(desc)
                hcas.append(HostPort(host or f"H-{link.peer_guid}", hca, link.peer_guid, link.port))
            elif link.peer_kind == "S":
                peers[link.peer_guid] = peers.get(link.peer_guid, 0) + 1
        out.append(SwitchInfo(s.guid, s.description, s.lid, s.ports, "leaf" if hcas else "spine",
                              tuple(sorted(hcas, key=lambda h: h.switch_port)), peers))
    # Switches sorted by GUID: the same fabric gives the same output whatever order the scan visited it in.
    return Fabric(tuple(sorted(out, key=lambda s: s.guid)))


def parse_ibnetdiscover(text: str) -> Fabric:
    return parse_ibnetdiscover_lines(text.splitlines())
