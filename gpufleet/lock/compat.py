"""NVIDIA's compatibility tables the rules check against. Each table names its source.

Sources
-------
CUDA_MIN_DRIVER: NVIDIA CUDA Toolkit Release Notes, "CUDA Toolkit and Corresponding Driver Versions",
  Linux x86_64 column (https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/index.html, and the
  per-release archives https://docs.nvidia.com/cuda/archive/<x.y.z>/cuda-toolkit-release-notes/).
  The issue's GA numbers were checked against the table; the update releases come from it as well
  (cross-checked with a transcription of the same table in a public repository's
  LINUX_X86_64_CUDA_THRESHOLDS list, which quotes https://docs.nvidia.com/cuda/cuda-toolkit-release-notes/#id7).
CUDA_MINOR_COMPAT_FLOOR: CUDA Compatibility guide, "Minor Version Compatibility", Table 1
  (https://docs.nvidia.com/deploy/cuda-compatibility/minor-version-compatibility.html):
  CUDA 12.x >= 525 (release notes give 525.60.13), CUDA 13.x >= 580.
CUDNN_CUDA_MAJORS: cuDNN 9 ships one build per CUDA major (apt: libcudnn9-cuda-12 / libcudnn9-cuda-13;
  redist JSON "cuda_variant"). NVIDIA's CUDA 13.0.0 images pin libcudnn9-cuda-13=9.12.0.46-1
  (../shared/fixtures/real/apt/cuda-container-images_x86_64_pinned-apt-versions.csv), the first
  CUDA 13 build. CUDA 11 builds are assumed for 8.x and 9.0-9.10 only (not verified here; no bundled
  profile uses CUDA 11).
DCGM_CUDA_MAJORS: DCGM 4 ships per-CUDA-major plugin packages datacenter-gpu-manager-4-cuda<major>
  (NVIDIA/dcgm-exporter Dockerfile, ../shared/fixtures/real/apt/NVIDIA-APT-NAMING-RULES.md section 7);
  the cuda13 package appears with DCGM 4.4 (first release after CUDA 13.0; secondary sources only --
  verify against the DCGM release notes before relying on 4.3.x).
"""

from __future__ import annotations

from gpufleet.lock.versions import vtuple

#: (CUDA major, minor, update) -> minimum Linux x86_64 driver.
CUDA_MIN_DRIVER: dict[tuple[int, int, int], str] = {
    (12, 0, 0): "525.60.13",
    (12, 0, 1): "525.85.12",
    (12, 1, 0): "530.30.02",
    (12, 1, 1): "530.30.02",
    (12, 2, 0): "535.54.03",
    (12, 2, 1): "535.86.09",
    (12, 2, 2): "535.104.05",
    (12, 3, 0): "545.23.06",
    (12, 3, 1): "545.23.08",
    (12, 3, 2): "545.23.08",
    (12, 4, 0): "550.54.14",
    (12, 4, 1): "550.54.15",
    (12, 5, 0): "555.42.02",
    (12, 5, 1): "555.42.06",
    (12, 6, 0): "560.28.03",
    (12, 6, 1): "560.35.03",
    (12, 6, 2): "560.35.03",
    (12, 6, 3): "560.35.05",
    (12, 8, 0): "570.26",
    (12, 8, 1): "570.124.06",
    (12, 9, 0): "575.51.03",
    (12, 9, 1): "575.57.08",
    (13, 0, 0): "580.65.06",
    (13, 0, 1): "580.82.07",
    (13, 0, 2): "580.95.05",
}

#: CUDA major -> oldest driver that runs it under minor version compatibility.
CUDA_MINOR_COMPAT_FLOOR: dict[int, str] = {
    12: "525.60.13",
    13: "580",
}

#: NCCL builds known in NVIDIA's repository (fixture table in docs/architecture.md); used to suggest fixes.
KNOWN_NCCL = (
    "2.21.5-1+cuda12.4",
    "2.25.1-1+cuda12.8",
    "2.26.2-1+cuda12.8",
    "2.26.5-1+cuda12.9",
    "2.27.3-1+cuda12.9",
    "2.27.7-1+cuda13.0",
    "2.28.3-1+cuda13.0",
)


def cuda_min_driver(major: int, minor: int, update: int) -> str | None:
    return CUDA_MIN_DRIVER.get((major, minor, update))


#: cuDNN 9: CUDA major -> (first release with a build for it, first release without one or None).
CUDNN9_CUDA_MAJORS: dict[int, tuple[str, str | None]] = {
    11: ("9.0.0", "9.11.0"),
    12: ("9.0.0", None),
    13: ("9.12.0", None),
}
#: DCGM 4: CUDA major -> first release with its plugin package (datacenter-gpu-manager-4-cuda<major>).
DCGM4_CUDA_MAJORS: dict[int, str] = {
    11: "4.0.0",
    12: "4.0.0",
    13: "4.4.0",
}


def cudnn_cuda_majors(cudnn: str) -> tuple[int, ...]:
    v = vtuple(cudnn)
    if v[0] == 8:
        return (11, 12) if v[:2] >= (8, 9) else (11,)
    if v[0] == 9:
        return tuple(m for m, (first, end) in CUDNN9_CUDA_MAJORS.items()
                     if v >= vtuple(first) and (end is None or v < vtuple(end)))
    return ()


def dcgm_cuda_majors(dcgm: str) -> tuple[int, ...]:
    v = vtuple(dcgm)
    if v[0] == 3:
        return (11, 12)
    if v[0] == 4:
        return tuple(m for m, first in DCGM4_CUDA_MAJORS.items() if v >= vtuple(first))
    return ()


def suggest_nccl(major: int, minor: int) -> str | None:
    """Newest known NCCL build for exactly CUDA major.minor, else the newest older one of that major."""
    same = [n for n in KNOWN_NCCL if n.endswith(f"+cuda{major}.{minor}")]
    if same:
        return same[-1]
    older = [n for n in KNOWN_NCCL if n.split("+cuda")[1].split(".")[0] == str(major)
             and int(n.split("+cuda")[1].split(".")[1]) < minor]
    return older[-1] if older else None
