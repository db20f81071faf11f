"""The Grafana dashboard only queries series that rollgate.core.metrics.Metrics exports, with
labels those series have, and lays out as valid Grafana JSON."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import Counter, Gauge, Histogram

from rollgate.core.metrics import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "rollgate-dashboard.json"
METRIC = re.compile(r"\b(rollgate_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b(rollgate_[a-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
# Grafana's own variables, not PromQL labels
GRAFANA_VARS = re.compile(r"\$__[a-z_]+|\$[a-z_]+|\$\{[a-z_]+\}")


def exported_series() -> dict[str, set[str]]:
    """Sample name -> label names, as prometheus_client will expose them."""
    m = Metrics()
    series: dict[str, set[str]] = {}
    for attr in vars(m).values():
        if not isinstance(attr, (Counter, Gauge, Histogram)):
            continue
        name, labels = attr._name, set(attr._labelnames)  # prometheus_client keeps these on the parent
        if isinstance(attr, Counter):
            series[name + "_total"] = labels
        elif isinstance(attr, Histogram):
            series[name + "_bucket"] = labels | {"le"}
            series[name + "_sum"] = labels
            series[name + "_count"] = labels
        else:
            series[name] = labels
    return series


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def exprs(dash: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in dash["panels"] for t in p.get("targets", [])] + [
        ("variable " + v["name"], v["definition"]) for v in dash["templating"]["list"] if v.get("definition")
    ]


def test_exported_series_reflect_prometheus_naming():
    # guards the helper itself: counters gain _total, histograms _bucket/_sum/_count
    series = exported_series()
    assert "rollgate_rollouts_finished_total" in series and "rollgate_rollouts_finished" not in series
    assert series["rollgate_hop_latency_seconds_bucket"] == {"hop", "env", "le"}
    assert series["rollgate_queue_depth"] == set()


def test_every_metric_the_dashboard_queries_is_exported():
    series = exported_series()
    used = {name for _, e in exprs(load()) for name in METRIC.findall(e)}
    assert used, "the dashboard queries no rollgate metric"
    assert sorted(used - set(series)) == []


def test_every_label_the_dashboard_uses_exists_on_its_metric():
    series = exported_series()
    for title, expr in exprs(load()):
        clean = GRAFANA_VARS.sub("X", expr)
        for name, matchers in SELECTOR.findall(clean):
            used = set(MATCHER.findall(matchers))
            assert used <= series[name], f"{title}: {name} has no label(s) {used - series[name]}"
        available = set().union(*(series[n] for n in METRIC.findall(clean)))
        for group in GROUPING.findall(clean):
            labels = {x.strip() for x in group.split(",") if x.strip()}
            assert labels <= available, f"{title}: grouping by unknown label(s) {labels - available}"


def test_quantiles_are_taken_over_buckets_grouped_by_le():
    found = 0
    for title, expr in exprs(load()):
        for call in re.findall(r"histogram_quantile\((.*)\)", expr):
            found += 1
            assert "_bucket" in call, title
            assert re.search(r"by \((le\b|[^)]*\ble\b)", call), f"{title}: quantile without `by (le, ...)`"
    assert found >= 2  # p50 and p99 hop latency at least


@pytest.mark.parametrize(
    "metric",
    [
        "rollgate_rollouts_finished_total",
        "rollgate_hop_latency_seconds_bucket",
        "rollgate_queue_depth",
        "rollgate_reward_bucket",
        "rollgate_tokens_total",
        "rollgate_sessions_in_flight",
        "rollgate_tool_calls_total",
    ],
)
def test_dashboard_covers_the_core_signals(metric):
    assert any(metric in e for _, e in exprs(load()))


def test_dashboard_is_valid_grafana_json_with_a_datasource_variable():
    dash = load()
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    names = [v["name"] for v in dash["templating"]["list"]]
    assert names == ["datasource", "env"]
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    cells: set[tuple[int, int]] = set()
    for p in dash["panels"]:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["x"] + g["w"] <= 24 and g["h"] >= 1, p["title"]
        area = {(x, y) for x in range(g["x"], g["x"] + g["w"]) for y in range(g["y"], g["y"] + g["h"])}
        assert not area & cells, f"panel {p['title']!r} overlaps another"
        cells |= area
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${datasource}", p["title"]
            assert p["targets"] and all(t["expr"].strip() and t["refId"] for t in p["targets"]), p["title"]


def test_queue_depth_is_not_summed_across_gateway_replicas():
    # Every gateway replica reports the depth of the one shared queue: summing would multiply it.
    for title, expr in exprs(load()):
        if "rollgate_queue_depth" in expr:
            assert "sum(" not in expr.replace(" ", ""), title
