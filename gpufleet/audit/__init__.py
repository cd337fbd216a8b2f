"""``gpufleet audit``: a read-only look at GPU hosts gpufleet did not build (issue 28).

``reads`` names every command the collector runs (ansible/playbooks/audit.yml runs exactly those, nothing
else), ``facts`` turns their raw output into typed facts with the project's existing parsers, ``findings``
judges the facts against a sound configuration, ``propose`` writes the stack that would manage the hosts.
"""

from gpufleet.audit.facts import HostFacts, build_facts
from gpufleet.audit.findings import Finding, find_all
from gpufleet.audit.reads import RawRead, reads

__all__ = ["Finding", "HostFacts", "RawRead", "build_facts", "find_all", "reads"]
