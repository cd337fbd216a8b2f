"""The drift report as a node_exporter textfile-collector file, so drift can alert.

``gpufleet_drift{host,component,severity}`` is 1 for each component with a pending change of that severity and
0 otherwise: every component that ran has both a ``severity="security"`` series (a change that weakens what apt
trusts: ``gpufleet.drift.security``) and a ``severity="normal"`` one, so a fix shows as a drop to 0 on a series
that stays, and ``max by (host, component)`` still says "drifted at all". Hosts whose check failed get
``gpufleet_drift_check_error{host} 1`` instead of guessed values.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from gpufleet.drift.report import DriftReport

DEFAULT_TEXTFILE = Path("/var/lib/node_exporter/textfile_collector/gpufleet_drift.prom")


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_textfile(report: DriftReport, *, stack: str, now: float | None = None) -> str:
    now = time.time() if now is None else now
    failed = set(report.error_hosts)
    st = _label(stack)
    lines = [
        "# HELP gpufleet_drift 1 when the component has changes of this severity pending against the stack's lock "
        "and settings (security: the change weakens what apt trusts).",
        "# TYPE gpufleet_drift gauge",
    ]
    for host in report.hosts:
        if host in failed:
            continue
        for comp in report.components.get(host, []):
            weak = bool(report.security(host, comp))
            normal = any(i.component == comp and i.severity != "security" for i in report.for_host(host))
            for severity, value in (("normal", normal), ("security", weak)):
                lines.append(f'gpufleet_drift{{stack="{st}",host="{_label(host)}",component="{_label(comp)}",'
                             f'severity="{severity}"}} {int(value)}')
    lines += [
        "# HELP gpufleet_drift_check_error 1 when the drift check could not run on the host.",
        "# TYPE gpufleet_drift_check_error gauge",
    ]
    lines += [f'gpufleet_drift_check_error{{stack="{st}",host="{_label(h)}"}} {int(h in failed)}'
              for h in report.hosts]
    lines += [
        "# HELP gpufleet_drift_last_run_timestamp_seconds When the drift check last finished.",
        "# TYPE gpufleet_drift_last_run_timestamp_seconds gauge",
        f'gpufleet_drift_last_run_timestamp_seconds{{stack="{st}"}} {now:.3f}',
    ]
    return "\n".join(lines) + "\n"


def write_textfile(path: Path, text: str) -> None:
    """Atomic replace: node_exporter never reads a half-written file (temp file in the same directory)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
