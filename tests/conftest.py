"""Test-session rules shared by every test module.

Reference data (real captures, upstream chart values and CRDs) lives in ``../shared`` next to the checkout;
tests that need it skip when it is absent, with a reason naming the missing path. Locally that skip is the
right answer. Under ``CI=true`` it is not: a CI job without the reference data would pass while testing
nothing, so such a skip is turned into a failure there (issue 12 point 10).
"""

from __future__ import annotations

import os
import re
from collections.abc import Generator
from typing import Any

import pytest

#: The day managed Kubernetes support windows are judged on in tests (gpufleet/catalog/kubernetes.py reads it):
#: the catalog's read date, so the bundled stacks' tests do not start failing when a calendar date passes. The
#: window checks themselves are tested with their own days (tests/test_kubernetes_versions.py).
os.environ.setdefault("GPUFLEET_TODAY", "2026-12-04")

#: Skip reasons that mean "reference data missing" (the tests' needs_shared-style markers all say so).
REFERENCE_SKIP = re.compile(r"reference data|/shared/|upstream chart values")


def ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def _reason(report: pytest.TestReport) -> str:
    longrepr: Any = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if report.skipped and ci():
        reason = _reason(report)
        if REFERENCE_SKIP.search(reason):
            report.outcome = "failed"
            report.longrepr = (f"CI=true: reference data is missing, which fails in CI instead of skipping "
                               f"(locally it skips): {reason}")
