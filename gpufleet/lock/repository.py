"""Trust anchors of the package repositories the lock's versions come from.

The nvidia_repo role downloads the repository's signing key from the repository itself; that proves
nothing unless the key's fingerprint is checked against a value held here, outside the repository.
"""

from __future__ import annotations

#: NVIDIA's CUDA repository signing key (``3bf863cc.pub``, "cudatools <cudatools@nvidia.com>"), in use since
#: NVIDIA's April 2022 key rotation ("Updating the CUDA Linux GPG Repository Key", NVIDIA technical blog).
#: Rendered into every inventory as ``gpufleet_nvidia_repo_key_fingerprint`` (gpufleet.lock.render).
NVIDIA_REPO_KEY_FINGERPRINT = "EB693B3035CD5710E231E123A4B469963BF863CC"
