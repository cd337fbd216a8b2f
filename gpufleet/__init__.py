"""gpufleet: infrastructure-as-code for ML GPU clusters."""

from pathlib import Path

__version__ = "0.1.0"

#: Repository root (the package lives directly under it in a checkout).
REPO_ROOT = Path(__file__).resolve().parent.parent
