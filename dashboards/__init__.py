"""Grafana dashboards as code, their generated JSON, provisioning and push.

Filled in by the dashboards issue (DESIGN.md section 7).
"""
