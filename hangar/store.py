"""The results store: sweeps, trials (one row per attempt), checks, baselines.

SQLAlchemy 2 (Core): SQLite by default (WAL mode, so a reader never blocks the driver),
PostgreSQL for clusters and Grafana. The driver is the only writer. Tables are created
on first use; a ``hangar_meta`` row holds the schema version, and a store written by a
newer hangar is refused rather than misread.
"""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Collection, Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import orjson
from pydantic import BaseModel
from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Engine,
    Float,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    create_engine,
    event,
    func,
    inspect,
    select,
    text,
    true,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import IntegrityError, SQLAlchemyError

from hangar.errors import ConfigError, StoreError
from hangar.paths import runs_dir
from hangar.results import (
    STORED_PREFIX,
    CheckOutcome,
    FindingOutcome,
    ProviderError,
    Score,
    SweepRecord,
    TrialResult,
    Usage,
    Verdict,
)

SCHEMA_VERSION = 12
#: Bump when a view's definition changes; views are rebuilt when the store is opened.
VIEWS_VERSION = 5

metadata = MetaData()

sweeps = Table(
    "sweeps",
    metadata,
    Column("id", String(200), primary_key=True),
    Column("config", JSON, nullable=False),
    Column("total_trials", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

#: The latest attempts of a sweep, found by what outputs ask of them: counted by group
#: (`hangar status`, the sweeps page), newest first (the trials page, reports), in a
#: trial's order (its neighbours on the viewer's trial page).
_LATEST_INDEXES = (
    Index("ix_trials_latest", "sweep_id", "latest", "agent", "model", "arm", "verdict"),
    Index("ix_trials_latest_finished", "sweep_id", "latest", "finished_at"),
    Index(
        "ix_trials_latest_order",
        "sweep_id",
        "latest",
        "scenario_id",
        "agent",
        "model",
        "arm",
        "repeat",
        "trial_key",
    ),
)

trials = Table(
    "trials",
    metadata,
    Column("sweep_id", String(200), primary_key=True),
    Column("trial_key", String(64), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("scenario_id", String(200), nullable=False),
    Column("scenario_digest", String(64), nullable=False),
    Column("suite", String(200), nullable=False, server_default=""),
    Column("agent", String(200), nullable=False),
    Column("model", String(200), nullable=False),
    Column("arm", String(200), nullable=False),
    Column("repeat", Integer, nullable=False),
    Column("verdict", String(32), nullable=False),
    Column("final", Boolean, nullable=False),
    Column("reason", Text, nullable=False),
    Column("completed", Boolean, nullable=False),
    Column("agent_exit_code", Integer),
    Column("started_at", DateTime(timezone=True), nullable=False),
    Column("finished_at", DateTime(timezone=True), nullable=False),
    Column("duration_s", Float, nullable=False),
    Column("timings", JSON, nullable=False),
    Column("tokens_in", BigInteger, nullable=False),
    Column("tokens_out", BigInteger, nullable=False),
    Column("tokens_cached", BigInteger, nullable=False),
    Column("tokens_reasoning", BigInteger, nullable=False),
    Column("cost_usd", Float, nullable=False),
    Column("evidence_uri", Text),
    Column("evidence_sha256", String(64)),
    Column("node", String(255), nullable=False),
    Column("schema_version", Integer, nullable=False),
    # schema 3
    Column("route", JSON),
    Column("scope", JSON),
    Column("agent_digest", String(64), nullable=False, server_default=""),
    Column("agent_settings", JSON),
    Column("plugins_digest", String(64), nullable=False, server_default=""),
    Column("provider_error", JSON),
    # schema 4
    Column("kind", String(16), nullable=False, server_default="execution"),
    Column("details", JSON),
    # schema 5
    Column("judge_tokens_in", BigInteger, nullable=False, server_default="0"),
    Column("judge_tokens_out", BigInteger, nullable=False, server_default="0"),
    Column("judge_cost_usd", Float, nullable=False, server_default="0"),
    # schema 11: whether this is its trial's latest attempt (what every output reads;
    # `ResultsStore.record` keeps it, `_LATEST_AGAIN` mends it)
    Column("latest", Boolean, nullable=False, server_default=true()),
    Index("ix_trials_sweep_final", "sweep_id", "final"),
    Index("ix_trials_finished", "finished_at"),
    Index("ix_trials_model_arm", "model", "arm"),
    *_LATEST_INDEXES,
)

checks = Table(
    "checks",
    metadata,
    Column("sweep_id", String(200), primary_key=True),
    Column("trial_key", String(64), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("idx", Integer, primary_key=True),
    Column("requirement", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("evidence", JSON, nullable=False),
)

scores = Table(
    "scores",
    metadata,
    Column("sweep_id", String(200), primary_key=True),
    Column("trial_key", String(64), primary_key=True),
    Column("attempt", Integer, primary_key=True),
    Column("metric", String(100), primary_key=True),
    Column("value", Float),
    Column("scale", String(16), nullable=False),
    Column("low", Float),
    Column("high", Float),
)

baselines = Table(
    "baselines",
    metadata,
    Column("name", String(200), primary_key=True),
    Column("sweep_id", String(200), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("snapshot", JSON, nullable=False),
)

#: Each task version's validation (`hangar dataset validate`): whether its reference
#: solution passes and doing nothing fails, so that no model is charged for a broken task.
validations = Table(
    "validations",
    metadata,
    Column("digest", String(64), primary_key=True),
    Column("task_id", String(200), nullable=False),
    Column("status", String(16), nullable=False),
    Column("reason", Text, nullable=False),
    Column("sweep_id", String(200), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

#: Routes observed in people's own agent sessions (imported with the session audit):
#: historical evidence, kept apart from trials so that no live score ever counts them.
historical_routes = Table(
    "historical_routes",
    metadata,
    Column("suite", String(200), primary_key=True),
    Column("session_sha256", String(64), primary_key=True),
    Column("case_id", String(200), nullable=False),
    Column("source", String(16), nullable=False),
    Column("session_id", String(200), nullable=False),
    Column("path", Text, nullable=False),
    Column("observed_at", String(64), nullable=False),
    Column("loaded", JSON, nullable=False),
    Column("route", JSON),
    Column("exact", Boolean),
    Column("imported_at", DateTime(timezone=True), nullable=False),
)

#: Knowledge gold set scores, per answer and arm (`hangar.kinds.knowledge.record`): an
#: arm answers outside trials too (a person's), and its worth comes later from labels. Each
#: re-score that sees new labels (or answers, or scoring code) is a new version; `current`
#: marks the latest of each (suite, arm, question). ``v_scores`` shows the current ones.
knowledge_scores = Table(
    "knowledge_scores",
    metadata,
    Column("suite", String(200), primary_key=True),
    Column("arm", String(200), primary_key=True),
    Column("question_id", String(200), primary_key=True),
    Column("version", String(64), primary_key=True),
    Column("current", Boolean, nullable=False),
    Column("status", String(16), nullable=False),
    Column("correct", Float),
    Column("citation_valid", Float),
    Column("citations", JSON, nullable=False),
    Column("votes", JSON, nullable=False),
    Column("agent", String(200), nullable=False),
    Column("model", String(200), nullable=False),
    Column("sweep_id", String(200)),
    Column("trial_key", String(64)),
    Column("manifest_sha256", String(64), nullable=False),
    Column("scored_at", DateTime(timezone=True), nullable=False),
)

#: Evidence archives kept in the store itself: those of trials with no sandbox (a decision
#: case's prompt, a rubric sample), written by the driver in the commit of their results.
#: A file or object per call cost such a trial more CPU than its model call
#: (`benchmarks/prompt.py`); the archive and its sha256 are the same as in an evidence
#: store, and the result's URI is ``store:///<key>`` (`hangar.evidence.stores`).
bundles = Table(
    "bundles",
    metadata,
    Column("key", String(400), primary_key=True),
    Column("sweep_id", String(200), nullable=False, index=True),
    Column("data", LargeBinary, nullable=False),
)

meta = Table(
    "hangar_meta",
    metadata,
    Column("key", String(64), primary_key=True),
    Column("value", Text, nullable=False),
)


#: Columns each schema version added to `trials` (as ALTER TABLE ... ADD COLUMN takes them).
_ADDED = {
    2: ["suite VARCHAR(200) NOT NULL DEFAULT ''"],
    3: [
        "route JSON",
        "scope JSON",
        "agent_digest VARCHAR(64) NOT NULL DEFAULT ''",
        "agent_settings JSON",
        "plugins_digest VARCHAR(64) NOT NULL DEFAULT ''",
        "provider_error JSON",
    ],
    4: ["kind VARCHAR(16) NOT NULL DEFAULT 'execution'", "details JSON"],
    5: [
        "judge_tokens_in BIGINT NOT NULL DEFAULT 0",
        "judge_tokens_out BIGINT NOT NULL DEFAULT 0",
        "judge_cost_usd FLOAT NOT NULL DEFAULT 0",
    ],
    6: [],
    7: [],  # the validations table (created as new tables are)
    8: [],  # the historical_routes table
    9: [],  # the knowledge_scores table
    10: [],  # decision cases' kind: "decision", formerly "prompt" (`_REWRITTEN`)
    11: ["latest BOOLEAN NOT NULL DEFAULT TRUE"],
    12: [],  # the bundles table
}

#: Every attempt of a trial that a later one followed marked as not the latest.
_LATEST_AGAIN = """
    UPDATE trials SET latest = FALSE
    WHERE latest AND EXISTS (SELECT 1 FROM trials n WHERE n.sweep_id = trials.sweep_id
                             AND n.trial_key = trials.trial_key AND n.attempt > trials.attempt)
"""

#: Data each schema version rewrote. 6: scores came with schema 4, and every trial
#: recorded before them was an execution trial: a judged one gets the ``pass`` score its
#: verdict implies (earlier hangars implied it when reading; now it is stored). 10: the
#: kind of decision cases is called ``decision`` (`hangar.results.FORMER_KINDS`).
_REWRITTEN = {
    6: """
        INSERT INTO scores (sweep_id, trial_key, attempt, metric, value, scale)
        SELECT t.sweep_id, t.trial_key, t.attempt, 'pass',
               CASE WHEN t.verdict = 'pass' THEN 1.0 ELSE 0.0 END, 'binary'
        FROM trials t
        WHERE t.kind = 'execution' AND t.verdict IN ('pass', 'fail')
          AND NOT EXISTS (SELECT 1 FROM scores s WHERE s.sweep_id = t.sweep_id
                          AND s.trial_key = t.trial_key AND s.attempt = t.attempt)
    """,
    10: "UPDATE trials SET kind = 'decision' WHERE kind = 'prompt'",
    11: _LATEST_AGAIN,
}


def default_store_url() -> str:
    """SQLite under the runs folder."""
    return f"sqlite:///{runs_dir() / 'hangar.db'}"


def _aware(value: datetime) -> datetime:
    return value if value.tzinfo else value.replace(tzinfo=UTC)


class ResultsStore:
    """Reads and writes results; open one per process (the driver is the only writer)."""

    def __init__(self, url: str | None = None, *, create: bool = True) -> None:
        """Open the store at `url` (default: the local one). With `create` False (every
        command that only reads), a store that is not there is an error naming where it
        was looked for, and nothing is created."""
        self.url = url or default_store_url()
        if not create:
            self._check_exists()
        try:
            self.engine = self._engine(self.url)
            if not create and not inspect(self.engine).has_table("sweeps"):
                raise StoreError(f"no store at {self.safe_url}: it holds no hangar results")
            self._migrate()
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot open the results store {self.safe_url}: {exc}") from exc

    def _check_exists(self) -> None:
        """A missing SQLite file is refused before SQLite creates it."""
        path = self.url.removeprefix("sqlite:///")
        if self.url.startswith("sqlite:///") and path != ":memory:" and not Path(path).is_file():
            raise StoreError(
                f"no store at {path}: run a sweep first (`hangar run SWEEP`), or name the "
                "store with --store or the sweep file whose results you want"
            )

    @property
    def safe_url(self) -> str:
        """The URL without its password (for messages and logs)."""
        from sqlalchemy.engine import make_url

        return make_url(self.url).render_as_string(hide_password=True)

    @staticmethod
    def _engine(url: str) -> Engine:
        if url.startswith("sqlite:///"):
            path = url.removeprefix("sqlite:///")
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": 30}, json_deserializer=_json_loads)

            @event.listens_for(engine, "connect")
            def _pragmas(conn: Any, _record: Any) -> None:
                cur = conn.cursor()
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA synchronous=NORMAL")
                cur.close()

            return engine
        if url.startswith(("postgresql", "postgres")):
            return create_engine(url, pool_pre_ping=True, json_deserializer=_json_loads)
        raise ConfigError(
            f"unsupported results store {url!r}: use sqlite:///PATH or postgresql+psycopg://..."
        )

    def _migrate(self) -> None:
        """Create what is missing, upgrade an older schema step by step, rebuild views."""
        metadata.create_all(self.engine)
        with self.engine.begin() as conn:
            version = self._meta(conn, "schema_version")
            if version is None:
                self._set_meta(conn, "schema_version", str(SCHEMA_VERSION))
            elif int(version) > SCHEMA_VERSION:
                raise StoreError(
                    f"the results store {self.safe_url} has schema {version}, newer than this "
                    f"hangar's {SCHEMA_VERSION}: upgrade hangar"
                )
            elif int(version) < SCHEMA_VERSION:
                # Only what is missing (a store an interrupted upgrade left half done).
                have = {c["name"] for c in inspect(conn).get_columns("trials")}
                for step in range(int(version) + 1, SCHEMA_VERSION + 1):
                    for column in _ADDED[step]:
                        if column.split()[0] not in have:
                            conn.exec_driver_sql(f"ALTER TABLE trials ADD COLUMN {column}")
                    if step in _REWRITTEN:
                        conn.exec_driver_sql(_REWRITTEN[step])
                    if step == 11:  # an existing table gets a new table's indexes
                        for index in _LATEST_INDEXES:
                            index.create(conn, checkfirst=True)
                self._set_meta(conn, "schema_version", str(SCHEMA_VERSION))
            if self._meta(conn, "views_version") != str(VIEWS_VERSION):
                for statement in views_sql(self.engine.dialect.name):
                    conn.exec_driver_sql(statement)
                self._set_meta(conn, "views_version", str(VIEWS_VERSION))

    @staticmethod
    def _meta(conn: Any, key: str) -> str | None:
        row = conn.execute(select(meta.c.value).where(meta.c.key == key)).first()
        return None if row is None else str(row.value)

    @staticmethod
    def _set_meta(conn: Any, key: str, value: str) -> None:
        conn.execute(meta.delete().where(meta.c.key == key))
        conn.execute(meta.insert().values(key=key, value=value))

    def _insert(self, table: Table) -> Any:
        insert = pg_insert if self.engine.dialect.name == "postgresql" else sqlite_insert
        return insert(table)

    # -- validations ----------------------------------------------------------------------

    def record_validations(self, rows: Iterable[dict[str, str]]) -> None:
        """Record task validations ({digest, task_id, status, reason, sweep_id}), each
        replacing the task version's earlier one."""
        now = datetime.now(UTC)
        with self.engine.begin() as conn:
            for row in rows:
                stmt = self._insert(validations).values(**row, updated_at=now)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["digest"],
                        set_={k: v for k, v in {**row, "updated_at": now}.items() if k != "digest"},
                    )
                )

    # -- historical routes ----------------------------------------------------------------

    _ROUTE_KEY = ("suite", "session_sha256")

    def record_historical_routes(self, rows: Iterable[dict[str, Any]]) -> int:
        """Record routes observed in sessions (a `historical_routes` row each, without
        ``imported_at``); a session already recorded for the suite is replaced (a re-import
        after the suite's cases changed re-grades it). Returns how many."""
        now = datetime.now(UTC)
        n = 0
        with self.engine.begin() as conn:
            for row in rows:
                values = {**row, "imported_at": now}
                stmt = self._insert(historical_routes).values(**values)
                conn.execute(
                    stmt.on_conflict_do_update(
                        index_elements=["suite", "session_sha256"],
                        set_={
                            k: v for k, v in values.items() if k not in ("suite", "session_sha256")
                        },
                    )
                )
                n += 1
        return n

    def historical_routes(self, suite: str) -> list[dict[str, Any]]:
        """The routes recorded for `suite`, by case then time observed."""
        t = historical_routes
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(t).where(t.c.suite == suite).order_by(t.c.case_id, t.c.observed_at)
            )
            return [dict(r._mapping) for r in rows]

    # -- knowledge scores -----------------------------------------------------------------

    def record_knowledge_scores(self, rows: Iterable[dict[str, Any]]) -> tuple[int, int]:
        """Record per-answer knowledge scores (`knowledge_scores` rows without ``current``
        and ``scored_at``): a new version becomes the current score of its (suite, arm,
        question); a version recorded before is kept as it was, made current again if it
        was not. Returns (versions made current, unchanged)."""
        t = knowledge_scores
        new = same = 0
        now = datetime.now(UTC)
        with self.engine.begin() as conn:
            for row in rows:
                key = (t.c.suite == row["suite"]) & (t.c.arm == row["arm"])
                key = key & (t.c.question_id == row["question_id"])
                version = t.c.version == row["version"]
                found = conn.execute(select(t.c.current).where(key & version)).first()
                if found is not None and found.current:
                    same += 1
                    continue
                conn.execute(t.update().where(key).values(current=False))
                if found is None:
                    conn.execute(t.insert().values(**row, current=True, scored_at=now))
                else:  # the inputs are back to an earlier version's: it is current again
                    conn.execute(t.update().where(key & version).values(current=True))
                new += 1
        return new, same

    def knowledge_scores(
        self, suite: str | None = None, *, sweep: str | None = None, current: bool = True
    ) -> list[dict[str, Any]]:
        """Knowledge scores (of a suite, or of a sweep's trials), the current ones only
        unless `current` is False."""
        t = knowledge_scores
        query = select(t)
        if suite is not None:
            query = query.where(t.c.suite == suite)
        if sweep is not None:
            query = query.where(t.c.sweep_id == sweep)
        if current:
            query = query.where(t.c.current.is_(True))
        order = (t.c.suite, t.c.arm, t.c.question_id, t.c.scored_at)
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query.order_by(*order))]

    def validations(self, digests: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The recorded validations of these task versions, by digest."""
        wanted = list(digests)
        with self.engine.connect() as conn:
            rows = conn.execute(select(validations).where(validations.c.digest.in_(wanted)))
            return {r.digest: dict(r._mapping) for r in rows}

    # -- baselines (`hangar.scores.kept.StoreBaselines`) ------------------------------------

    def baselines(self) -> list[tuple[str, str, datetime]]:
        """(name, sweep, created_at) of every kept baseline, oldest first."""
        c = baselines.c
        with self.engine.connect() as conn:
            rows = conn.execute(select(c.name, c.sweep_id, c.created_at).order_by(c.created_at))
            return [(r.name, r.sweep_id, r.created_at) for r in rows]

    def keep_baseline(self, name: str, sweep_id: str, created_at: datetime, snapshot: Any) -> None:
        """Keep `snapshot` as baseline `name`; FileExistsError when the name is taken (the
        primary key decides, so two writers cannot both take it)."""
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    baselines.insert().values(
                        name=name, sweep_id=sweep_id, created_at=created_at, snapshot=snapshot
                    )
                )
        except IntegrityError:
            raise FileExistsError(name) from None

    def baseline(self, name: str) -> Any | None:
        """The snapshot kept as baseline `name` (None: none)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(baselines.c.snapshot).where(baselines.c.name == name)).first()
        return None if row is None else row.snapshot

    # -- sweeps ---------------------------------------------------------------------------

    def ensure_sweep(self, sweep_id: str, config: dict[str, Any], total: int) -> None:
        """Register the sweep, or refresh its config and size when it runs again."""
        now = datetime.now(UTC)
        with self.engine.begin() as conn:
            stmt = self._insert(sweeps).values(
                id=sweep_id, config=config, total_trials=total, created_at=now, updated_at=now
            )
            conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["id"],
                    set_={"config": config, "total_trials": total, "updated_at": now},
                )
            )

    def sweep_config(self, sweep_id: str) -> SweepRecord | None:
        """The config the sweep last ran with (None: no such sweep)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(sweeps.c.config).where(sweeps.c.id == sweep_id)).first()
            return None if row is None else SweepRecord.model_validate(row.config or {})

    def runs(self, family: str) -> list[tuple[str, datetime]]:
        """The runs of one sweep file, newest first: (sweep id, when it was first run) of
        every sweep recorded with that `family` (its id as the file gives it), and of the
        sweep whose id is `family` (recorded before families were)."""
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(sweeps.c.id, sweeps.c.config, sweeps.c.created_at).order_by(
                    sweeps.c.created_at.desc(), sweeps.c.id.desc()
                )
            )
            return [
                (r.id, r.created_at) for r in rows if (r.config or {}).get("family", r.id) == family
            ]

    def sweep_ids(self) -> list[str]:
        """Every sweep in the store, newest first."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(sweeps.c.id).order_by(sweeps.c.updated_at.desc()))
            return [r.id for r in rows]

    # -- trials ---------------------------------------------------------------------------

    def record(self, results: Iterable[TrialResult]) -> int:
        """Write results in one transaction (a row already there is kept); returns rows."""
        rows, check_rows, score_rows, bundle_rows = [], [], [], []
        for r in results:
            rows.append(_trial_row(r))
            if r.evidence_data is not None and r.evidence_uri:
                key = r.evidence_uri.removeprefix(STORED_PREFIX)
                bundle_rows.append({"key": key, "sweep_id": r.sweep, "data": r.evidence_data})
            attempt = {"sweep_id": r.sweep, "trial_key": r.trial_key, "attempt": r.attempt}
            score_rows += [{**attempt, **score.model_dump()} for score in r.scores]
            check_rows += [
                {
                    **attempt,
                    "idx": i,
                    "requirement": c.requirement,
                    "status": c.status,
                    "evidence": list(c.evidence),
                }
                for i, c in enumerate(r.checks)
            ]
        if not rows:
            return 0
        try:
            with self.engine.begin() as conn:
                conn.execute(self._insert(trials).on_conflict_do_nothing(), rows)
                _mark_latest(conn, rows)
                if check_rows:
                    conn.execute(self._insert(checks).on_conflict_do_nothing(), check_rows)
                if score_rows:
                    conn.execute(self._insert(scores).on_conflict_do_nothing(), score_rows)
                if bundle_rows:
                    conn.execute(self._insert(bundles).on_conflict_do_nothing(), bundle_rows)
        except SQLAlchemyError as exc:
            raise StoreError(f"cannot write results to {self.safe_url}: {exc}") from exc
        return len(rows)

    def bundle(self, key: str) -> bytes | None:
        """The archive of a bundle kept in the store (None when there is none)."""
        with self.engine.connect() as conn:
            row = conn.execute(select(bundles.c.data).where(bundles.c.key == key)).first()
        return None if row is None else bytes(row.data)

    def resume_state(
        self, sweep_id: str, reopen: Collection[str] = ()
    ) -> tuple[set[str], dict[str, int]]:
        """Trial keys whose latest attempt is final, and the last attempt number of every
        key; a latest attempt whose verdict is in `reopen` (``blocked_setup``: what
        blocked it may have been mended) does not count as final."""
        final: set[str] = set()
        last: dict[str, int] = {}
        latest = self._latest(sweep_id)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(latest.c.trial_key, latest.c.attempt, latest.c.final, latest.c.verdict)
            )
            for key, attempt, is_final, verdict in rows:
                last[key] = attempt
                if is_final and verdict not in reopen:
                    final.add(key)
        return final, last

    def cost_history(self) -> list[dict[str, Any]]:
        """Every counted trial's latest attempt (pass or fail, any sweep): its kind, task
        version, model, arm, agent settings' digest, cost (the judge's included) and
        tokens; what estimates read."""
        query = text(
            "SELECT kind, scenario_digest, model, arm, agent_digest, "
            "cost_usd + judge_cost_usd AS cost_usd, tokens_in, tokens_out "
            "FROM v_trials WHERE counted = 1"
        )
        with self.engine.connect() as conn:
            return [dict(r._mapping) for r in conn.execute(query)]

    def cost(self, sweep_id: str) -> float:
        """What every attempt of the sweep cost, in USD (its judges' calls included)."""
        spent = trials.c.cost_usd + trials.c.judge_cost_usd
        with self.engine.connect() as conn:
            total = conn.execute(
                select(func.coalesce(func.sum(spent), 0.0)).where(trials.c.sweep_id == sweep_id)
            ).scalar_one()
        return float(total)

    def counts(self, sweep_id: str) -> list[tuple[str, str, str, str, int]]:
        """(verdict, agent, model, arm, trials) of each trial's latest attempt."""
        latest = self._latest(sweep_id)
        cols = (latest.c.verdict, latest.c.agent, latest.c.model, latest.c.arm)
        with self.engine.connect() as conn:
            rows = conn.execute(
                select(*cols, func.count())
                .group_by(*cols)
                .order_by(latest.c.agent, latest.c.model, latest.c.arm, latest.c.verdict)
            )
            return [(v, g, m, a, int(n)) for v, g, m, a, n in rows]

    def _latest(self, sweep_id: str) -> Any:
        """Each trial key's latest attempt in the sweep, as a subquery."""
        return latest_attempts(sweep_id)

    def results(self, sweep_id: str, *, all_attempts: bool = False) -> Iterator[TrialResult]:
        """The sweep's results (each trial's latest attempt unless `all_attempts`)."""
        source = trials if all_attempts else self._latest(sweep_id)
        yield from self._read(sweep_id, source, None)

    def find_trials(self, prefix: str, sweep_id: str | None = None) -> list[tuple[str, str]]:
        """(sweep, trial key) of the trials whose key starts with `prefix` (in `sweep_id`
        only, when given), newest first."""
        query = select(trials.c.sweep_id, trials.c.trial_key, func.max(trials.c.finished_at))
        query = query.where(trials.c.trial_key.startswith(prefix, autoescape=True))
        if sweep_id is not None:
            query = query.where(trials.c.sweep_id == sweep_id)
        query = query.group_by(trials.c.sweep_id, trials.c.trial_key)
        with self.engine.connect() as conn:
            rows = conn.execute(query.order_by(func.max(trials.c.finished_at).desc())).all()
        return [(r[0], r[1]) for r in rows]

    def results_of(self, sweep_id: str, trial_key: str) -> list[TrialResult]:
        """Every attempt of one trial, oldest first."""
        return list(self._read(sweep_id, trials, trial_key))

    def _read(self, sweep_id: str, source: Any, trial_key: str | None) -> Iterator[TrialResult]:
        """Results of `source` rows of a sweep (of one trial when `trial_key`)."""

        def only(table: Any) -> Any:
            condition = table.c.sweep_id == sweep_id
            return condition if trial_key is None else condition & (table.c.trial_key == trial_key)

        with self.engine.connect() as conn, _collections_paused():
            found: dict[tuple[str, int], list[CheckOutcome]] = {}
            for c in conn.execute(select(checks).where(only(checks)).order_by(checks.c.idx)):
                found.setdefault((c.trial_key, c.attempt), []).append(
                    _trusted(
                        CheckOutcome,
                        requirement=c.requirement,
                        status=c.status,
                        evidence=tuple(c.evidence),
                    )
                )
            valued: dict[tuple[str, int], list[Score]] = {}
            for v in conn.execute(select(scores).where(only(scores)).order_by(scores.c.metric)):
                valued.setdefault((v.trial_key, v.attempt), []).append(
                    _trusted(
                        Score, metric=v.metric, value=v.value, scale=v.scale, low=v.low, high=v.high
                    )
                )
            query = select(source).where(only(source)).order_by(source.c.finished_at)
            rows = conn.execute(query)
            names = tuple(rows.keys())
            for values in rows:
                row = dict(zip(names, values, strict=True))  # 6x faster than a Row's names
                key = (row["trial_key"], row["attempt"])
                yield _result(row, tuple(found.get(key, [])), tuple(valued.get(key, [])))


def latest_attempts(sweep_id: str | None = None) -> Any:
    """Each trial's latest attempt (in one sweep, or in every one), as a subquery."""
    query = select(trials).where(trials.c.latest == true())
    if sweep_id is not None:
        query = query.where(trials.c.sweep_id == sweep_id)
    return query.subquery()


#: Keys a statement names at most (SQLite takes 32,766 parameters).
_KEYS_AT_ONCE = 1000


#: The later attempts of a trial (`_mark_latest`), aliased once (each batch did it anew).
_NEWER = trials.alias("newer")


def _mark_latest(conn: Any, rows: list[dict[str, Any]]) -> None:
    """Mark the attempts that the just recorded `rows` (or earlier ones: results may come
    in any order, a node that froze reporting last) made no longer the latest."""
    keys: dict[str, list[str]] = {}
    for row in rows:
        keys.setdefault(row["sweep_id"], []).append(row["trial_key"])
    newer = _NEWER
    for sweep_id, found in keys.items():
        for at in range(0, len(found), _KEYS_AT_ONCE):
            conn.execute(
                update(trials)
                .where(
                    trials.c.sweep_id == sweep_id,
                    trials.c.trial_key.in_(found[at : at + _KEYS_AT_ONCE]),
                    trials.c.latest == true(),
                    select(newer.c.attempt)
                    .where(
                        newer.c.sweep_id == trials.c.sweep_id,
                        newer.c.trial_key == trials.c.trial_key,
                        newer.c.attempt > trials.c.attempt,
                    )
                    .exists(),
                )
                .values(latest=False)
            )


def views_sql(dialect: str) -> list[str]:
    """The stable views dashboards query (the tables may change underneath them).

    - ``v_attempts``: every attempt, with ``passed``/``counted`` flags and ``day``;
    - ``v_trials``: each trial's latest attempt, the same columns;
    - ``v_scores``: each trial's latest attempt, one row per score (metric, value,
      scale, bounds), and the current knowledge scores, per answer and arm (metrics
      ``correctness`` and ``citation_validity``; a pending answer's value is NULL; an
      arm run outside hangar has the sweep ``knowledge:<suite>``);
    - ``v_daily_model_scores``: per day, sweep, suite, agent, model and arm: counted
      trials, passes, cost, tokens, of latest attempts.
    """

    def day_of(column: str) -> str:
        pg = dialect == "postgresql"
        return f"date_trunc('day', {column})" if pg else f"date({column})"

    day = day_of("finished_at")
    drop = " CASCADE" if dialect == "postgresql" else ""
    attempts = f"""
        SELECT t.*, {day} AS day,
               CASE WHEN t.verdict = 'pass' THEN 1 ELSE 0 END AS passed,
               CASE WHEN t.verdict IN ('pass', 'fail') THEN 1 ELSE 0 END AS counted
        FROM trials t"""  # noqa: S608 - built from constants, no input
    return [
        f"DROP VIEW IF EXISTS v_daily_model_scores{drop}",
        f"DROP VIEW IF EXISTS v_scores{drop}",
        f"DROP VIEW IF EXISTS v_trials{drop}",
        f"DROP VIEW IF EXISTS v_attempts{drop}",
        f"CREATE VIEW v_attempts AS {attempts}",
        "CREATE VIEW v_trials AS SELECT a.* FROM v_attempts a WHERE a.latest",
        f"""CREATE VIEW v_scores AS
        SELECT t.sweep_id, t.trial_key, t.attempt, t.scenario_id, t.suite, t.agent, t.model,
               t.arm, t.kind, t.verdict, t.finished_at, t.day, t.cost_usd,
               s.metric, s.value, s.scale, s.low, s.high
        FROM v_trials t JOIN scores s
          ON s.sweep_id = t.sweep_id AND s.trial_key = t.trial_key
         AND s.attempt = t.attempt
        UNION ALL
        SELECT COALESCE(k.sweep_id, 'knowledge:' || k.suite), COALESCE(k.trial_key, ''), 0,
               k.question_id, k.suite, k.agent, k.model, k.arm, 'knowledge', k.status,
               k.scored_at, {day_of("k.scored_at")}, 0.0, m.metric,
               CASE m.metric WHEN 'correctness' THEN k.correct ELSE k.citation_valid END,
               'binary', NULL, NULL
        FROM knowledge_scores k
        CROSS JOIN (SELECT 'correctness' AS metric
                    UNION ALL SELECT 'citation_validity') m
        WHERE k.current""",  # noqa: S608 - built from constants, no input
        """CREATE VIEW v_daily_model_scores AS
        SELECT day, sweep_id, suite, agent, model, arm,
               SUM(counted) AS trials, SUM(passed) AS passes, SUM(cost_usd) AS cost_usd,
               SUM(tokens_in) AS tokens_in, SUM(tokens_out) AS tokens_out
        FROM v_trials GROUP BY day, sweep_id, suite, agent, model, arm""",
    ]


def copy_store(source: ResultsStore, target: ResultsStore) -> dict[str, int]:
    """Copy every row of `source` into `target`: rows already there are kept, but a
    sweep's own row takes the source's config and size (a sweep resumed since); returns
    the rows new to `target` per table. Run again after each sweep, it copies what is new.

    For people who run locally on SQLite and want the dashboards on PostgreSQL.
    """
    copied = {}
    with source.engine.connect() as src, target.engine.begin() as dst:
        tables = (sweeps, trials, checks, scores, baselines, validations, historical_routes)
        for table in (*tables, knowledge_scores):
            before = dst.execute(select(func.count()).select_from(table)).scalar_one()
            rows = [dict(r._mapping) for r in src.execute(select(table))]
            insert = target._insert(table)
            if rows and table is sweeps:
                fresh = {c: insert.excluded[c] for c in ("config", "total_trials", "updated_at")}
                dst.execute(insert.on_conflict_do_update(index_elements=["id"], set_=fresh), rows)
            elif rows:
                dst.execute(insert.on_conflict_do_nothing(), rows)
            if table is trials:
                dst.exec_driver_sql(_LATEST_AGAIN)  # attempts in both, older in one
            after = dst.execute(select(func.count()).select_from(table)).scalar_one()
            copied[table.name] = after - before
    return copied


def _json(value: BaseModel | None) -> dict[str, Any] | None:
    return None if value is None else value.model_dump(mode="json")


def _trial_row(r: TrialResult) -> dict[str, Any]:
    """A result as a row of `trials`."""
    return {
        "sweep_id": r.sweep,
        "trial_key": r.trial_key,
        "attempt": r.attempt,
        "scenario_id": r.scenario_id,
        "scenario_digest": r.scenario_digest,
        "suite": r.suite,
        "agent": r.agent,
        "model": r.model,
        "arm": r.arm,
        "repeat": r.repeat,
        "verdict": r.verdict.value,
        "final": r.verdict.final,
        "reason": r.reason,
        "completed": r.completed,
        "agent_exit_code": r.agent_exit_code,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "duration_s": r.duration_s,
        "timings": r.timings,
        "tokens_in": r.usage.input_tokens,
        "tokens_out": r.usage.output_tokens,
        "tokens_cached": r.usage.cached_input_tokens,
        "tokens_reasoning": r.usage.reasoning_tokens,
        "cost_usd": r.usage.cost_usd,
        "evidence_uri": r.evidence_uri,
        "evidence_sha256": r.evidence_sha256,
        "node": r.node,
        "schema_version": r.schema_version,
        "route": _json(r.route),
        "scope": _json(r.scope),
        "agent_digest": r.agent_digest,
        "agent_settings": r.agent_settings,
        "plugins_digest": r.plugins_digest,
        "provider_error": _json(r.provider_error),
        "kind": r.kind,
        "details": r.details,
        "judge_tokens_in": r.judge_usage.input_tokens,
        "judge_tokens_out": r.judge_usage.output_tokens,
        "judge_cost_usd": r.judge_usage.cost_usd,
    }


def _json_loads(text: str | bytes) -> Any:
    """A JSON column's text, parsed by orjson (a 100,000-trial read parses 700,000 of
    them: the standard library took a third of it); what orjson refuses but `json`
    wrote (NaN, Infinity) by `json`."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def _loaded(value: Any) -> Any:
    """A JSON column's value (a driver may hand back the text)."""
    return _json_loads(value) if isinstance(value, str) else value


_Built = TypeVar("_Built", bound=BaseModel)


@contextlib.contextmanager
def _collections_paused() -> Iterator[None]:
    """Python's cycle collector paused while rows become results: reading 100,000 of
    them made it walk every result read so far a dozen times (3.4 s of 9). Results hold
    no cycles; reference counting frees them as before. A collector paused by the
    caller stays paused."""
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _trusted(cls: type[_Built], **values: Any) -> _Built:
    """`cls` holding `values`, which name every one of its fields, as pydantic's
    `model_construct` makes it but without its walk through each field's aliases and
    defaults (on 100,000 rows, that walk was half of reading them). For models with no
    private attributes, no post-init and no extra fields (`tests/test_store.py` checks)."""
    made = cls.__new__(cls)
    ordered = {name: values[name] for name in cls.__pydantic_fields__}  # as dumps list them
    object.__setattr__(made, "__dict__", ordered)
    object.__setattr__(made, "__pydantic_fields_set__", set(ordered))
    object.__setattr__(made, "__pydantic_extra__", None)
    object.__setattr__(made, "__pydantic_private__", None)
    return made


#: The fields of a result kept in a column of the same name, as they are.
_SAME_NAMES = (
    "schema_version",
    "trial_key",
    "scenario_id",
    "scenario_digest",
    "suite",
    "agent",
    "model",
    "arm",
    "repeat",
    "attempt",
    "reason",
    "agent_exit_code",
    "evidence_uri",
    "evidence_sha256",
    "node",
    "agent_digest",
    "plugins_digest",
    "kind",
)


def _result(
    row: dict[str, Any], found: tuple[CheckOutcome, ...], valued: tuple[Score, ...] = ()
) -> TrialResult:
    """A row as the result it was written from. The row holds what a validated result
    held, so it is built without validating again (a 100,000-trial report reads each
    row once; validation was a third of it); its nested JSON models are validated."""

    def model(cls: type[BaseModel], value: Any) -> Any:
        loaded = _loaded(value)
        return None if loaded is None else cls.model_validate(loaded)

    return _trusted(
        TrialResult,
        **{name: row[name] for name in _SAME_NAMES},
        sweep=row["sweep_id"],
        verdict=Verdict(row["verdict"]),
        completed=bool(row["completed"]),
        checks=found,
        timings=_loaded(row["timings"]) or {},
        usage=_trusted(
            Usage,
            input_tokens=row["tokens_in"],
            output_tokens=row["tokens_out"],
            cached_input_tokens=row["tokens_cached"],
            reasoning_tokens=row["tokens_reasoning"],
            cost_usd=float(row["cost_usd"]),
        ),
        route=model(FindingOutcome, row["route"]),
        scope=model(FindingOutcome, row["scope"]),
        agent_settings=_loaded(row["agent_settings"]) or {},
        provider_error=model(ProviderError, row["provider_error"]),
        details=_loaded(row["details"]) or {},
        judge_usage=_trusted(
            Usage,
            input_tokens=row["judge_tokens_in"],
            output_tokens=row["judge_tokens_out"],
            cached_input_tokens=0,
            reasoning_tokens=0,
            cost_usd=float(row["judge_cost_usd"]),
        ),
        scores=valued,
        started_at=_aware(row["started_at"]),
        finished_at=_aware(row["finished_at"]),
        evidence_data=None,  # a bundle the store keeps is read on its own (`bundle`)
    )
