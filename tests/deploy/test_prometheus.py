"""deploy/prometheus/: the scrape configs reach every service compose.yaml and k8s/ run."""

from __future__ import annotations

import yaml

from rollgate.core.topology import ROLE_PORTS
from tests.deploy.manifests import COMPOSE_SECRETS, ROOT, base_docs, by_kind, compose_services, rollgate_services

PROM = ROOT / "deploy" / "prometheus"


def test_compose_scrape_jobs_cover_every_rollgate_service_on_its_port():
    jobs = yaml.safe_load((PROM / "prometheus-compose.yml").read_text())["scrape_configs"]
    scraped = {(name, sd["port"]) for job in jobs for sd in job["dns_sd_configs"] for name in sd["names"]}
    services = compose_services(COMPOSE_SECRETS)
    for name, svc in rollgate_services(services).items():
        port = int(svc["command"][svc["command"].index("--port") + 1])
        assert (name, port) in scraped, f"compose service {name} on {port} is not scraped"
    compose_mount = services["prometheus"]["volumes"][0].split(":")
    assert (ROOT / compose_mount[0]).resolve() == (PROM / "prometheus-compose.yml").resolve()


def test_k8s_pods_carry_the_annotations_the_scrape_job_keeps():
    job = yaml.safe_load((PROM / "prometheus-k8s.yml").read_text())["scrape_configs"][0]
    keep = job["relabel_configs"][0]
    assert keep["action"] == "keep" and keep["regex"] == "true"
    for name, dep in by_kind(base_docs(), "Deployment").items():
        notes = dep["spec"]["template"]["metadata"].get("annotations", {})
        container = dep["spec"]["template"]["spec"]["containers"][0]
        assert notes.get("prometheus.io/scrape") == "true", name
        assert notes["prometheus.io/path"] == "/metrics", name
        assert int(notes["prometheus.io/port"]) == container["ports"][0]["containerPort"]
        assert int(notes["prometheus.io/port"]) in ROLE_PORTS.values()
