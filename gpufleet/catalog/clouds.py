"""Cloud machine types and prices (the data is ``clouds.yaml`` next to this module, every figure with its source).

Pure data: importing this needs no cloud SDK, so the stack validation and ``gpufleet plan`` use it everywhere.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field

DATA_FILE = Path(__file__).with_name("clouds.yaml")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class InstanceType(_Frozen):
    name: str
    #: GPU model key of gpus.yaml; None for CPU machine types.
    gpu: str | None
    gpus: int = Field(ge=0)
    #: Every EFA interface the type supports (the launch template attaches all of them).
    efa_interfaces: int = Field(ge=0)
    source: str = Field(pattern=r"^https://\S+$")


class Price(_Frozen):
    instance_type: str
    region: str
    usd_per_hour: float = Field(gt=0)
    date: dt.date
    source: str = Field(pattern=r"^https://\S+$")


class FsxLustre(_Frozen):
    throughput_mbps_per_tib: list[int]
    capacity_gib_first: int
    capacity_gib_step: int
    source: str = Field(pattern=r"^https://\S+$")

    def capacity_ok(self, gib: int) -> bool:
        return gib == self.capacity_gib_first or gib % self.capacity_gib_step == 0


class EfaInstaller(_Frozen):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    url: str = Field(pattern=r"^https://\S+\.tar\.gz$")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    source: str = Field(pattern=r"^https://\S+$")


class AwsCatalog(_Frozen):
    instance_types: dict[str, InstanceType]
    prices: list[Price]
    fsx_lustre: FsxLustre
    efa_installer: EfaInstaller

    def price(self, instance_type: str, region: str) -> Price | None:
        return next((p for p in self.prices if p.instance_type == instance_type and p.region == region), None)


def load_aws(path: Path = DATA_FILE) -> AwsCatalog:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())["aws"]
    raw["instance_types"] = {k: {"name": k, **v} for k, v in raw["instance_types"].items()}
    return AwsCatalog.model_validate(raw)


AWS: AwsCatalog = load_aws()
