"""deploy/monitoring/ against the code: alert rules that promtool accepts and that fire where they should, a
PrometheusRule equal to the plain rules file, and Grafana and alert queries that name only metrics (and labels)
a running agent and controller really export. A renamed metric otherwise leaves a silent panel or an alert that
can never fire."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from edgeagent.agent.app import Agent
from edgeagent.config import AgentConfig
from edgeagent.sim.cluster import SimCluster
from tests.integration.controller.conftest import Controllers
from tests.support.inprocess_agent import start_in_process

MONITORING = Path(__file__).resolve().parents[3] / "deploy" / "monitoring"
RULES = MONITORING / "edgeagent-rules.yaml"
PROMTOOL = shutil.which("promtool")
needs_promtool = pytest.mark.skipif(
    PROMTOOL is None, reason="promtool not installed (Debian package `prometheus`; `make system-deps` installs it)")

# A series selector: a metric name, optionally followed by `{label matchers}`.
_SELECTOR = re.compile(r"\b(edgeagent_[a-z0-9_]+)(\{[^}]*\})?")
_MATCHER = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)")


def _rule_exprs() -> list[str]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule["expr"] for group in groups for rule in group["rules"]]


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    found: list[str] = []
    for panel in dashboard["panels"]:
        found.extend(target["expr"] for target in panel.get("targets", []))
    return found


@needs_promtool
def test_rules_pass_promtool_check() -> None:
    done = subprocess.run([str(PROMTOOL), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stdout + done.stderr


@needs_promtool
def test_each_alert_fires_on_its_failure_and_not_on_a_healthy_series() -> None:
    done = subprocess.run([str(PROMTOOL), "test", "rules", "edgeagent-rules.test.yaml"], cwd=MONITORING,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    tested = set(re.findall(r"alertname: (\w+)", (MONITORING / "edgeagent-rules.test.yaml").read_text()))
    defined = {rule["alert"] for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]}
    assert tested == defined


def test_prometheus_rule_holds_the_same_rules_as_the_plain_file() -> None:
    operator = yaml.safe_load((MONITORING / "prometheusrule.yaml").read_text())
    assert operator["apiVersion"] == "monitoring.coreos.com/v1" and operator["kind"] == "PrometheusRule"
    assert operator["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]


_SUFFIXES = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
             "gauge": ("",), "summary": ("_sum", "_count", "_created"), "info": ("_info",)}


def _exported(text: str, into: dict[str, set[str]]) -> None:
    """Sample names (with _total, _bucket, ... as scraped) and the label names seen on each. A labelled family
    with no child yet has only its `# TYPE` line: its names count, its labels stay unknown (empty set)."""
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, family, kind = line.split(" ")
            # prometheus_client names a childless labelled counter's family with its `_total` already on.
            family = family.removesuffix("_total") if kind == "counter" else family
            for suffix in _SUFFIXES.get(kind, ("",)):
                into.setdefault(family + suffix, set())
            continue
        if not line or line.startswith("#"):
            continue
        name, _, rest = line.partition("{")
        name = name.split(" ")[0]
        labels = set(re.findall(r'([a-zA-Z_][a-zA-Z0-9_]*)="', rest.partition("}")[0])) if rest else set()
        into.setdefault(name, set()).update(labels)


async def test_every_queried_metric_and_label_is_exported(
        sim: SimCluster, controllers: Controllers, tmp_path: Path) -> None:
    node = sim.node_names[0]
    cfg = AgentConfig(node_name=node, kubeconfig=sim.node_kubeconfig(node), bind="127.0.0.1", port=0,
                      state_dir=tmp_path / "agent")
    running = await start_in_process(Agent(cfg))
    try:
        app = await controllers.start(sim, serve_metrics=True)
        # A rollout plan's series appear with its first state write; register one as that write would.
        app.metrics.set_plan("edge", "ds", 1, 3, "progressing")
        exported: dict[str, set[str]] = {}
        async with aiohttp.ClientSession() as http:
            for url in (f"{running.url}/metrics", f"http://127.0.0.1:{app.metrics_port}/metrics"):
                async with http.get(url) as resp:
                    assert resp.status == 200
                    _exported(await resp.text(), exported)
    finally:
        await running.stop()
    missing: list[str] = []
    for expr in _dashboard_exprs() + _rule_exprs():
        for name, matchers in _SELECTOR.findall(expr):
            if name not in exported:
                missing.append(f"{name} (in {expr!r})")
                continue
            for label in _MATCHER.findall(matchers):
                if exported[name] and label[0] not in exported[name]:
                    missing.append(f"{name} has no label {label[0]!r} (in {expr!r})")
    assert not missing, "\n".join(missing)
    # ... and every family a user can scrape is documented (docs/ is where an operator looks them up).
    docs = "\n".join(path.read_text() for path in (MONITORING.parents[1] / "docs").glob("*.md"))
    families = {_family(name) for name in exported if not name.endswith("_created")}
    undocumented = sorted(families - set(re.findall(r"(?:edgeagent|process|python)_[a-z0-9_]+", docs)))
    assert not undocumented, f"metrics missing from docs/: {undocumented}"


def _family(sample: str) -> str:
    """The name a user documents: histograms by their family name, counters with their `_total`."""
    for suffix in ("_bucket", "_sum", "_count"):
        if sample.endswith(suffix):
            return sample.removesuffix(suffix)
    return sample


def test_dashboard_is_importable_json_with_a_datasource_variable() -> None:
    dashboard: dict[str, Any] = json.loads((MONITORING / "grafana-dashboard.json").read_text())
    assert dashboard["uid"] and dashboard["title"]
    assert [v["name"] for v in dashboard["templating"]["list"]] == ["datasource"]
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert all(target["datasource"]["uid"] == "${datasource}"
               for panel in dashboard["panels"] for target in panel.get("targets", []))
