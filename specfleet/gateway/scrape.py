"""`specfleet metrics scrape-config`: the Prometheus scrape config of a fleet's gateways (HAProxy's exporter) and of
the Sparks' engine metrics the gateways relay (gateway/render.py: GET /sparks/<name>/metrics on the metrics port).

Each Spark is scraped through one gateway (the first of the group): every gateway relays it, and scraping it through
each would count its counters once per gateway in any sum. Its samples are labelled with the Spark (as `instance`),
its profile and its engine, so a dashboard compares engines. A Spark whose engine exposes no metrics a read leaves
intact (trtllm-serve's JSON iteration stats) is not relayed and not listed (docs/engines.md)."""

from __future__ import annotations

from dataclasses import dataclass

import yaml


@dataclass(frozen=True)
class Gateway:
    name: str
    metrics: str  # host:port of its metrics port


@dataclass(frozen=True)
class Relayed:
    spark: str  # HAProxy's server name (gateway/render.server_name), which its relay path names
    profile: str
    engine: str


def scrape_config(gateways: list[Gateway], sparks: list[Relayed]) -> str:
    """The `scrape_configs:` of the fleet, as YAML (paste it into prometheus.yml, or load it as a file of its own)."""
    jobs = [{"job_name": "specfleet-gateways",
             "static_configs": [{"targets": [g.metrics], "labels": {"gateway": g.name}} for g in gateways]}]
    if sparks and gateways:
        via = gateways[0]
        jobs.append({
            "job_name": "specfleet-engines",
            "static_configs": [{"targets": [via.metrics],
                                "labels": {"__metrics_path__": f"/sparks/{s.spark}/metrics", "spark": s.spark,
                                           "profile": s.profile, "engine": s.engine, "gateway": via.name}}
                               for s in sparks],
            "relabel_configs": [{"source_labels": ["spark"], "target_label": "instance"}],
        })
    head = ("# Prometheus scrape config for a specfleet fleet, written by `specfleet metrics scrape-config`: the\n"
            "# gateways' HAProxy exporter, and each Spark's engine metrics relayed by a gateway\n"
            "# (GET /sparks/<name>/metrics).\n")
    return head + yaml.safe_dump({"scrape_configs": jobs}, sort_keys=False)
