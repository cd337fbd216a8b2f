"""Storage gate defaults (the data is ``storage.yaml`` next to this module, every figure with its source).

NVMe datasheet classes for node-local scratch and the gate fractions; the managed Lustre services' per-TiB
throughput tiers are not here but in ``clouds.yaml`` (one place for each fact).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

DATA_FILE = Path(__file__).with_name("storage.yaml")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NvmeClass(_Frozen):
    description: str
    seq_read_mbps: float = Field(gt=0)
    seq_write_mbps: float = Field(gt=0)
    rand_read_iops: float = Field(gt=0)
    source: str = Field(pattern=r"^https://\S+$")


class NvmeCatalog(_Frozen):
    gate_fraction: float = Field(gt=0, le=1)
    classes: dict[str, NvmeClass] = Field(min_length=1)
    default_class: str

    @model_validator(mode="after")
    def _default_known(self) -> NvmeCatalog:
        if self.default_class not in self.classes:
            raise ValueError(f"default_class {self.default_class!r} is not one of {sorted(self.classes)}")
        return self


class LustreGates(_Frozen):
    gate_fraction: float = Field(gt=0, le=1)
    #: Per cloud backend: the service's statement that throughput is tier x capacity.
    throughput_sources: dict[str, Annotated[str, Field(pattern=r"^https://\S+$")]]


class StorageCatalog(_Frozen):
    nvme: NvmeCatalog
    lustre: LustreGates

    def nvme_class(self, key: str | None) -> NvmeClass:
        """The class ``key`` (the default class for None); KeyError names the known classes."""
        name = key or self.nvme.default_class
        try:
            return self.nvme.classes[name]
        except KeyError:
            raise KeyError(f"unknown NVMe class {name!r}; known: {', '.join(sorted(self.nvme.classes))}") from None


def load_storage(path: Path = DATA_FILE) -> StorageCatalog:
    # allow_inf_nan=False: a .nan in the data file is refused like any other bad figure.
    return StorageCatalog.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))


@cache
def storage_catalog() -> StorageCatalog:
    return load_storage()
