"""The dcgm role's preflight table (the generated layer's gpufleet_compat) agrees with the lock's dcgm-cuda rule."""

from __future__ import annotations

import pytest
import yaml

from gpufleet import REPO_ROOT
from gpufleet.lock.compat import dcgm_cuda_majors
from gpufleet.lock.versions import vtuple

LAYER = REPO_ROOT / "roles" / "gpufleet_defaults" / "defaults" / "main.yml"


def role_cuda_majors(dcgm: str) -> tuple[int, ...]:
    """What the role's preflight accepts: the CUDA majors whose first DCGM release is <= ``dcgm``."""
    since: dict[str, str] = yaml.safe_load(LAYER.read_text())["gpufleet_compat"]["dcgm4_cuda_majors"]
    return tuple(sorted(int(m) for m, first in since.items() if vtuple(dcgm) >= vtuple(first)))


@pytest.mark.parametrize("dcgm", ["4.0.0", "4.1.1", "4.2.3", "4.3.1", "4.4.0", "4.4.1", "4.5.0"])
def test_role_and_lock_accept_the_same_cuda_majors(dcgm: str) -> None:
    assert role_cuda_majors(dcgm) == dcgm_cuda_majors(dcgm)
