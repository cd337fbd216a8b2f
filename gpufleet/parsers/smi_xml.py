"""``nvidia-smi -q -x`` for gpufleet: the shared parser (gpufleet.module_utils.smi_xml) with ParseError.

The parser itself lives in gpufleet/module_utils/smi_xml.py because the gpu_settings module runs the same code on
the hosts; this module only turns its error into the ParseError every gpufleet parser raises.
"""

from __future__ import annotations

from gpufleet.module_utils import smi_xml as _shared
from gpufleet.module_utils.smi_xml import GpuInfo, RemappedRows, SmiReport
from gpufleet.parsers.errors import ParseError

__all__ = ["GpuInfo", "RemappedRows", "SmiReport", "parse_smi_xml"]


def parse_smi_xml(text: str) -> SmiReport:
    """Parse the output of ``nvidia-smi -q -x``; raise ParseError when it is not one."""
    try:
        return _shared.parse_smi_xml(text)
    except _shared.SmiXmlError as e:
        raise ParseError(str(e)) from None
