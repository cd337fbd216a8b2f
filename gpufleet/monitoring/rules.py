"""gpufleet's Prometheus alert rules, built from the Xid catalog so the two cannot disagree.

The shipped files are rendered from here (``python -m gpufleet.monitoring.rules`` rewrites them; a test
fails when they are stale):

* ``rules.yml``: plain rule groups, what ``promtool check rules`` / ``promtool test rules`` read;
* ``prometheusrule.yaml``: the same groups as a ``monitoring.coreos.com/v1`` PrometheusRule.

Every alert carries ``severity`` (critical / warning / info) and ``action`` (what to do with the node:
``isolate``, ``reboot``, ``reset-gpu``, ``app-error``, ``monitor``, ``remediate``).

Metric sources: dcgm-exporter with ``dcgm-counters.csv`` (labels ``Hostname``, ``gpu``, ``UUID``; Xid
counts per ``xid`` label from ``DCGM_EXP_XID_ERRORS_COUNT``), and ``gpufleet_drift{host,component}``
from gpufleet's drift check. The ``*_VIOLATION`` counters are nanoseconds of throttling (NVML's
``nvmlViolationTime_t.violationTime``; dcgm-exporter's counters file), so ``rate()/1e9`` is the fraction
of time throttled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpufleet.validation.xid import Action, codes_for

HERE = Path(__file__).resolve().parent
RULES_FILE = HERE / "rules.yml"
PROMETHEUS_RULE_FILE = HERE / "prometheusrule.yaml"

#: Series that identify one GPU across dcgm-exporter restarts and driver upgrades.
GPU_KEY = "Hostname, gpu, UUID"
#: dcgm-exporter's scrape job; the GPU Operator names it nvidia-dcgm-exporter, the chart dcgm-exporter.
EXPORTER_JOB = 'job=~".*dcgm-exporter.*"'

_XID_ALERTS = (
    (Action.ISOLATE, "GpuXidIsolate", "critical", "take the node out of service and inspect/RMA the GPU"),
    (Action.REBOOT, "GpuXidReboot", "critical", "drain and reboot the node"),
    (Action.RESET_GPU, "GpuXidResetGpu", "critical", "drain the node and reset the GPU (nvidia-smi -r)"),
    (Action.APP_ERROR, "GpuXidApplicationError", "warning", "the job on this GPU crashed; restart it"),
)


def _xid_rule(action: Action, name: str, severity: str, todo: str) -> dict[str, Any]:
    codes = "|".join(str(c) for c in codes_for(action))
    return {
        "alert": name,
        "expr": f'max by ({GPU_KEY}, xid) (DCGM_EXP_XID_ERRORS_COUNT{{xid=~"{codes}"}}) > 0',
        "labels": {"severity": severity, "action": action.value},
        "annotations": {
            "summary": "Xid {{ $labels.xid }} on {{ $labels.Hostname }} GPU {{ $labels.gpu }}",
            "description": f"NVIDIA's Xid catalog puts Xid {{{{ $labels.xid }}}} in the {action.value} "
            f"class: {todo}.",
        },
    }


def _rule(name: str, expr: str, for_: str, severity: str, action: str, summary: str,
          description: str) -> dict[str, Any]:
    rule: dict[str, Any] = {"alert": name, "expr": expr}
    if for_ != "0m":
        rule["for"] = for_
    rule["labels"] = {"severity": severity, "action": action}
    rule["annotations"] = {"summary": summary, "description": description}
    return rule


def render_rule_groups() -> dict[str, Any]:
    """The plain rule-groups document (``rules.yml``)."""
    on_gpu = "on {{ $labels.Hostname }} GPU {{ $labels.gpu }}"
    health = [
        _rule("GpuDoubleBitEccError",
              f"max by ({GPU_KEY}) (DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) > 0", "0m", "critical", "reset-gpu",
              f"Uncorrectable (double-bit) ECC errors {on_gpu}",
              "{{ $value }} volatile DBE errors; drain and reset the GPU so the row remap takes effect."),
        _rule("GpuRowRemapFailure",
              f"max by ({GPU_KEY}) (DCGM_FI_DEV_ROW_REMAP_FAILURE) > 0", "0m", "critical", "isolate",
              f"Row remapping failed {on_gpu}",
              "The GPU could not remap a failing memory row; take it out of service (RMA)."),
        _rule("GpuThermalThrottling",
              f"max by ({GPU_KEY}) (rate(DCGM_FI_DEV_THERMAL_VIOLATION[5m])) / 1e9 > 0.1", "15m",
              "warning", "monitor", f"Sustained thermal throttling {on_gpu}",
              "Clocks held down by thermal limits {{ $value | humanizePercentage }} of the time for 15m; "
              "check cooling."),
        _rule("GpuPowerThrottling",
              f"max by ({GPU_KEY}) (rate(DCGM_FI_DEV_POWER_VIOLATION[5m])) / 1e9 > 0.5", "30m",
              "warning", "monitor", f"Sustained power throttling {on_gpu}",
              "Clocks held down by the power limit {{ $value | humanizePercentage }} of the time for 30m; "
              "check the configured power limit."),
        _rule("GpuMissingFromExporter",
              f"(max by ({GPU_KEY}, instance) (max_over_time(DCGM_FI_DEV_GPU_TEMP[1h])) "
              f"unless on ({GPU_KEY}) DCGM_FI_DEV_GPU_TEMP) "
              f"and on (instance) (up{{{EXPORTER_JOB}}} == 1)", "5m", "critical", "reboot",
              "GPU {{ $labels.gpu }} ({{ $labels.UUID }}) disappeared from {{ $labels.Hostname }}",
              "The exporter is up but no longer reports this GPU (fallen off the bus?); check the kernel "
              "log for Xid 79 and reboot."),
        _rule("DcgmExporterDown", f"up{{{EXPORTER_JOB}}} == 0", "5m", "warning", "monitor",
              "dcgm-exporter {{ $labels.instance }} is down",
              "No GPU metrics from {{ $labels.instance }} for 5m: GPU alerts are blind there."),
        _rule("GpuLowUtilizationDuringJob",
              'avg by (Hostname, gpu, UUID, exported_namespace, exported_pod) '
              '(avg_over_time(DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}[30m])) < 10', "30m", "info", "monitor",
              "GPU {{ $labels.gpu }} on {{ $labels.Hostname }} idle while allocated to "
              "{{ $labels.exported_namespace }}/{{ $labels.exported_pod }}",
              "Average utilization {{ $value }}% over 30m while a pod holds the GPU."),
        _rule("GpufleetDriftDetected", "max by (host, component) (gpufleet_drift) > 0", "10m", "warning",
              "remediate", "{{ $labels.component }} drifted from the lock on {{ $labels.host }}",
              "gpufleet drift found {{ $labels.component }} on {{ $labels.host }} differing from the "
              "version lock; run gpufleet remediate."),
        # gpufleet validate --apply writes these (gpufleet.validation.actions.metrics_text, node-exporter textfile).
        _rule("GpufleetHealthActionApplied",
              'max by (host, pool, action) (gpufleet_health_actions{decision=~"apply|unchanged"}) > 0', "0m",
              "warning", "monitor", "gpufleet acted on {{ $labels.host }}: {{ $labels.action }}",
              "gpufleet validate --apply tainted/drained {{ $labels.host }} (pool {{ $labels.pool }}) for "
              "{{ $labels.action }}; it is cleared after the healthy streak or with --apply --clear."),
        # action "review": a person decides (fleet-wide cause, or raise --max-share); no single action fits.
        _rule("GpufleetHealthActionsHeld", "max by (pool) (gpufleet_health_actions_held) > 0", "0m", "critical",
              "review", "{{ $value }} unhealthy node(s) of pool {{ $labels.pool }} held back by the rate limit",
              "gpufleet validate --apply found more unhealthy nodes in pool {{ $labels.pool }} than its rate "
              "limit lets it act on; look for a fleet-wide cause before raising --max-share."),
        # A taint or drain is a stop-gap: a day later the node needs its repair (reset, reboot, RMA) or the
        # finding needs a look; "keep" is a node healthy again but not yet for the whole streak.
        _rule("GpufleetHealthActionLong",
              'max by (host, pool, action) (gpufleet_health_actions{decision=~"apply|unchanged|keep"}) > 0',
              "24h", "warning", "review", "{{ $labels.host }} tainted/drained for {{ $labels.action }} over a day",
              "{{ $labels.host }} (pool {{ $labels.pool }}) has carried gpufleet's {{ $labels.action }} action for "
              "24 hours: repair the node, or clear it with gpufleet validate --apply --clear."),
        # The watcher (gpufleet.validation.watcher) writes these: a node without a report is never judged.
        _rule("GpufleetHealthReportsMissing",
              'max by (pool) (gpufleet_health_watch_reports{state="missing"}) > 0', "30m", "warning", "review",
              "{{ $value }} GPU node(s) of pool {{ $labels.pool }} not reporting to the health watcher",
              "The health watcher's agent on {{ $value }} node(s) of pool {{ $labels.pool }} did not answer for "
              "30 minutes: those nodes are neither checked nor cleared (kubectl -n gpufleet get pods)."),
        _rule("GpufleetHealthWatcherStalled",
              "time() - max(gpufleet_health_watch_last_cycle_timestamp_seconds) > 3600", "10m", "warning",
              "review", "the gpufleet health watcher has not finished a cycle for over an hour",
              "No GPU node was checked or acted on for an hour: see the gpufleet-health-controller pod's log "
              "(kubectl -n gpufleet logs deploy/gpufleet-health-controller)."),
    ]
    return {
        "groups": [
            {"name": "gpufleet-xid", "rules": [_xid_rule(*a) for a in _XID_ALERTS]},
            {"name": "gpufleet-gpu-health", "rules": health},
        ]
    }


def render_prometheus_rule(
    name: str = "gpufleet-gpu-alerts", namespace: str = "gpu-operator"
) -> dict[str, Any]:
    """The same groups as a prometheus-operator PrometheusRule object."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "gpufleet"},
        },
        "spec": render_rule_groups(),
    }


def dump(doc: dict[str, Any]) -> str:
    header = "# Rendered by gpufleet.monitoring.rules (python -m gpufleet.monitoring.rules); do not edit.\n"
    return header + "---\n" + yaml.safe_dump(doc, sort_keys=False, width=120)


def write_files() -> None:
    RULES_FILE.write_text(dump(render_rule_groups()))
    PROMETHEUS_RULE_FILE.write_text(dump(render_prometheus_rule()))


if __name__ == "__main__":
    write_files()
