"""Small builders for Grafana dashboards, rendered to Grafana's JSON model.

In the style of Ray's own dashboard factory: panels are plain dataclasses, the JSON is
generated, committed under `dashboards/generated/`, and a test fails when the two
drift apart. Plain dataclasses rather than `grafana-foundation-sdk`: the panels here
need only a handful of fields, and every field that reaches Grafana is visible in this
file and in the generated JSON a reviewer diffs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

PG = {"type": "grafana-postgresql-datasource", "uid": "hangar-postgres"}
PROM = {"type": "prometheus", "uid": "hangar-prometheus"}

PanelType = Literal["timeseries", "table", "barchart", "stat", "heatmap"]


@dataclass(frozen=True)
class Sql:
    """A query of the PostgreSQL datasource."""

    sql: str
    """The query; Grafana macros ($__timeFilter...) and $variables are expanded by Grafana."""
    columns: tuple[str, ...]
    """The columns the panel expects (the tests check them against a real run)."""
    fmt: Literal["table", "time_series"] = "table"
    """Grafana's result format."""


@dataclass(frozen=True)
class PromQL:
    """A query of the Prometheus datasource."""

    expr: str
    """The PromQL expression."""
    legend: str = ""
    """Legend format, e.g. ``{{verdict}}``."""


@dataclass(frozen=True)
class Panel:
    """One panel."""

    title: str
    """Title."""
    kind: PanelType
    """Grafana panel type."""
    queries: tuple[Sql | PromQL, ...]
    """Its queries (one datasource per panel)."""
    description: str = ""
    """What it shows (also listed in the README)."""
    unit: str = ""
    """Grafana unit (percentunit, currencyUSD, s...)."""
    width: int = 12
    """Grid width (of 24)."""
    height: int = 8
    """Grid height."""
    overrides: tuple[dict[str, Any], ...] = ()
    """Field overrides (e.g. a band between two series)."""


@dataclass(frozen=True)
class Variable:
    """A template variable filled by a query."""

    name: str
    """Variable name ($name in queries)."""
    query: str
    """SQL returning the values."""
    label: str = ""
    """Shown label."""


@dataclass
class Dashboard:
    """A dashboard and its panels."""

    uid: str
    """Stable uid (pushes update it in place)."""
    title: str
    """Title."""
    panels: list[Panel]
    """Panels, laid out left to right, top to bottom."""
    variables: list[Variable] = field(default_factory=list)
    """Template variables (all multi-value with an All option)."""
    tags: tuple[str, ...] = ("hangar",)
    """Tags."""
    time_from: str = "now-30d"
    """Default time range start."""

    def to_json(self) -> dict[str, Any]:
        """Grafana's dashboard JSON model."""
        panels, x, y, row_h = [], 0, 0, 0
        for i, p in enumerate(self.panels, start=1):
            if x + p.width > 24:
                x, y, row_h = 0, y + row_h, 0
            panels.append(_panel_json(i, p, x, y))
            x, row_h = x + p.width, max(row_h, p.height)
        return {
            "uid": self.uid,
            "title": self.title,
            "tags": list(self.tags),
            "schemaVersion": 39,
            "editable": True,
            "timezone": "utc",
            "time": {"from": self.time_from, "to": "now"},
            "refresh": "1m",
            "panels": panels,
            "templating": {"list": [_variable_json(v) for v in self.variables]},
        }

    def render(self) -> str:
        """The JSON text, stable (sorted keys) so the committed copy diffs cleanly."""
        return json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n"


def _panel_json(pid: int, p: Panel, x: int, y: int) -> dict[str, Any]:
    sql = all(isinstance(q, Sql) for q in p.queries)
    targets = []
    for n, q in enumerate(p.queries):
        ref = chr(ord("A") + n)
        if isinstance(q, Sql):
            targets.append(
                {
                    "refId": ref,
                    "datasource": PG,
                    "rawQuery": True,
                    "editorMode": "code",
                    "format": q.fmt,
                    "rawSql": q.sql,
                }
            )
        else:
            targets.append(
                {
                    "refId": ref,
                    "datasource": PROM,
                    "expr": q.expr,
                    "legendFormat": q.legend or "__auto",
                    "range": True,
                }
            )
    return {
        "id": pid,
        "type": p.kind,
        "title": p.title,
        "description": p.description,
        "datasource": PG if sql else PROM,
        "gridPos": {"x": x, "y": y, "w": p.width, "h": p.height},
        "targets": targets,
        "fieldConfig": {
            "defaults": {"unit": p.unit} if p.unit else {},
            "overrides": list(p.overrides),
        },
        "options": {},
    }


def _variable_json(v: Variable) -> dict[str, Any]:
    return {
        "name": v.name,
        "label": v.label or v.name,
        "type": "query",
        "datasource": PG,
        "query": v.query,
        "definition": v.query,
        "multi": True,
        "includeAll": True,
        "current": {"selected": True, "text": ["All"], "value": ["$__all"]},
        "refresh": 2,
        "sort": 1,
    }
