"""The signed fixture APT repository that stands in for NVIDIA's CUDA repository in sandbox and CI.

``build_repo(out)`` builds ``<out>/ubuntu2204/x86_64/`` (flat repo, signed with a throwaway key
exported as ``3bf863cc.pub``); ``python -m testbed.fixture_repo build --out DIR`` does the same.
"""

from testbed.fixture_repo.builder import KEY_NAME, REPO_SUBDIR, BuildError, RepoInfo, build_repo
from testbed.fixture_repo.catalogue import Package, catalogue

__all__ = ["KEY_NAME", "REPO_SUBDIR", "BuildError", "Package", "RepoInfo", "build_repo", "catalogue"]
