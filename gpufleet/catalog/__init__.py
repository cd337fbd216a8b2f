"""GPU catalog: per-model facts (power range, NVLink, NVSwitch, MIG, driver floor, acceptance gates).

The data is ``gpus.yaml`` next to this module; every number carries its source there.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpufleet.catalog.model import BusbwGate, GpuModel

__all__ = ["GPUS", "BusbwGate", "GpuModel", "get_gpu", "load_catalog"]

DATA_FILE = Path(__file__).with_name("gpus.yaml")


def load_catalog(path: Path = DATA_FILE) -> dict[str, GpuModel]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    return {key: GpuModel.model_validate({"key": key, **entry}) for key, entry in raw["gpus"].items()}


GPUS: dict[str, GpuModel] = load_catalog()


def get_gpu(key: str) -> GpuModel:
    """The catalog entry for ``key``; KeyError names the known keys."""
    try:
        return GPUS[key]
    except KeyError:
        raise KeyError(f"unknown GPU model {key!r}; known: {', '.join(sorted(GPUS))}") from None
