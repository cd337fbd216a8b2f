"""Parsers of real tool output: ``nvidia-smi -q -x`` (``smi_xml``) and nccl-tests logs (``nccl``)."""

from gpufleet.parsers.errors import ParseError

__all__ = ["ParseError"]
