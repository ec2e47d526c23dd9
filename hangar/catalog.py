"""The results store as the viewer pages through it: every sweep with its verdict mix,
a sweep's trials a page at a time, filtered, and a trial's neighbours (`Catalog`).

The SQL of those pages lives here, in the store's layer, beside `hangar.store`: nothing
above the store writes a query (the viewer, `hangar store` and the reports call these).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import func, or_, select, tuple_

from hangar.results import TrialResult
from hangar.store import ResultsStore, latest_attempts, sweeps, trials

T = TypeVar("T")

#: Trials a page lists.
PAGE = 100


class SweepRow(BaseModel):
    """One line of the sweeps page."""

    id: str
    created_at: datetime
    updated_at: datetime
    total: int
    """Trials the sweep's matrix holds."""
    done: int
    """Trials with a result (latest attempts)."""
    verdicts: dict[str, int]
    models: list[str]
    agents: list[str]
    arms: list[str]
    suites: list[str]
    kinds: list[str]
    cost_usd: float

    @property
    def pass_rate(self) -> float | None:
        """Passes over counted trials (None: none counted)."""
        counted = self.verdicts.get("pass", 0) + self.verdicts.get("fail", 0)
        return self.verdicts.get("pass", 0) / counted if counted else None


class Filters(BaseModel):
    """The sweeps page's filters (empty: no filter)."""

    suite: str = ""
    model: str = ""
    agent: str = ""
    arm: str = ""
    since: str = ""
    """ISO date or time: updated at or after."""
    until: str = ""
    """ISO date or time: created at or before."""


class TrialFilters(BaseModel):
    """A sweep's trial list filters."""

    verdict: str = ""
    scenario: str = ""
    agent: str = ""
    model: str = ""
    arm: str = ""


#: What the sweeps page lists of each sweep's trials.
_SEEN = ("model", "agent", "arm", "suite", "kind")


@dataclass
class _Mix:
    """The latest attempts of one sweep, summed."""

    verdicts: dict[str, int] = field(default_factory=dict)
    seen: dict[str, set[str]] = field(default_factory=lambda: {k: set() for k in _SEEN})
    cost: float = 0.0


def _filtered(query: Any, f: Filters) -> Any:
    """`query` of sweeps narrowed to those with trials matching the filters `f`."""
    for column, value in (
        (trials.c.suite, f.suite),
        (trials.c.model, f.model),
        (trials.c.agent, f.agent),
        (trials.c.arm, f.arm),
    ):
        if value:
            query = query.where(
                select(trials.c.sweep_id)
                .where(trials.c.sweep_id == sweeps.c.id, column == value)
                .exists()
            )
    if f.since:
        query = query.where(sweeps.c.updated_at >= datetime.fromisoformat(f.since))
    if f.until:
        query = query.where(sweeps.c.created_at <= datetime.fromisoformat(f.until))
    return query


class Catalog:
    """The store, read for the viewer."""

    def __init__(self, store: ResultsStore) -> None:
        self.store = store
        self._known: dict[tuple[str, str | None], tuple[tuple[int, str], Any]] = {}
        self._known_lock = threading.Lock()

    def _latest(self, sweep_id: str | None = None) -> Any:
        return latest_attempts(sweep_id)

    def _current(self, what: str, sweep_id: str | None, compute: Callable[[], T]) -> T:
        """`compute()`, kept until the sweep's trials change (any trial: `sweep_id` None);
        what every page asks of a 100,000-trial sweep is asked of the store once."""
        state = self.state(sweep_id)
        with self._known_lock:
            known = self._known.get((what, sweep_id))
        if known is not None and known[0] == state:
            found: T = known[1]
            return found
        value = compute()
        with self._known_lock:
            self._known[(what, sweep_id)] = (state, value)
        return value

    def sweeps(self, f: Filters, page: int = 0, per_page: int = 50) -> tuple[list[SweepRow], int]:
        """A page of sweeps, newest first, and how many match."""
        query = _filtered(select(sweeps), f)
        with self.store.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(query.subquery())).scalar_one()
            rows = conn.execute(
                query.order_by(sweeps.c.updated_at.desc()).limit(per_page).offset(page * per_page)
            ).all()
        mixes = {r.id: self._current("mix", r.id, functools.partial(self._mix, r.id)) for r in rows}
        return [
            SweepRow(
                id=r.id,
                created_at=r.created_at,
                updated_at=r.updated_at,
                total=r.total_trials,
                done=sum(mixes[r.id].verdicts.values()),
                verdicts=mixes[r.id].verdicts,
                models=sorted(mixes[r.id].seen["model"]),
                agents=sorted(mixes[r.id].seen["agent"]),
                arms=sorted(mixes[r.id].seen["arm"]),
                suites=sorted(mixes[r.id].seen["suite"]),
                kinds=sorted(mixes[r.id].seen["kind"]),
                cost_usd=mixes[r.id].cost,
            )
            for r in rows
        ], total

    def _mix(self, sweep_id: str) -> _Mix:
        """What the latest attempts of a sweep hold: verdicts, the models, agents, arms,
        suites and kinds seen, and the cost."""
        mix = _Mix()
        latest = self._latest(sweep_id)
        keys = [getattr(latest.c, k) for k in ("verdict", *_SEEN)]
        with self.store.engine.connect() as conn:
            grouped = conn.execute(
                select(
                    *keys,
                    func.count().label("n"),
                    func.sum(latest.c.cost_usd + latest.c.judge_cost_usd).label("cost"),
                ).group_by(*keys)
            ).all()
        for g in grouped:
            mix.verdicts[g.verdict] = mix.verdicts.get(g.verdict, 0) + g.n
            mix.cost += float(g.cost or 0)
            for k in _SEEN:
                if getattr(g, k):
                    mix.seen[k].add(getattr(g, k))
        return mix

    def state(self, sweep_id: str | None) -> tuple[int, str]:
        """(rows, newest finish) of a sweep (of the store: None): what changes when a trial
        lands."""
        query = select(func.count(), func.max(trials.c.finished_at))
        if sweep_id is not None:
            query = query.where(trials.c.sweep_id == sweep_id)
        with self.store.engine.connect() as conn:
            row = conn.execute(query).one()
        return int(row[0]), str(row[1] or "")

    def exists(self, sweep_id: str) -> bool:
        """Whether the store knows the sweep."""
        with self.store.engine.connect() as conn:
            return (
                conn.execute(select(sweeps.c.id).where(sweeps.c.id == sweep_id)).first() is not None
            )

    def trials(
        self, sweep_id: str, f: TrialFilters, page: int = 0, per_page: int = PAGE
    ) -> tuple[list[dict[str, Any]], int]:
        """A page of a sweep's trials (latest attempts, newest first) and how many match."""
        latest = self._latest(sweep_id)
        query = select(
            latest.c.trial_key,
            latest.c.attempt,
            latest.c.scenario_id,
            latest.c.agent,
            latest.c.model,
            latest.c.arm,
            latest.c.repeat,
            latest.c.verdict,
            latest.c.reason,
            latest.c.duration_s,
            latest.c.cost_usd,
            latest.c.judge_cost_usd,
            latest.c.kind,
            latest.c.finished_at,
        )
        for column, value in (
            (latest.c.verdict, f.verdict),
            (latest.c.agent, f.agent),
            (latest.c.model, f.model),
            (latest.c.arm, f.arm),
        ):
            if value:
                query = query.where(column == value)
        if f.scenario:
            query = query.where(
                or_(latest.c.scenario_id == f.scenario, latest.c.scenario_id.contains(f.scenario))
            )
        with self.store.engine.connect() as conn:
            total = conn.execute(select(func.count()).select_from(query.subquery())).scalar_one()
            rows = conn.execute(
                query.order_by(latest.c.finished_at.desc(), latest.c.trial_key)
                .limit(per_page)
                .offset(page * per_page)
            ).all()
        return [dict(r._mapping) for r in rows], total

    def trial(self, sweep_id: str, key: str, attempt: int | None = None) -> TrialResult | None:
        """One trial's result (its latest attempt unless `attempt`)."""
        found = [
            r
            for r in self.store.results_of(sweep_id, key)
            if attempt is None or r.attempt == attempt
        ]
        return max(found, key=lambda r: r.attempt) if found else None

    def choices(self, sweep_id: str | None = None) -> dict[str, list[str]]:
        """The values the filters offer: every suite, model, agent, arm and scenario seen
        (in one sweep, or in the whole store)."""
        return self._current("choices", sweep_id, functools.partial(self._choices, sweep_id))

    def _choices(self, sweep_id: str | None) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        with self.store.engine.connect() as conn:
            for name in ("suite", "model", "agent", "arm", "scenario_id"):
                column = getattr(trials.c, name)
                query = select(column).distinct().order_by(column)
                if sweep_id is not None:
                    query = query.where(trials.c.sweep_id == sweep_id)
                found[name] = [v for (v,) in conn.execute(query) if v]
        return found

    def siblings(self, sweep_id: str, key: str) -> list[dict[str, Any]]:
        """The other trials of the same task in the sweep (another agent, model, arm or
        repeat), for a side-by-side look."""
        latest = self._latest(sweep_id)
        with self.store.engine.connect() as conn:
            scenario = conn.execute(
                select(latest.c.scenario_id).where(latest.c.trial_key == key)
            ).scalar()
            rows = conn.execute(
                select(
                    latest.c.trial_key,
                    latest.c.agent,
                    latest.c.model,
                    latest.c.arm,
                    latest.c.repeat,
                    latest.c.verdict,
                )
                .where(latest.c.scenario_id == scenario, latest.c.trial_key != key)
                .order_by(latest.c.agent, latest.c.model, latest.c.arm, latest.c.repeat)
            ).all()
        return [dict(r._mapping) for r in rows]

    def neighbours(self, sweep_id: str, key: str) -> tuple[str | None, str | None]:
        """The trials before and after `key` in its sweep, ordered by scenario, agent,
        model, arm, repeat and key (None at either end): two indexed lookups, never the
        sweep's keys in memory."""
        latest = self._latest(sweep_id)
        c = latest.c
        order = (c.scenario_id, c.agent, c.model, c.arm, c.repeat, c.trial_key)
        with self.store.engine.connect() as conn:
            me = conn.execute(select(*order).where(c.trial_key == key)).first()
            if me is None:
                return None, None
            here = tuple_(*order)
            before = conn.execute(
                select(c.trial_key)
                .where(here < tuple_(*me))
                .order_by(*(o.desc() for o in order))
                .limit(1)
            ).first()
            after = conn.execute(
                select(c.trial_key).where(here > tuple_(*me)).order_by(*order).limit(1)
            ).first()
        return (before[0] if before else None), (after[0] if after else None)

    def attempts(self, sweep_id: str, key: str) -> list[int]:
        """Every attempt of a trial."""
        return sorted(r.attempt for r in self.store.results_of(sweep_id, key))
