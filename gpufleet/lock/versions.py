"""Parsing of the version strings a lock holds (driver, CUDA, NCCL builds, cuDNN, DCGM)."""

from __future__ import annotations

import re

#: Version formats per lock entry; an override that does not match is reported, never guessed at.
FORMATS: dict[str, tuple[str, str]] = {
    "driver": (r"^\d{3}\.\d{1,3}(\.\d{1,3})?$", "570.172.08"),
    "kernel_module": (r"^(open|proprietary)$", "open"),
    "fabric_manager": (r"^\d{3}\.\d{1,3}(\.\d{1,3})?$", "570.172.08"),
    "nscq": (r"^\d{3}\.\d{1,3}(\.\d{1,3})?$", "570.172.08"),
    "cuda": (r"^\d{2}\.\d{1,2}\.\d{1,2}$", "12.8.1"),
    "cudnn": (r"^\d+\.\d+\.\d+\.\d+$", "9.8.0.87"),
    "nccl": (r"^\d+\.\d+\.\d+-\d+\+cuda\d+\.\d+$", "2.26.2-1+cuda12.8"),
    "dcgm": (r"^\d+\.\d+\.\d+$", "4.4.1"),
    "container_toolkit": (r"^\d+\.\d+\.\d+$", "1.18.0"),
    "gpu_operator": (r"^v\d+\.\d+\.\d+$", "v26.7.0"),
    "dcgm_exporter_chart": (r"^\d+\.\d+\.\d+$", "4.8.2"),
    "network_operator": (r"^\d+\.\d+\.\d+$", "25.7.0"),
    "lustre_csi": (r"^\d+\.\d+\.\d+$", "0.1.12"),
    "azurelustre_csi": (r"^\d+\.\d+\.\d+$", "0.6.0"),
    "kube_prometheus_stack": (r"^\d+\.\d+\.\d+$", "88.5.3"),
    "aws_efa_device_plugin": (r"^v\d+\.\d+\.\d+$", "v0.5.7"),
    "kueue": (r"^\d+\.\d+\.\d+$", "0.19.2"),
    "rdma": (r"^(inbox|\d+\.\d+\.\d+(-\d+)?)$", "inbox or a DOCA-OFED version such as 2.9.1"),
    "lustre_client": (r"^\d+\.\d+\.\d+$", "2.15.6"),
    "kernel": (r"^$|^\d+\.\d+\.\d+-\d+-[a-z0-9-]+$", "5.15.0-139-generic, or empty for no pin"),
}


def matches_format(key: str, value: str) -> bool:
    pattern, _ = FORMATS[key]
    # fullmatch: with re.match, "$" also matches before a trailing newline ("570.172.08\n" would pass).
    # re.ASCII: \d would otherwise take full-width and other Unicode digits ("５７０.172.08") into versions.yml.
    return re.fullmatch(pattern, value, re.ASCII) is not None


def vtuple(version: str) -> tuple[int, ...]:
    """Numeric tuple of a dotted version ("570.172.08" -> (570, 172, 8)); tuples compare as NVIDIA's do."""
    return tuple(int(p) for p in re.split(r"[.]", version))


def driver_branch(driver: str) -> int:
    return int(driver.split(".", 1)[0])


def cuda_major_minor(cuda: str) -> tuple[int, int]:
    major, minor = cuda.split(".")[:2]
    return int(major), int(minor)


def cuda_update(cuda: str) -> int:
    """CUDA toolkit 12.8.1 is "12.8 Update 1": the third number is the update release."""
    parts = cuda.split(".")
    return int(parts[2]) if len(parts) > 2 else 0


def nccl_cuda_build(nccl: str) -> tuple[int, int]:
    """The CUDA major.minor an NCCL package was built for ("2.26.2-1+cuda12.8" -> (12, 8))."""
    m = re.search(r"\+cuda(\d+)\.(\d+)$", nccl)
    if not m:
        raise ValueError(f"NCCL version {nccl!r} has no +cudaX.Y build suffix")
    return int(m.group(1)), int(m.group(2))


def nccl_upstream(nccl: str) -> str:
    """NCCL's own version without the Debian revision and build ("2.26.2-1+cuda12.8" -> "2.26.2")."""
    return nccl.split("-", 1)[0]
