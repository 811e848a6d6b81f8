#!/usr/bin/env python3
"""Writes deploy/grafana/traind.json, the Grafana dashboard of traind (import it in Grafana, choose the Prometheus
data source). Regenerate with `/usr/bin/python3 deploy/grafana/make_dashboard.py`; never edit the JSON by hand.
Every PromQL expression in it is checked against a real Prometheus scraping a training traind
(//tests/integration:prometheus_test)."""

import json
import os

SELECTOR = 'job="$job", instance=~"$instance"'
OK, SKIPPED, NOT_OK = 'result="ok"', 'result="skipped"', 'code!="OK"'
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}


def target(expr, legend, ref):
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref, "range": True}


def panel(title, unit, targets, x, y, w=8, h=8, kind="timeseries", description=""):
    refs = "ABCDEFGH"
    return {
        "type": kind, "title": title, "description": description, "datasource": DATASOURCE,
        "gridPos": {"x": x, "y": y, "w": w, "h": h},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}, "tooltip": {"mode": "multi"}},
        "targets": [target(expr, legend, refs[i]) for i, (expr, legend) in enumerate(targets)],
    }


def rate(metric, extra=""):
    labels = SELECTOR + (", " + extra if extra else "")
    return f"rate({metric}{{{labels}}}[$__rate_interval])"


def quantile(q, metric, by="le"):
    return f"histogram_quantile({q}, sum by ({by}) ({rate(metric + '_bucket')}))"


PANELS = [
    panel("Daemons up", "none", [(f"up{{{SELECTOR}}}", "{{instance}}")], 0, 0, w=6, h=4, kind="stat"),
    panel("Training steps / s", "ops", [
        (f"sum by (instance) ({rate('traind_train_steps_total', OK)})", "{{instance}}"),
        (f"sum by (instance) ({rate('traind_train_steps_total', SKIPPED)})", "{{instance}} skipped"),
    ], 6, 0, w=9, h=8),
    panel("Examples / s", "short", [(f"sum by (instance) ({rate('traind_examples_total')})", "{{instance}}")],
          15, 0, w=9, h=8),
    panel("Build", "none", [(f"traind_build_info{{{SELECTOR}}}", "{{instance}} {{version}}")], 0, 4, w=6, h=4,
          kind="stat"),
    panel("Step latency", "s", [
        (quantile(0.5, "traind_step_duration_seconds"), "p50"),
        (quantile(0.9, "traind_step_duration_seconds"), "p90"),
        (quantile(0.99, "traind_step_duration_seconds"), "p99"),
    ], 0, 8, description="Wall time of a training step, waiting for a compute thread included."),
    panel("Sessions", "short", [(f"sum by (tenant) (traind_sessions{{{SELECTOR}}})", "{{tenant}}")], 8, 8),
    panel("Jobs by state", "short", [(f"sum by (state) (traind_jobs{{{SELECTOR}}})", "{{state}}")], 16, 8),
    panel("Non-finite steps (skipped)", "ops", [
        (f"sum by (instance, tenant) ({rate('traind_nonfinite_steps_total')})", "{{instance}} {{tenant}}"),
    ], 0, 16, description="Steps whose loss or gradients were NaN/Inf: skipped, nothing changed."),
    panel("RPCs / s by status", "reqps", [
        (f"sum by (code) ({rate('traind_rpc_requests_total')})", "{{code}}"),
    ], 8, 16),
    panel("RPC errors", "percentunit", [
        (f"sum by (code, method) ({rate('traind_rpc_requests_total', NOT_OK)})", "{{method}} {{code}}"),
        (f"instance:traind_rpc_errors:ratio_rate5m{{{SELECTOR}}}", "{{instance}} server-side error ratio"),
    ], 16, 16, description="Non-OK answers by method and code; the ratio counts server-side failures only."),
    panel("RPC latency p99 by method", "s", [
        # ">= 0" drops the methods without calls in the window (their quantile is NaN).
        (quantile(0.99, "traind_rpc_duration_seconds", by="method, le") + " >= 0", "{{method}}"),
    ], 0, 24),
    panel("Checkpoint saves", "s", [
        (quantile(0.5, "traind_checkpoint_save_duration_seconds"), "p50"),
        (quantile(0.99, "traind_checkpoint_save_duration_seconds"), "p99"),
        (f"sum by (result) ({rate('traind_checkpoint_saves_total')})", "saves/s {{result}}"),
    ], 8, 24),
    panel("Stored bytes", "bytes", [(f"sum by (tenant) (traind_bytes_stored{{{SELECTOR}}})", "{{tenant}}")],
          16, 24),
    panel("CPU", "percentunit", [(f"{rate('process_cpu_seconds_total')}", "{{instance}} cores")], 0, 32,
          w=12, description="CPU seconds per second: 1 = one core busy."),
    panel("Memory", "bytes", [
        (f"process_resident_memory_bytes{{{SELECTOR}}}", "{{instance}} resident"),
        (f"traind_memory_limit_bytes{{{SELECTOR}}}", "{{instance}} limit"),
    ], 12, 32, w=12),
]

DASHBOARD = {
    "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "type": "datasource", "pluginId": "prometheus",
                  "pluginName": "Prometheus"}],
    "title": "traind", "uid": "traind", "tags": ["traind"], "timezone": "browser", "schemaVersion": 36,
    "version": 1, "refresh": "30s", "time": {"from": "now-6h", "to": "now"},
    "templating": {"list": [
        {"name": "job", "label": "job", "type": "query", "datasource": DATASOURCE,
         "query": "label_values(traind_build_info, job)", "refresh": 2, "current": {"text": "traind",
                                                                                      "value": "traind"}},
        {"name": "instance", "label": "instance", "type": "query", "datasource": DATASOURCE,
         "query": 'label_values(traind_build_info{job="$job"}, instance)', "refresh": 2, "includeAll": True,
         "multi": True, "allValue": ".*"},
    ]},
    "panels": [dict(p, id=i + 1) for i, p in enumerate(PANELS)],
}

if __name__ == "__main__":
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "traind.json")
    with open(path, "w") as file:
        json.dump(DASHBOARD, file, indent=1)
        file.write("\n")
    print(f"wrote {path}: {len(PANELS)} panels, "
          f"{sum(len(p['targets']) for p in PANELS)} expressions")
