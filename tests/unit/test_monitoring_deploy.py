"""deploy/monitoring: the Grafana dashboard, the Prometheus alert rules (plain and as a
PrometheusRule) and the PodMonitors, checked against the metrics the worker and the monitor
really expose, against promtool, and against the pods they scrape.

A dashboard or a rule naming a metric nobody exposes shows "No data" or never fires, which looks
exactly like a healthy system: hence the cross-check of every expression against the code.
"""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from cronwarden.monitor.metrics import Metrics
from cronwarden.worker_metrics import WorkerMetrics
from tests.support.manifests import monitoring_problems, render

REPO_ROOT = Path(__file__).resolve().parents[2]
MONITORING = REPO_ROOT / "deploy" / "monitoring"
DASHBOARD = MONITORING / "grafana-dashboard.json"
ALERT_RULES = MONITORING / "alert-rules.yaml"
EXAMPLE = REPO_ROOT / "deploy" / "kubernetes" / "example"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}

# --- the metrics the code exposes --------------------------------------------------------------

# The series names each metric type puts in the exposition, as PromQL must spell them.
SERIES_SUFFIXES = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
}


def series_names(families: list[tuple[str, str]]) -> set[str]:
    """(family name, type) pairs, as the client library's parser and collectors give them (a
    counter's family name without its `_total`), to the series names a query can select."""
    return {name + suffix for name, kind in families for suffix in SERIES_SUFFIXES[kind]}


def worker_families() -> list[tuple[str, str]]:
    registry = CollectorRegistry()
    WorkerMetrics(registry=registry)
    return [(family.name, family.type) for family in registry.collect()]


def monitor_families() -> list[tuple[str, str]]:
    # Set what the page shows only once known: a pause check, a pass, a success, every counter.
    metrics = Metrics()
    metrics.seconds_since_success = {"nightly-reconcile": 42.0}
    metrics.temporal_reachable = True
    metrics.last_pass_at = 1_700_000_000.0
    metrics.database_up = True
    metrics.notification_sent("slack")
    metrics.notification_failed("slack")
    metrics.notification_dead("slack")
    return [(f.name, f.type) for f in text_string_to_metric_families(metrics.render())]


def exposed() -> set[str]:
    return series_names(worker_families()) | series_names(monitor_families())


def test_the_metric_inventory_reads_both_processes_with_their_types() -> None:
    names = exposed()
    assert {
        "cronwarden_runs_total",
        "cronwarden_guard_phase_seconds_bucket",
        "cronwarden_lease_takeovers_total",
        "cronwarden_schedule_seconds_since_last_success",
        "cronwarden_notifications_dead_lettered_total",
        "cronwarden_monitor_last_pass_timestamp_seconds",
    } <= names
    # A counter is selected by its `_total` series, a gauge by its own name only.
    assert "cronwarden_runs" not in names
    assert "cronwarden_open_incidents_total" not in names


# --- reading PromQL ----------------------------------------------------------------------------

PROMQL_WORDS = {
    "and", "or", "unless", "by", "without", "on", "ignoring", "group_left", "group_right",
    "offset", "bool", "atan2", "inf", "nan",
}  # fmt: skip
GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
IDENTIFIER = re.compile(r"(?<![\w.:])[A-Za-z_:][\w:]*")


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects: every identifier that is not a function, a
    keyword, a label (in a matcher or a grouping) or a duration. Grafana's variables sit in
    strings and ranges, which are dropped."""
    text = re.sub(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = GROUPING.sub(" ", text)
    names = set()
    for match in IDENTIFIER.finditer(text):
        if re.match(r"\s*\(", text[match.end() :]) or match[0] in PROMQL_WORDS:
            continue
        names.add(match[0])
    return names


def test_the_promql_reader_finds_metrics_and_nothing_else() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (le, phase) (rate(cronwarden_fires_due_total{a=~"$x",'
        ' b="c d"}[$__rate_interval]))) / on (pod) group_left (sink) up offset 30m'
        " or time() - vector(1e3) > bool 300"
    )
    assert promql_metric_names(expr) == {"cronwarden_fires_due_total", "up"}


def dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def dashboard_panels() -> list[dict[str, Any]]:
    return [p for p in dashboard()["panels"] if p["type"] != "row"]


def dashboard_exprs() -> list[str]:
    return [t["expr"] for p in dashboard_panels() for t in p["targets"]]


def alert_rules() -> list[dict[str, Any]]:
    groups = yaml.safe_load(ALERT_RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"]]


def variable(name: str) -> dict[str, Any]:
    variables: list[dict[str, Any]] = dashboard()["templating"]["list"]
    [found] = [v for v in variables if v["name"] == name]
    return found


def test_every_expression_of_the_dashboard_and_the_rules_names_only_exposed_metrics() -> None:
    exprs = dashboard_exprs() + [rule["expr"] for rule in alert_rules()]
    assert len(exprs) > 20, "the reader found too few expressions to mean anything"
    unknown = {expr: promql_metric_names(expr) - exposed() for expr in exprs}
    assert {e: names for e, names in unknown.items() if names} == {}
    assert all(promql_metric_names(expr) for expr in exprs), "an expression selecting nothing"
    query = variable("schedule_id")["query"]["query"]
    match = re.fullmatch(r"label_values\((\w+), schedule_id\)", query)
    assert match is not None and match[1] in exposed(), query


def test_the_dashboard_shows_every_metric_the_worker_and_the_monitor_expose() -> None:
    shown = {name for expr in dashboard_exprs() for name in promql_metric_names(expr)}
    families = worker_families() + monitor_families()
    missing = {name for name, kind in families if not series_names([(name, kind)]) & shown}
    assert missing == set()


# --- the dashboard -----------------------------------------------------------------------------


def test_the_dashboard_reads_its_datasource_and_schedules_from_variables() -> None:
    model = dashboard()
    assert model["uid"] == "cronwarden" and model["timezone"] == "utc"
    source = variable("datasource")
    assert (source["type"], source["query"]) == ("datasource", "prometheus")
    schedules = variable("schedule_id")
    assert schedules["datasource"] == DATASOURCE
    assert schedules["multi"] and schedules["includeAll"] and schedules["allValue"] == ".*"
    for panel in dashboard_panels():
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert all(t["datasource"] == DATASOURCE for t in panel["targets"]), panel["title"]
        assert len(panel["description"].split()) >= 10, f"{panel['title']} says what it shows"
    filtered = [e for e in dashboard_exprs() if "cronwarden_runs_total" in e]
    assert filtered and all('schedule_id=~"$schedule_id"' in e for e in filtered)


def test_the_dashboards_panels_have_unique_ids_and_never_overlap() -> None:
    panels = dashboard()["panels"]
    assert len({p["id"] for p in panels}) == len(panels)
    taken: dict[tuple[int, int], str] = {}
    for panel in panels:
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24, panel["title"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"{panel['title']} overlaps {taken[(x, y)]}"
                taken[(x, y)] = panel["title"]


def test_fires_due_are_shown_by_what_exists_and_the_panel_says_so() -> None:
    [panel] = [p for p in dashboard_panels() if p["title"] == "Fires committed vs overdue"]
    exprs = [t["expr"] for t in panel["targets"]]
    assert any('outcome="ran"' in e and "cronwarden_runs_total" in e for e in exprs)
    assert any("cronwarden_schedules_overdue" in e for e in exprs)
    assert "no count of fires due" in panel["description"]


# --- the alert rules ---------------------------------------------------------------------------


def test_every_alert_waits_has_a_severity_and_says_what_to_do() -> None:
    rules = alert_rules()
    assert {r["alert"] for r in rules} >= {
        "CronwardenMonitorDown",
        "CronwardenMonitorDatabaseDown",
        "CronwardenScheduleOverdue",
        "CronwardenNotificationsDeadLettered",
        "CronwardenCommitFailures",
        "CronwardenRunsFailing",
        "CronwardenMonitorTemporalUnreachable",
    }
    for rule in rules:
        assert re.fullmatch(r"\d+m", rule["for"]), rule["alert"]
        assert rule["labels"]["severity"] in {"critical", "warning", "info"}, rule["alert"]
        assert set(rule["annotations"]) == {"summary", "description"}, rule["alert"]
        assert len(rule["annotations"]["description"].split()) >= 20, rule["alert"]


def test_the_prometheusrule_carries_exactly_the_alert_rules_groups() -> None:
    rule = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert rule["spec"]["groups"] == yaml.safe_load(ALERT_RULES.read_text())["groups"], (
        "prometheusrule.yaml's spec.groups differ from alert-rules.yaml: copy the groups over"
    )
    assert monitoring_problems(rule) == []


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("promtool")
    if binary is None:
        pytest.skip("promtool (Debian's prometheus package) is not installed")
    return subprocess.run(
        [binary, *args], capture_output=True, text=True, timeout=120, check=False, cwd=MONITORING
    )


def test_promtool_accepts_the_rules_and_their_unit_tests_pass() -> None:
    checked = promtool("check", "rules", ALERT_RULES.name)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in checked.stdout
    tested = promtool("test", "rules", "alert-rules.test.yaml")
    assert tested.returncode == 0, tested.stdout + tested.stderr


def test_promtool_parses_every_dashboard_expression(tmp_path: Path) -> None:
    # Grafana fills these in before Prometheus sees the query.
    values = {"$__rate_interval": "5m", "$schedule_id": ".*"}
    rules = []
    for i, expr in enumerate(dashboard_exprs()):
        for name, value in values.items():
            expr = expr.replace(name, value)
        rules.append({"record": f"dashboard:expression_{i}", "expr": expr})
    path = tmp_path / "dashboard-rules.yaml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_promtool_catches_a_rule_that_fires_where_it_must_not(tmp_path: Path) -> None:
    for name in ("alert-rules.yaml", "alert-rules.test.yaml"):
        shutil.copy(MONITORING / name, tmp_path / name)
    rules = tmp_path / "alert-rules.yaml"
    broken = rules.read_text().replace("and cronwarden_monitor_database_up == 1", "")
    assert broken != rules.read_text()
    rules.write_text(broken)
    tested = promtool("test", "rules", str(tmp_path / "alert-rules.test.yaml"))
    assert tested.returncode != 0 and "CronwardenMonitorStalled" in tested.stdout + tested.stderr


# --- the PodMonitors ---------------------------------------------------------------------------


def test_the_pod_monitors_scrape_the_worker_and_monitor_pods_on_their_metrics_ports() -> None:
    docs = render(EXAMPLE)
    monitors = [d for d in docs if d["kind"] == "PodMonitor"]
    # The workers are a Deployment, the monitors a StatefulSet (deploy/kubernetes/base).
    deployments = {
        d["metadata"]["name"]: d for d in docs if d["kind"] in {"Deployment", "StatefulSet"}
    }
    [policy] = [d for d in docs if d["kind"] == "NetworkPolicy"]
    open_ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    scraped = {}
    for monitor in monitors:
        name = monitor["metadata"]["name"]
        assert monitor["metadata"]["namespace"] == "cronwarden", name
        selector = monitor["spec"]["selector"]["matchLabels"]
        [deployment] = [
            d
            for d in deployments.values()
            if selector.items() <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        [endpoint] = monitor["spec"]["podMetricsEndpoints"]
        assert endpoint["path"] == "/metrics", name
        [container] = deployment["spec"]["template"]["spec"]["containers"]
        ports = {p.get("name"): p["containerPort"] for p in container["ports"]}
        assert endpoint["port"] in ports, f"{name}: no container port named {endpoint['port']}"
        port = ports[endpoint["port"]]
        assert port in open_ports, f"{name}: the network policy closes port {port}"
        scraped[deployment["metadata"]["name"]] = (container, port)
    assert set(scraped) == {"cronwarden-worker", "cronwarden-monitor"}
    # The named port is the one each process serves /metrics on.
    worker, worker_port = scraped["cronwarden-worker"]
    assert {"name": "CRONWARDEN_HEALTH_PORT", "value": str(worker_port)} in worker["env"]
    monitor, monitor_port = scraped["cronwarden-monitor"]
    assert monitor["args"][monitor["args"].index("--metrics-port") + 1] == str(monitor_port)
    # kustomize re-emits the YAML it renders: a folded expression with more-indented lines comes
    # out with extra line breaks, so the rendered rules are compared, not only the file.
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert rule["spec"]["groups"] == yaml.safe_load(ALERT_RULES.read_text())["groups"]


def test_the_monitoring_schema_refuses_misspelled_fields_bad_durations_and_unknown_kinds() -> None:
    docs = render(EXAMPLE)
    [worker] = [d for d in docs if d["kind"] == "PodMonitor" and "worker" in d["metadata"]["name"]]
    [rule] = [d for d in docs if d["kind"] == "PrometheusRule"]
    assert monitoring_problems(worker) == [] and monitoring_problems(rule) == []

    misspelled = copy.deepcopy(worker)
    misspelled["spec"]["endpoints"] = misspelled["spec"].pop("podMetricsEndpoints")
    slow = copy.deepcopy(worker)
    slow["spec"]["podMetricsEndpoints"][0]["interval"] = "30 seconds"
    nameless = copy.deepcopy(rule)
    del nameless["spec"]["groups"][0]["rules"][0]["alert"]
    unknown = {**worker, "kind": "ServiceMonitor"}
    assert [len(monitoring_problems(d)) for d in (misspelled, slow, nameless)] == [2, 1, 1]
    assert "'endpoints' was unexpected" in " ".join(monitoring_problems(misspelled))
    assert "podMetricsEndpoints" in " ".join(monitoring_problems(misspelled))
    assert "30 seconds" in monitoring_problems(slow)[0]
    assert monitoring_problems(unknown) == [
        "ServiceMonitor/cronwarden-worker: no schema for this kind"
    ]
