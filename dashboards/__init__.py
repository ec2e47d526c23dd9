"""Grafana dashboards as code, their generated JSON, provisioning and push."""
