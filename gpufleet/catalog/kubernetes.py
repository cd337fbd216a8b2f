"""Managed Kubernetes versions and their support windows per cloud (gpufleet/catalog/kubernetes.yaml), and the
one check the stack validation and ``gpufleet plan`` share: is a version in standard support on a given day,
or in the cloud's long-term window when the stack opts into it.

"Today" is an argument everywhere (``today()`` reads ``GPUFLEET_TODAY`` when set, an ISO date, else the
clock): the tests pin the day instead of asserting facts that expire with the calendar.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

CATALOG = Path(__file__).with_name("kubernetes.yaml")
#: The stack backends' names in this catalog.
CLOUD_KEYS = {"aws": "eks", "azure": "aks"}


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class KubeVersion(_Frozen):
    standard_end: date
    long_term_end: date | None
    node_os: str | None = Field(pattern=r"^Ubuntu\d{4}$")
    source: str = Field(pattern=r"^https://\S+$")


class CloudVersions(_Frozen):
    long_term: str
    long_term_source: str = Field(pattern=r"^https://\S+$")
    versions: dict[str, KubeVersion]


@cache
def catalog() -> dict[str, CloudVersions]:
    raw: dict[str, Any] = yaml.safe_load(CATALOG.read_text())
    return {cloud: CloudVersions.model_validate(entry) for cloud, entry in raw.items()}


def today() -> date:
    """The day support windows are judged on: ``GPUFLEET_TODAY`` (ISO date) when set, else the clock."""
    pinned = os.environ.get("GPUFLEET_TODAY")
    return date.fromisoformat(pinned) if pinned else date.today()


@dataclass(frozen=True)
class Support:
    """Where a version stands on a day: ``status`` is standard, long-term or unsupported."""

    version: str
    status: str
    ends: date | None
    source: str


def versions(backend: str) -> CloudVersions | None:
    key = CLOUD_KEYS.get(backend)
    return None if key is None else catalog()[key]


def support(backend: str, version: str, on: date, long_term: bool = False) -> Support | None:
    """The version's standing on ``on``; None when the catalog does not know the cloud or the version."""
    cloud = versions(backend)
    entry = None if cloud is None else cloud.versions.get(version)
    if entry is None:
        return None
    if on <= entry.standard_end:
        return Support(version, "standard", entry.standard_end, entry.source)
    if long_term and entry.long_term_end is not None and on <= entry.long_term_end:
        return Support(version, "long-term", entry.long_term_end, entry.source)
    return Support(version, "unsupported", entry.long_term_end or entry.standard_end, entry.source)


def supported_versions(backend: str, on: date) -> list[str]:
    """Versions in standard support on ``on``, oldest first."""
    cloud = versions(backend)
    if cloud is None:
        return []
    return sorted((v for v, e in cloud.versions.items() if on <= e.standard_end),
                  key=lambda v: tuple(int(x) for x in v.split(".")))


def node_os(backend: str, version: str) -> str | None:
    """The Ubuntu release of the cloud's Ubuntu node image for that version (None: not the cloud's to say)."""
    cloud = versions(backend)
    entry = None if cloud is None else cloud.versions.get(version)
    return None if entry is None else entry.node_os
