"""Hosts grouped into pools: by the inventory's pool where the host has one, else by identical hardware."""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.audit.facts import HostFacts


def hardware(f: HostFacts) -> tuple[str, int, str]:
    """What makes hosts interchangeable in one pool: GPU model (catalog key, else nvidia-smi's name), count, fabric."""
    return (f.gpu_model or f.gpu_name or "no-gpu", f.gpu_count, f.fabric)


def hardware_pool_name(key: tuple[str, int, str]) -> str:
    """A DNS-1123 label for a hardware group (``a100-sxm4-80gb-x8``), the name a proposed pool gets."""
    model, count, _ = key
    name = re.sub(r"[^a-z0-9]+", "-", model.lower()).strip("-") or "gpu"
    return f"{name}-x{count}"[:63].strip("-")


def pool_of(f: HostFacts) -> str:
    return f.pool or hardware_pool_name(hardware(f))


def by_pool(facts: Iterable[HostFacts]) -> dict[str, list[HostFacts]]:
    out: dict[str, list[HostFacts]] = {}
    for f in facts:
        out.setdefault(pool_of(f), []).append(f)
    return out


def by_hardware(facts: Iterable[HostFacts]) -> dict[tuple[str, int, str], list[HostFacts]]:
    out: dict[tuple[str, int, str], list[HostFacts]] = {}
    for f in facts:
        out.setdefault(hardware(f), []).append(f)
    return out
