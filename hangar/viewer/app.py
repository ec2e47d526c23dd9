"""`hangar view`: a local web viewer (Starlette, Jinja2 templates, one static script).

Pages: the sweeps (newest first, filtered, paginated), a sweep (`hangar report`'s report:
groups with every metric and its interval, verdict mix, cost, plots, comparisons with
their sentences, the pass matrix, the trials, which refresh while it runs), a trial (its
verdict, scores, checks and evidence, timings, usage; the transcript; the kind's own
section; every evidence file, the evidence archive and its hash check), comparisons of two sweeps
or of a sweep and a baseline, and knowledge suites.

Everything shown that came from a trial is hostile: templates escape every value (Jinja2
autoescape), no page carries inline script or style, and every response has a strict
Content-Security-Policy (scripts and styles only from this server). An evidence file is
shown as escaped text, never rendered; a raw download is ``application/octet-stream``
as an attachment with ``nosniff``.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from html import escape
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from jinja2 import BaseLoader, FileSystemLoader, PrefixLoader
from pygments.formatters import HtmlFormatter  # type: ignore[import-untyped]
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.middleware.base import BaseHTTPMiddleware, RequestResponseEndpoint
from starlette.requests import Request
from starlette.responses import (
    FileResponse,
    HTMLResponse,
    JSONResponse,
    RedirectResponse,
    Response,
)
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from hangar.catalog import PAGE, Catalog, Filters, TrialFilters
from hangar.errors import HangarError
from hangar.pages import environment
from hangar.results import Verdict
from hangar.scores.baseline import Snapshot
from hangar.scores.render import svg_cost, svg_differences, svg_intervals
from hangar.scores.report import Report
from hangar.store import ResultsStore
from hangar.trials.kind import About, KindPage, ViewSettings, kind_of, kinds, registry
from hangar.viewer.data import Builder, Evidence, PerSweep, ReportCache, snapshots
from hangar.viewer.transcript import read_agent_sessions, read_transcript

HERE = Path(__file__).parent
#: How long a page waits for a sweep's first report or snapshot before it says it is
#: being built (and refreshes by itself): a small sweep's is there at once.
BUILD_WAIT_S = 0.5
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
#: Characters of an evidence file one page shows.
FILE_PAGE = 256 * 1024
#: Scenarios of the pass matrix one page shows.
MATRIX_PAGE = 100


class SecurityHeaders(BaseHTTPMiddleware):
    """The strict headers every response carries."""

    async def dispatch(self, request: Request, call_next: RequestResponseEndpoint) -> Response:
        response = await call_next(request)
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response


def _templates() -> list[BaseLoader]:
    """The viewer's templates, and each kind's under its name (``decision/view.html``)."""
    own = {kind.name: FileSystemLoader(kind.templates) for kind in kinds()}
    return [FileSystemLoader(HERE / "templates"), PrefixLoader(own)]


class Viewer:
    """The app's state: the store, the evidence, the caches, the templates."""

    def __init__(
        self,
        store: ResultsStore,
        *,
        endpoint: str | None = None,
        evidence: str | None = None,
        knowledge: list[Path] | None = None,
        margin: float | None = None,
        poll_s: float = 3.0,
    ) -> None:
        self.catalog = Catalog(store)
        self.builder = Builder()
        self.reports = ReportCache(self.catalog, margin, self.builder)
        self.snapshots: PerSweep[Snapshot] = snapshots(self.catalog, self.builder)
        self.evidence = Evidence(endpoint, evidence, store)
        self.knowledge = [p.resolve() for p in knowledge or []]
        self.poll_s = poll_s
        self.settings = ViewSettings(suites={"knowledge": self.knowledge})
        #: What the viewer's own forms carry (a page of another site cannot know it).
        self.token = secrets.token_urlsafe(24)
        self.env = environment(_templates())
        self.env.globals["verdicts"] = [v.value for v in Verdict]
        # The newest sweeps' reports are built while the first page loads.
        self.reports.warm([r.id for r in self.catalog.sweeps(Filters(), 0, 5)[0]])

    def close(self) -> None:
        """End the builder's process and remove every fetched evidence archive."""
        self.builder.close()
        self.evidence.close()

    def page(self, template: str, status: int = 200, **context: Any) -> HTMLResponse:
        """A template rendered."""
        page = self.env.get_template(template).render(csrf=self.token, **context)
        return HTMLResponse(page, status_code=status)

    # -- pages -------------------------------------------------------------------------

    async def sweeps(self, request: Request) -> Response:
        q = request.query_params
        filters = Filters(**{k: q.get(k, "") for k in Filters.model_fields})
        page = max(0, int(q.get("page", "0") or 0))
        try:
            rows, total = self.catalog.sweeps(filters, page)
        except ValueError as exc:
            return self.page("error.html", 400, message=f"bad filter: {exc}")
        self.reports.warm([r.id for r in rows[:5]])
        return self.page(
            "sweeps.html",
            rows=rows,
            total=total,
            page=page,
            filters=filters,
            per_page=50,
            choices=self.catalog.choices(),
        )

    async def sweep(self, request: Request) -> Response:
        sweep_id = request.path_params["sweep"]
        if not self.catalog.exists(sweep_id):
            return self.page("error.html", 404, message=f"no sweep {sweep_id!r} in the store")
        return self.page("sweep.html", **self._sweep_context(request, sweep_id))

    def _sweep_context(self, request: Request, sweep_id: str) -> dict[str, Any]:
        q = request.query_params
        cached = self.reports.report(sweep_id, wait=self.reports.patience(sweep_id, BUILD_WAIT_S))
        building = cached is None  # its first report: the page now, the report when built
        report = cached.report if cached is not None else _no_report(sweep_id)
        mpage = max(0, int(q.get("mpage", "0") or 0))
        filters = TrialFilters(**{k: q.get(k, "") for k in TrialFilters.model_fields})
        page = max(0, int(q.get("page", "0") or 0))
        rows, total = self.catalog.trials(sweep_id, filters, page)
        labels = [g.label for g in report.groups]
        matrix = report.scenarios[mpage * MATRIX_PAGE : (mpage + 1) * MATRIX_PAGE]
        few = len(report.scenarios) <= 60
        return {
            "sweep": sweep_id,
            "report": report,
            "stale": building or (cached is not None and cached.stale),
            "building": building,
            "state": self.catalog.state(sweep_id),
            "labels": labels,
            "matrix": matrix,
            "mpage": mpage,
            "mpages": max(1, -(-len(report.scenarios) // MATRIX_PAGE)),
            "trials": rows,
            "total": total,
            "page": page,
            "per_page": PAGE,
            "filters": filters,
            "choices": self.catalog.choices(sweep_id),
            "poll_s": self.poll_s,
            "plots": {
                "intervals": svg_intervals(report) if report.groups else "",
                "cost": svg_cost(report) if report.groups else "",
                "differences": svg_differences(report) if few else "",
            },
        }

    async def sweep_part(self, request: Request) -> Response:
        """A fragment of the sweep page (summary or trials), for the live refresh."""
        sweep_id, part = request.path_params["sweep"], request.path_params["part"]
        if part not in ("summary", "trials") or not self.catalog.exists(sweep_id):
            return self.page("error.html", 404, message="no such part")
        return self.page(f"_{part}.html", **self._sweep_context(request, sweep_id))

    async def state(self, request: Request) -> Response:
        sweep_id = request.path_params["sweep"]
        rows, latest = self.catalog.state(sweep_id)
        return JSONResponse({"rows": rows, "latest": latest})

    async def trial(self, request: Request) -> Response:
        sweep_id, key = request.path_params["sweep"], request.path_params["key"]
        attempt = request.query_params.get("attempt")
        result = self.catalog.trial(sweep_id, key, int(attempt) if attempt else None)
        if result is None:
            return self.page("error.html", 404, message=f"no trial {key} in sweep {sweep_id}")
        opened, problem = None, ""
        try:
            opened = self.evidence.archive_of(result)
        except (HangarError, OSError) as exc:
            problem = f"the evidence could not be read: {exc}"
        transcript = None
        if opened is not None and (opened.folder / "trace.jsonl").is_file():
            transcript = read_transcript(opened.folder / "trace.jsonl")
        agent_sessions = []
        if opened is not None and (opened.folder / "session.jsonl").is_file():
            agent_sessions = read_agent_sessions(opened.folder / "session.jsonl")
        section, template, note = {}, None, ""
        about, failing, judged = About(text="", facts=[]), [], False
        if result.kind in registry():  # a store may hold kinds this hangar does not know
            kind = kind_of(result.kind)
            section = kind.view(result, opened.folder if opened else None, self.settings)
            template, note, judged = kind.view_template, kind.unscored_note, kind.judged
            if opened is not None:
                about, failing = kind.about(opened.folder), kind.failures(opened.folder)
        before, after = self.catalog.neighbours(sweep_id, key)
        return self.page(
            "trial.html",
            r=result,
            sweep=sweep_id,
            about=about,
            failing=failing,
            judged=judged or bool(result.judge_usage.input_tokens),
            before=before,
            after=after,
            siblings=self.catalog.siblings(sweep_id, key),
            attempts=self.catalog.attempts(sweep_id, key),
            archive=opened,
            problem=problem,
            transcript=transcript,
            agent_sessions=agent_sessions,
            section=section,
            section_template=template,
            unscored_note=note,
            timeline=timeline(result.timings),
        )

    async def versus(self, request: Request) -> Response:
        """Two trials of one task side by side: verdicts, reasons, what failed, diffs."""
        sweep_id = request.path_params["sweep"]
        sides = []
        for key in (request.path_params["key"], request.path_params["other"]):
            result = self.catalog.trial(sweep_id, key)
            if result is None:
                return self.page("error.html", 404, message=f"no trial {key} in sweep {sweep_id}")
            side: dict[str, Any] = {"r": result, "section": {}, "failing": [], "problem": ""}
            try:
                opened = self.evidence.archive_of(result)
            except (HangarError, OSError) as exc:
                opened, side["problem"] = None, f"the evidence could not be read: {exc}"
            if opened is not None and result.kind in registry():
                kind = kind_of(result.kind)
                side["section"] = kind.view(result, opened.folder, self.settings)
                side["failing"] = kind.failures(opened.folder)
            sides.append(side)
        return self.page("versus.html", sweep=sweep_id, sides=sides)

    def _archive_of(self, request: Request) -> tuple[Any, Any]:
        p = request.path_params
        result = self.catalog.trial(p["sweep"], p["key"], int(p["attempt"]))
        return result, self.evidence.archive_of(result) if result is not None else None

    def _evidence_path(self, opened: Any, rel: str) -> Path | None:
        if opened is None or rel not in opened.files:
            return None  # only files the archive holds: no path from the request reaches disk
        return Path(opened.folder) / rel

    async def file(self, request: Request) -> Response:
        result, opened = self._archive_of(request)
        rel = request.query_params.get("path", "")
        path = self._evidence_path(opened, rel)
        if result is None or path is None:
            return self.page("error.html", 404, message=f"no evidence file {rel!r}")
        offset = max(0, int(request.query_params.get("offset", "0") or 0))
        size = path.stat().st_size
        with path.open("rb") as handle:
            handle.seek(offset)
            data = handle.read(FILE_PAGE)
        text = data.decode("utf-8", errors="replace")
        binary = b"\0" in data[:8192]
        return self.page(
            "file.html",
            r=result,
            rel=rel,
            text=text,
            binary=binary,
            size=size,
            offset=offset,
            next_offset=offset + len(data) if offset + len(data) < size else None,
            prev_offset=max(0, offset - FILE_PAGE) if offset else None,
        )

    async def raw(self, request: Request) -> Response:
        _, opened = self._archive_of(request)
        rel = request.query_params.get("path", "")
        path = self._evidence_path(opened, rel)
        if path is None:
            return self.page("error.html", 404, message=f"no evidence file {rel!r}")
        name = Path(rel).name.replace('"', "")
        return FileResponse(
            path,
            media_type="application/octet-stream",
            headers={"Content-Disposition": f'attachment; filename="{name}"'},
        )

    async def bundle(self, request: Request) -> Response:
        _, opened = self._archive_of(request)
        if opened is None:
            return self.page("error.html", 404, message="no evidence archive")
        return FileResponse(
            opened.archive,
            media_type="application/gzip",
            headers={"Content-Disposition": 'attachment; filename="bundle.tar.gz"'},
        )

    async def trajectory(self, request: Request) -> Response:
        """The trial's session as an ATIF trajectory (`hangar.trajectories`), to download."""
        from hangar.trajectories import trial_trajectory

        result, opened = self._archive_of(request)
        if result is None or opened is None:
            return self.page("error.html", 404, message="no evidence archive")
        return JSONResponse(
            trial_trajectory(result, Path(opened.folder)),
            headers={"Content-Disposition": 'attachment; filename="trajectory.json"'},
        )

    async def compare(self, request: Request) -> Response:
        from hangar.scores.baseline import baseline_names, load_baseline
        from hangar.scores.baseline import compare as find
        from hangar.scores.thresholds import Thresholds

        q = request.query_params
        store = self.catalog.store
        candidate, before_sweep, name = q.get("b", ""), q.get("a", ""), q.get("baseline", "")
        choices = {
            "sweeps": store.sweep_ids(),
            "baselines": [n for n, _, _ in baseline_names(store)],
        }
        if not candidate or not (before_sweep or name):
            return self.page("compare.html", outcome=None, choices=choices, q=dict(q))
        try:
            for sweep_id in (candidate, *([] if name else [before_sweep])):
                if not self.catalog.exists(sweep_id):
                    raise HangarError(f"no sweep {sweep_id!r} in the store")
            self.snapshots.warm([candidate, *([] if name else [before_sweep])])  # both at once
            old = load_baseline(store, name) if name else self._snapshot(before_sweep)
            new = self._snapshot(candidate)
        except HangarError as exc:
            return self.page("error.html", 404, message=str(exc))
        if old is None or new is None:  # a snapshot is being built: the page says so
            return self.page("compare.html", outcome=None, choices=choices, q=dict(q), pending=True)
        before, after = old, new.model_copy(update={"name": "candidate"})
        outcome = find(before, after, Thresholds())
        rows = []
        for label in sorted(set(before.groups) | set(after.groups)):
            a, b = before.groups.get(label), after.groups.get(label)
            rows.append(
                {
                    "group": label,
                    "metric": "pass",
                    "before": a.rate if a else None,
                    "after": b.rate if b else None,
                }
            )
        for metric in sorted(set(before.metrics) | set(after.metrics)):
            for label in sorted(
                set(before.metrics.get(metric, {})) | set(after.metrics.get(metric, {}))
            ):
                rows.append(
                    {
                        "group": label,
                        "metric": metric,
                        "before": _mean(before.metrics.get(metric, {}).get(label)),
                        "after": _mean(after.metrics.get(metric, {}).get(label)),
                    }
                )
        return self.page(
            "compare.html", outcome=outcome, rows=rows, choices=choices, q=dict(q), before=before
        )

    def _snapshot(self, sweep_id: str) -> Snapshot | None:
        """A sweep's scores as a snapshot (None while its first is built)."""
        found = self.snapshots.get(sweep_id, wait=self.snapshots.patience(sweep_id, BUILD_WAIT_S))
        return None if found is None else found[0]

    def kind_page(self, page: KindPage) -> Callable[[Request], Awaitable[Response]]:
        """The route handler of a kind's own page."""

        async def handler(request: Request) -> Response:
            params, query = dict(request.path_params), dict(request.query_params)
            try:
                if request.method == "POST" and page.action is not None:
                    fields = await self.form(request)
                    if not self.own_form(request, fields):
                        return self.page("error.html", 403, message="a form from elsewhere")
                    target = page.action(params, fields, self.settings)
                    local = target.startswith("/") and not target.startswith("//")
                    return RedirectResponse(target if local else "/", status_code=303)
                context = page.context(params, query, self.settings)
            except LookupError as exc:
                return self.page("error.html", 404, message=str(exc.args[0] if exc.args else exc))
            except HangarError as exc:
                return self.page("error.html", 400, message=str(exc))
            return self.page(page.template, **context)

        return handler

    @staticmethod
    async def form(request: Request) -> dict[str, list[str]]:
        """A posted form's fields (``application/x-www-form-urlencoded``, as the viewer's
        own forms send them; 64 KiB at most; anything else has no field)."""
        kind = request.headers.get("content-type", "").split(";")[0].strip()
        body = await request.body()
        if kind != "application/x-www-form-urlencoded" or len(body) > 64 * 1024:
            return {}
        return parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)

    def own_form(self, request: Request, fields: dict[str, list[str]]) -> bool:
        """Whether a posted form came from one of this viewer's pages: it carries the
        viewer's token (a page elsewhere cannot read it) and the browser does not say it
        was sent from another site."""
        token = fields.get("csrf", [""])[0]
        site = request.headers.get("sec-fetch-site", "same-origin")
        return secrets.compare_digest(token, self.token) and site in ("same-origin", "none")

    async def pygments_css(self, request: Request) -> Response:
        return Response(HtmlFormatter().get_style_defs(".diff"), media_type="text/css")


def _no_report(sweep_id: str) -> Report:
    """What a sweep page shows while its first report is built."""
    return Report(sweep=sweep_id, generated_at=datetime.now(UTC), margin=0.0, groups=[],
                  scenarios=[], requirements=[], comparisons=[], voided=[])  # fmt: skip


def timeline(timings: dict[str, float]) -> str:
    """The trial's phases in order, each a bar as long as it took (SVG; names escaped)."""
    total = sum(timings.values()) or 1.0
    width, row = 760, 18
    height = row * len(timings) + 24
    out = [
        f'<svg id="timeline" width="{width + 260}" height="{height}" '
        'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="phase timeline">'
    ]
    start = 0.0
    for i, (name, secs) in enumerate(timings.items()):
        x, w, y = 200 + width * start / total, max(1.0, width * secs / total), 4 + row * i
        out.append(
            f'<text x="194" y="{y + 12}" font-size="11" text-anchor="end">{escape(name)}</text>'
            f'<rect class="phase" x="{x:.1f}" y="{y}" width="{w:.1f}" height="{row - 4}" '
            f'fill="#3b6fb6"><title>{escape(name)} {secs:.3f}s</title></rect>'
            f'<text x="{x + w + 4:.1f}" y="{y + 12}" font-size="10">{secs:.2f}s</text>'
        )
        start += secs
    out.append("</svg>")
    return "".join(out)


def _mean(tallies: dict[str, Any] | None) -> float | None:
    if not tallies:
        return None
    n = sum(t.n for t in tallies.values())
    return sum(t.total for t in tallies.values()) / n if n else None


def make_app(viewer: Viewer) -> Starlette:
    """The Starlette app of a viewer."""
    v = viewer
    routes = [
        Route("/", v.sweeps),
        Route("/sweeps/{sweep}", v.sweep),
        Route("/sweeps/{sweep}/part/{part}", v.sweep_part),
        Route("/api/sweeps/{sweep}/state", v.state),
        Route("/trials/{sweep}/{key}", v.trial),
        Route("/trials/{sweep}/{key}/versus/{other}", v.versus),
        Route("/trials/{sweep}/{key}/{attempt:int}/file", v.file),
        Route("/trials/{sweep}/{key}/{attempt:int}/raw", v.raw),
        Route("/trials/{sweep}/{key}/{attempt:int}/bundle", v.bundle),
        Route("/trials/{sweep}/{key}/{attempt:int}/trajectory.json", v.trajectory),
        Route("/compare", v.compare),
        *(
            Route(page.path, v.kind_page(page), methods=["GET", "POST"] if page.action else None)
            for kind in kinds()
            for page in kind.pages
        ),
        Route("/static/pygments.css", v.pygments_css),
        Route("/favicon.ico", lambda _: Response(status_code=204)),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    return Starlette(routes=routes, middleware=[Middleware(SecurityHeaders)])
