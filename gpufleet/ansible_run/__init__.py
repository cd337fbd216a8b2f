"""Playbook runs: live per-host progress, closing summary, machine-readable result.

Every playbook (converge, drift check, remediation) runs through ``run_playbook``. Events are folded
by ``build_result``/``ResultBuilder`` (pure, testable on recorded events); the JSON keys of
``RunResult.to_json()`` are documented in ``gpufleet.ansible_run.results``.
"""

from gpufleet.ansible_run.display import print_summary, summary
from gpufleet.ansible_run.events import ResultBuilder, build_result
from gpufleet.ansible_run.results import (
    HostStats,
    ItemResult,
    Notice,
    RunResult,
    TaskResult,
    changes_by_host,
)
from gpufleet.ansible_run.runner import ANSIBLE_CFG, run_playbook

__all__ = [
    "ANSIBLE_CFG",
    "HostStats",
    "ItemResult",
    "Notice",
    "ResultBuilder",
    "RunResult",
    "TaskResult",
    "build_result",
    "changes_by_host",
    "print_summary",
    "run_playbook",
    "summary",
]
