"""apt's source grammar, once: one-line (``deb [opt=v] uri suite …``) and deb822 (``URIs:``/``Suites:``) entries.

Read by ``gpufleet drift`` and ``gpufleet audit`` on the controller (gpufleet/drift/security.py) and by the
``apt_source_adopt`` module on the hosts, which ships it as ``ansible.module_utils.gpufleet_apt_sources``.
Standard library only. The grammar is sources.list(5): a one-line entry is ``type [options] uri suite
[component…]``; a deb822 file holds stanzas separated by blank lines, field names case-insensitive, a line that
starts with a space or a tab continuing the field above it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

_ONE_LINE = re.compile(r"^\s*(?P<type>deb(?:-src)?)\s+(?:\[(?P<opts>[^\]]*)\]\s+)?(?P<uri>\S+)\s+(?P<suite>\S+)")


@dataclass(frozen=True)
class Source:
    """One repository entry: where from, and the options that decide what apt trusts."""

    uri: str
    suite: str
    options: Mapping[str, str]


def same_uri(a: str, b: str) -> bool:
    """apt compares a source's URI with its trailing slash dropped (``…/x86_64`` and ``…/x86_64/`` are one)."""
    return a.strip().rstrip("/") == b.strip().rstrip("/")


def parse_sources(text: str) -> list[Source]:
    """One-line (``deb [opt=v] uri suite …``) and deb822 (``URIs:``/``Suites:``/``Signed-By:``) entries."""
    out: list[Source] = []
    stanza: dict[str, str] = {}
    field = ""

    def flush() -> None:
        if "uris" in stanza:
            opts = {k: v for k, v in stanza.items() if k not in ("uris", "suites", "types", "components")}
            for uri in stanza["uris"].split():
                for suite in stanza.get("suites", "").split() or [""]:
                    out.append(Source(uri, suite, opts))
        stanza.clear()

    for raw in text.splitlines():
        line = raw.split("#", 1)[0].rstrip()
        if m := _ONE_LINE.match(line):
            opts: dict[str, str] = {}
            for o in (m.group("opts") or "").split():
                key, _, value = o.partition("=")
                opts[key.lower()] = value
            out.append(Source(m.group("uri"), m.group("suite"), opts))
            field = ""
        elif not line.strip():
            # A comment line inside a stanza does not end it (deb822(5)); only a blank one does.
            if not raw.lstrip().startswith("#"):
                flush()
                field = ""
        elif line[0].isspace():
            if field:  # a continuation line (a folded URIs: or Signed-By: field)
                stanza[field] = f"{stanza[field]} {line.strip()}".strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            field = key.strip().lower()
            stanza[field] = value.strip()
    flush()
    return out


def entries_for(text: str, uri: str) -> list[Source]:
    """The entries of one source file's text that name ``uri``."""
    return [s for s in parse_sources(text) if same_uri(s.uri, uri)]
