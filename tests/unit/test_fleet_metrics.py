"""The fleet's metrics for a Prometheus and a Grafana of the operator's own: `specfleet metrics scrape-config` (the
gateways' exporter and each Spark's engine metrics relayed by a gateway) and `specfleet metrics dashboard`. The relay
itself, through a real HAProxy, is tests/unit/test_gateway_files.py's."""

from __future__ import annotations

import json
import re
from importlib import resources

import yaml
from click.testing import CliRunner

from specfleet.cli import main
from specfleet.fleet.inventory import load_inventory
from specfleet.gateway.render import backends, gateway_files, gateway_options
from specfleet.plan import build_plans
from tests.vm.vllm_standin.vllm_serve import Engine

MIXED = """\
all:
  hosts:
    spark-01: {ssh_hostname: 10.1.0.11, serves: eagle3}
    spark-02: {ssh_hostname: 10.1.0.12, serves: vllm_eagle3}
    spark-03: {ssh_hostname: 10.1.0.13, serves: vllm_ngram}
  children:
    gateway:
      hosts:
        gw-1: {ssh_hostname: 10.1.0.2}
        gw-2: {ssh_hostname: 10.1.0.3}
"""


def dashboard_metrics(prefix: str) -> set[str]:
    """The metric names the dashboard's queries use that start with `prefix`."""
    text = resources.files("specfleet.gateway").joinpath("dashboards", "specfleet-fleet.json").read_text()
    exprs = [t["expr"] for p in json.loads(text)["panels"] for t in p["targets"]]
    return {m for e in exprs for m in re.findall(r"\b(" + re.escape(prefix) + r"[a-z_:]+)", e)}


def test_scrape_config_lists_the_gateways_and_the_relayed_sparks_with_their_engine(fleet_file):
    path = fleet_file(MIXED)
    result = CliRunner().invoke(main, ["metrics", "scrape-config", "inventory.py"])
    assert result.exit_code == 0, result.output
    jobs = {j["job_name"]: j for j in yaml.safe_load(result.output)["scrape_configs"]}
    assert [(c["targets"], c["labels"]["gateway"]) for c in jobs["specfleet-gateways"]["static_configs"]] == [
        (["10.1.0.2:8404"], "gw-1"), (["10.1.0.3:8404"], "gw-2")]
    engines = jobs["specfleet-engines"]
    assert [(c["labels"]["spark"], c["labels"]["engine"], c["labels"]["profile"], c["targets"])
            for c in engines["static_configs"]] == [("spark-02", "vllm", "vllm_eagle3", ["10.1.0.2:8404"]),
                                                    ("spark-03", "vllm", "vllm_ngram", ["10.1.0.2:8404"])]
    assert engines["relabel_configs"] == [{"source_labels": ["spark"], "target_label": "instance"}]
    # each path is one the gateway it names relays (its rendered HAProxy config), to that Spark's filtering socket
    gw = build_plans(load_inventory(path), None)["gw-1"].settings
    cfg = gateway_files(gateway_options(gw), backends(gw.gateway_backends), {})["/etc/haproxy/haproxy.cfg"]
    for c in engines["static_configs"]:
        spark = c["labels"]["spark"]
        assert f"use_backend specfleet_metrics_{spark} if METH_GET {{ path {c['labels']['__metrics_path__']} }}" in cfg
    assert "specfleet_metrics_spark-01" not in cfg, "trtllm-serve's /metrics is drained by a read: never relayed"


def test_scrape_config_without_a_gateway_group_is_refused_in_one_line(fleet_file):
    fleet_file("all:\n  hosts:\n    spark-01: {serves: vllm_eagle3}\n")
    result = CliRunner().invoke(main, ["metrics", "scrape-config", "inventory.py"])
    assert result.exit_code == 2 and result.output.startswith("the inventory has no gateway group"), result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_dashboard_queries_the_names_a_vllm_server_exposes(tmp_path):
    out = tmp_path / "d.json"
    assert CliRunner().invoke(main, ["metrics", "dashboard", "--out", str(out)]).exit_code == 0
    dash = json.loads(out.read_text())
    assert {p["title"] for p in dash["panels"]} >= {"Output tokens/s per Spark", "Mean acceptance length per Spark",
                                                    "Mean acceptance length per engine and profile",
                                                    "Requests in flight", "Pool state: each Spark in each gateway's pool"}
    # the vLLM stand-in exposes vLLM 0.20.1's names (vllm/v1/metrics/loggers.py, v1/spec_decode/metrics.py)
    served = Engine({"name": "m", "spec": {"method": "ngram", "num_speculative_tokens": 2}}, {}).metrics()
    exposed = {line.split("{", 1)[0] for line in served.splitlines()}
    used = dashboard_metrics("vllm:")
    assert used and used <= exposed, used - exposed


def test_the_gateway_page_names_every_metrics_command_and_its_refusal():
    from pathlib import Path

    from specfleet.cli.metrics import cli

    page = (Path(__file__).resolve().parents[2] / "docs" / "gateway.md").read_text()
    assert cli.commands and all(f"`specfleet metrics {name}" in page for name in cli.commands), sorted(cli.commands)
    assert "`the inventory has no gateway group: ...`" in " ".join(page.split())  # the refusal tested above
