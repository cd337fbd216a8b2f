"""Under CI=true a test skipped for missing reference data fails; locally it skips with its reason."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).parent

SAMPLE = '''
import pytest

@pytest.mark.skipif(True, reason="reference data /nowhere/shared/fixtures/real is absent")
def test_needs_shared():
    pass

@pytest.mark.skipif(True, reason="needs dpkg-deb")
def test_needs_a_tool():
    pass
'''


def _run(tmp_path: Path, ci: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"CI": ci, "PYTHONPATH": str(TESTS)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "conftest",
                           str(tmp_path / "test_sample.py")], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=120, check=False)


# A skipif fires during setup, so its failure is reported as an error: the run fails (exit 1) all the same.
@pytest.mark.parametrize(("ci", "summary", "rc"), [("true", "1 skipped, 1 error", 1), ("", "2 skipped", 0)])
def test_reference_skips_fail_only_in_ci(tmp_path: Path, ci: str, summary: str, rc: int) -> None:
    r = _run(tmp_path, ci)
    assert summary in r.stdout, r.stdout
    assert r.returncode == rc
    if ci:
        assert "CI=true: reference data is missing" in r.stdout
    else:
        assert "reference data /nowhere/shared/fixtures/real is absent" in r.stdout
