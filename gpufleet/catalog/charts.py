"""Helm chart catalog: each chart's repository, namespace, lock entry and known versions with their source.

The data is ``charts.yaml`` next to this module. The lock holds the version a stack uses (``lock_entry``);
this catalog says which versions exist and where that is recorded, so a version nobody can check is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, model_validator

DATA_FILE = Path(__file__).with_name("charts.yaml")


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ChartVersion(_Frozen):
    #: Public record of this version: its release page (or the folder it is published from).
    source: str = Field(pattern=r"^https://\S+$")
    #: The chart repository's index.yaml that lists this version (``helm repo add`` reads it); None for an OCI
    #: registry, which has no index (``helm pull oci://...`` resolves the tag itself).
    index: str | None = Field(default=None, pattern=r"^https://\S+/index\.yaml$")
    #: sha256 of the chart archive as the index lists it, where it was read.
    digest: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    #: Folder of ../shared/upstream/ with this version's values.yaml / CRDs (None: no upstream copy).
    upstream: str | None = None


class ChartEntry(_Frozen):
    name: str
    #: An HTTPS chart repository (with an index.yaml) or an OCI registry path (``oci://``; the chart's own name
    #: is the last path element, as ``helm install NAME oci://REGISTRY/PATH/CHART`` takes it).
    repo: str = Field(pattern=r"^(https|oci)://")
    namespace: str = Field(pattern=r"^[a-z0-9]([a-z0-9-]*[a-z0-9])?$")
    #: Lock entry (gpufleet.lock.VERSION_KEYS) holding the version a stack installs.
    lock_entry: str
    #: Version used when the profile sets none (charts the profiles do not list).
    default: str | None = None
    versions: dict[str, ChartVersion]

    @property
    def oci(self) -> bool:
        return self.repo.startswith("oci://")

    @model_validator(mode="after")
    def _index_matches_repo(self) -> ChartEntry:
        for version, entry in self.versions.items():
            if (entry.index is None) != self.oci:
                kind = "an OCI registry has no index.yaml" if self.oci else "an HTTPS repository lists it in index.yaml"
                raise ValueError(f"chart {self.name} {version}: index must match its repository ({kind})")
        return self

    @model_validator(mode="after")
    def _default_known(self) -> ChartEntry:
        if self.default is not None and self.default not in self.versions:
            raise ValueError(f"default {self.default} of chart {self.name} is not among its versions")
        return self


class Image(_Frozen):
    #: Tag and digest: the tag says what it is, the digest makes it immutable.
    ref: str = Field(pattern=r"^[a-z0-9][a-z0-9./-]*:[A-Za-z0-9_][A-Za-z0-9_.-]*@sha256:[0-9a-f]{64}$")
    source: str = Field(pattern=r"^https://\S+$")


def load_charts(path: Path = DATA_FILE) -> dict[str, ChartEntry]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    return {name: ChartEntry.model_validate({"name": name, **{k: _str_keys(k, v) for k, v in entry.items()}})
            for name, entry in raw["charts"].items()}


def _str_keys(key: str, value: Any) -> Any:
    # YAML reads 25.7.0 as a string but 4.8 would be a float: version keys are always strings.
    return {str(k): v for k, v in value.items()} if key == "versions" else value


def load_images(path: Path = DATA_FILE) -> dict[str, Image]:
    raw: dict[str, Any] = yaml.safe_load(path.read_text())
    return {name: Image.model_validate(entry) for name, entry in raw.get("images", {}).items()}


CHARTS: dict[str, ChartEntry] = load_charts()
IMAGES: dict[str, Image] = load_images()
#: Lock entry -> chart.
BY_LOCK_ENTRY: dict[str, ChartEntry] = {c.lock_entry: c for c in CHARTS.values()}


def chart_default(lock_entry: str) -> str:
    """The catalog's default version for a chart lock entry that profiles may leave out."""
    default = BY_LOCK_ENTRY[lock_entry].default
    if default is None:
        raise KeyError(f"chart lock entry {lock_entry} has no default: every profile must set it")
    return default
