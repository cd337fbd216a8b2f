"""Bundled version profiles (data in profiles.yaml next to this module)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict

from gpufleet.lock.model import ComponentVersions

DATA_FILE = Path(__file__).with_name("profiles.yaml")


class _ProfileHead(BaseModel):
    """The entries a profile lists before the component versions (see ComponentVersions)."""

    name: str
    description: str
    #: Catalog keys the profile was put together for (documentation and tests; not a restriction).
    gpus: tuple[str, ...]
    driver: str
    kernel_module: Literal["open", "proprietary"]


class Profile(ComponentVersions, _ProfileHead):
    """A complete version set; fabric manager and NSCQ follow the driver (see profiles.yaml)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def versions(self) -> dict[str, str | None]:
        """The version entries, fabric manager and NSCQ included (both = driver)."""
        data: dict[str, str | None] = self.model_dump(exclude={"name", "description", "gpus"})
        data["fabric_manager"] = self.driver
        data["nscq"] = self.driver
        return data


def load_profiles(path: Path = DATA_FILE) -> dict[str, Profile]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    return {name: Profile.model_validate({"name": name, **entry}) for name, entry in raw.items()}


PROFILES: dict[str, Profile] = load_profiles()
