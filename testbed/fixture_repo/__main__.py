"""``python -m testbed.fixture_repo build --out DIR [--force]``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from testbed.fixture_repo.builder import BuildError, build_repo


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.fixture_repo")
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse) the signed fixture repository")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--force", action="store_true", help="rebuild even when the stamp matches")
    ns = p.parse_args(argv)
    start = time.monotonic()
    try:
        info = build_repo(ns.out, force=ns.force)
    except BuildError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    what = "built" if info.rebuilt else "up to date"
    print(f"{what}: {info.packages} packages in {info.repo_dir} ({time.monotonic() - start:.1f}s)")
    print(f"key: {info.key_file} ({info.fingerprint})")
    print(f"apt source: {info.apt_source()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
