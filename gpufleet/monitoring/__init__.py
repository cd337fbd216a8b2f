"""Monitoring data gpufleet ships: dcgm-exporter counters, Prometheus alert rules, Grafana dashboard.

Package data (read with the paths below):

* ``dcgm-counters.csv``: dcgm-exporter collectors file (``-f`` / the chart's ``customMetrics``);
* ``rules.yml`` / ``prometheusrule.yaml``: alert rules, rendered by :mod:`gpufleet.monitoring.rules`;
* ``rules-tests.yml``: ``promtool test rules`` unit tests of ``rules.yml``;
* ``grafana-dashboard.json``: a Grafana dashboard over the counters above and ``gpufleet_drift``.
"""

from pathlib import Path

MONITORING_DIR = Path(__file__).resolve().parent
COUNTERS_CSV = MONITORING_DIR / "dcgm-counters.csv"
RULES_FILE = MONITORING_DIR / "rules.yml"
PROMETHEUS_RULE_FILE = MONITORING_DIR / "prometheusrule.yaml"
RULES_TESTS_FILE = MONITORING_DIR / "rules-tests.yml"
DASHBOARD_FILE = MONITORING_DIR / "grafana-dashboard.json"

#: The drift metric gpufleet's drift check exports (labels host, component).
DRIFT_METRIC = "gpufleet_drift"
