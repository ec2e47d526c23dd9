"""The results store, on SQLite and on a real PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, update

from hangar.errors import ConfigError, StoreError
from hangar.results import CheckOutcome, FindingOutcome, Score, TrialResult, Usage, Verdict
from hangar.store import ResultsStore, meta, trials


def result(
    key: str, attempt: int = 1, verdict: Verdict = Verdict.PASS, **kw: object
) -> TrialResult:
    start = datetime(2026, 11, 1, 12, 0, tzinfo=UTC) + timedelta(minutes=attempt)
    fields: dict[str, object] = dict(
        sweep="sw",
        trial_key=key,
        scenario_id="s1",
        scenario_digest="d" * 64,
        agent="gold",
        model="m1",
        arm="control",
        attempt=attempt,
        verdict=verdict,
        reason="because",
        completed=True,
        agent_exit_code=0,
        checks=(CheckOutcome(requirement="r1", status="pass", evidence=("e.txt",)),),
        timings={"agent": 1.5},
        usage=Usage(input_tokens=10, output_tokens=5, cost_usd=0.25),
        evidence_uri="file:///x",
        evidence_sha256="a" * 64,
        node="n1",
        started_at=start,
        finished_at=start + timedelta(seconds=3),
    )
    fields.update(kw)
    return TrialResult.model_validate(fields)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ResultsStore:
    if request.param == "sqlite":
        return ResultsStore(f"sqlite:///{tmp_path}/r.db")
    url: str = request.getfixturevalue("postgres_url")
    s = ResultsStore(url)
    with s.engine.begin() as conn:  # a clean slate per test on the shared server
        for table in ("checks", "scores", "trials", "sweeps", "baselines"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    return s


def test_roundtrip(store: ResultsStore) -> None:
    original = result("k1")
    store.ensure_sweep("sw", {"id": "sw"}, 1)
    assert store.record([original]) == 1
    (back,) = store.results("sw")
    assert back == original
    assert back.model_dump_json() == original.model_dump_json()  # the fields in their order


def test_scores_kind_and_details_roundtrip(store: ResultsStore) -> None:
    scored = result(
        "k9",
        kind="prompt",
        scores=(
            Score(metric="correct", value=1.0),
            Score(metric="clarity", value=4.0, scale="points", low=1.0, high=5.0),
            Score(metric="citations", value=None, scale="count"),
        ),
        details={"skillDigest": "sha256:" + "a" * 64, "referenceSources": [{"path": "r.md"}]},
        route=FindingOutcome(status="pass", evidence=("e.txt",)),
    )
    store.record([scored])
    (back,) = store.results("sw")
    assert back == scored
    assert {s.metric for s in back.scores} == {"correct", "clarity", "citations"}
    assert back.kind == "decision"  # the decision kind's former name reads as its name


def test_a_schema_9_store_calls_decision_cases_decision(tmp_path: Path) -> None:
    """Rows a hangar before schema 10 wrote with the decision kind's former name
    (``prompt``) are rewritten, so SQL readers (the dashboards) see one name."""
    url = f"sqlite:///{tmp_path}/old.db"
    store = ResultsStore(url)
    store.record([result("k1", kind="decision"), result("k2")])
    with store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE trials SET kind = 'prompt' WHERE trial_key = 'k1'")
        conn.exec_driver_sql("UPDATE hangar_meta SET value = '9' WHERE key = 'schema_version'")
    again = ResultsStore(url)
    with again.engine.connect() as conn:
        kinds = dict(conn.exec_driver_sql("SELECT trial_key, kind FROM trials").fetchall())
    assert kinds == {"k1": "decision", "k2": "execution"}


@pytest.mark.parametrize(
    "dialect", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def test_a_schema_2_store_migrates(
    request: pytest.FixtureRequest, tmp_path: Path, dialect: str
) -> None:
    """A store written before route/scope, digests and scores (schema 2) keeps its rows,
    gains the columns and the scores table, and its old rows read as execution trials."""
    url = (
        f"sqlite:///{tmp_path}/old.db"
        if dialect == "sqlite"
        else request.getfixturevalue("postgres_url")
    )
    store = ResultsStore(url)
    cascade = " CASCADE" if dialect == "postgres" else ""
    with store.engine.begin() as conn:
        for table in ("checks", "scores", "trials", "sweeps", "baselines"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
        for view in ("v_scores", "v_daily_model_scores", "v_trials", "v_attempts"):
            conn.exec_driver_sql(f"DROP VIEW IF EXISTS {view}{cascade}")
        conn.exec_driver_sql("DROP TABLE scores")
        for column in (
            "route",
            "scope",
            "agent_digest",
            "agent_settings",
            "plugins_digest",
            "provider_error",
            "kind",
            "details",
        ):
            conn.exec_driver_sql(f"ALTER TABLE trials DROP COLUMN {column}")
        conn.exec_driver_sql("UPDATE hangar_meta SET value = '2' WHERE key = 'schema_version'")
        conn.exec_driver_sql("DELETE FROM hangar_meta WHERE key = 'views_version'")
        old = result("k", sweep="old").model_dump()
        when = datetime(2026, 1, 1, tzinfo=UTC)
        conn.execute(  # only the columns a schema-2 store has
            trials.insert().values(
                sweep_id="old",
                trial_key="k",
                attempt=1,
                scenario_id="s",
                scenario_digest="d",
                suite="",
                agent="a",
                model="m",
                arm="control",
                repeat=0,
                verdict="pass",
                final=True,
                reason="r",
                completed=True,
                started_at=when,
                finished_at=when,
                duration_s=1.0,
                timings={},
                tokens_in=0,
                tokens_out=0,
                tokens_cached=0,
                tokens_reasoning=0,
                cost_usd=0.0,
                node="n",
                schema_version=old["schema_version"],
            )
        )
    migrated = ResultsStore(url)
    (row,) = migrated.results("old")
    assert row.kind == "execution" and row.agent_digest == ""
    assert [(s.metric, s.value) for s in row.scores] == [("pass", 1.0)]  # implied by the verdict
    migrated.record([result("new", sweep="old", scores=(Score(metric="pass", value=0.0),))])
    assert {r.trial_key for r in migrated.results("old")} == {"k", "new"}


def test_record_is_idempotent(store: ResultsStore) -> None:
    store.record([result("k1")])
    store.record([result("k1", reason="again")])
    (back,) = store.results("sw")
    assert back.reason == "because"


def test_resume_state_and_latest_attempt(store: ResultsStore) -> None:
    store.record(
        [
            result("k1", 1, Verdict.INFRA_ERROR),
            result("k1", 2, Verdict.PASS),
            result("k2", 1, Verdict.INFRA_ERROR),
            result("k3", 1, Verdict.FAIL, model="m2"),
        ]
    )
    final, last = store.resume_state("sw")
    assert final == {"k1", "k3"} and last == {"k1": 2, "k2": 1, "k3": 1}
    assert sorted(store.counts("sw")) == [
        ("fail", "gold", "m2", "control", 1),
        ("infra_error", "gold", "m1", "control", 1),
        ("pass", "gold", "m1", "control", 1),
    ]
    assert len(list(store.results("sw"))) == 3
    assert len(list(store.results("sw", all_attempts=True))) == 4


def test_ensure_sweep_updates(store: ResultsStore) -> None:
    store.ensure_sweep("sw", {"v": 1}, 3)
    store.ensure_sweep("sw", {"v": 2}, 5)
    store.ensure_sweep("other", {"v": 1}, 1)
    assert set(store.sweep_ids()) == {"sw", "other"}


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/r.db"
    s = ResultsStore(url)
    with s.engine.begin() as conn:
        conn.execute(update(meta).where(meta.c.key == "schema_version").values(value="99"))
    with pytest.raises(StoreError, match="newer than this hangar"):
        ResultsStore(url)


def test_unsupported_url() -> None:
    with pytest.raises(ConfigError, match="unsupported results store"):
        ResultsStore("mysql://x/y")


def test_password_never_in_messages() -> None:
    with pytest.raises(StoreError) as info:
        ResultsStore("postgresql+psycopg://u:s3cret@127.0.0.1:1/db?connect_timeout=1")
    assert "s3cret" not in str(info.value)


@pytest.mark.postgres
def test_copy_sqlite_into_postgres(tmp_path: Path, postgres_url: str) -> None:
    from hangar.store import copy_store

    (tmp_path / "runs").mkdir()
    local = ResultsStore(f"sqlite:///{tmp_path}/runs/hangar.db")  # the local store's place
    local.ensure_sweep("copied", {"id": "copied"}, 2)
    local.record([result("c1", sweep="copied"), result("c2", sweep="copied", verdict=Verdict.FAIL)])
    remote = ResultsStore(postgres_url)
    with remote.engine.begin() as conn:
        for table in ("checks", "scores", "trials", "sweeps", "baselines"):
            conn.exec_driver_sql(f"DELETE FROM {table}")
    counts = copy_store(local, remote)
    assert counts["trials"] == 2 and counts["checks"] == 2 and counts["sweeps"] == 1
    assert sorted(r.trial_key for r in remote.results("copied")) == ["c1", "c2"]
    # Again after the sweep went on: only what is new, and the sweep's row refreshed.
    local.ensure_sweep("copied", {"id": "copied", "family": "copied"}, 3)
    local.record([result("c3", sweep="copied")])
    again = copy_store(local, remote)
    assert (again["trials"], again["sweeps"]) == (1, 0)
    assert len(list(remote.results("copied"))) == 3
    copied = remote.sweep_config("copied")
    assert copied is not None and (copied.id, copied.family) == ("copied", "copied")
    # The one command the dashboards guide runs after each sweep: from the local store.
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "hangar"), "store", "copy", "--to", postgres_url],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "runs/hangar.db -> " in proc.stdout and ": 0 new trials (nothing new)" in proc.stdout


def test_the_latest_attempt_whatever_order_results_come_in(store: ResultsStore) -> None:
    """A node that froze may report an attempt after the one that replaced it: each trial
    still has one latest attempt, the highest, for every output."""
    store.record([result("k1", 2, Verdict.PASS)])
    store.record([result("k1", 1, Verdict.INFRA_ERROR), result("k2", 1, Verdict.INFRA_ERROR)])
    store.record([result("k2", 2, Verdict.FAIL), result("k2", 3, Verdict.PASS)])
    assert sorted((r.trial_key, r.attempt) for r in store.results("sw")) == [("k1", 2), ("k2", 3)]
    assert store.counts("sw") == [("pass", "gold", "m1", "control", 2)]
    with store.engine.connect() as conn:
        rows = conn.exec_driver_sql("SELECT trial_key, attempt FROM v_trials").fetchall()
    assert sorted(rows) == [("k1", 2), ("k2", 3)]


def test_a_schema_10_store_learns_its_latest_attempts(tmp_path: Path) -> None:
    """A store from before the `latest` column gains it, marked from the attempts it
    holds, and the indexes outputs read it by."""
    url = f"sqlite:///{tmp_path}/old.db"
    store = ResultsStore(url)
    store.record([result("k1", 1, Verdict.INFRA_ERROR), result("k1", 2), result("k2", 1)])
    with store.engine.begin() as conn:
        for index in ("ix_trials_latest", "ix_trials_latest_finished", "ix_trials_latest_order"):
            conn.exec_driver_sql(f"DROP INDEX {index}")
        conn.exec_driver_sql("DROP VIEW v_daily_model_scores")
        conn.exec_driver_sql("DROP VIEW v_scores")
        conn.exec_driver_sql("DROP VIEW v_trials")
        conn.exec_driver_sql("DROP VIEW v_attempts")
        conn.exec_driver_sql("ALTER TABLE trials DROP COLUMN latest")
        conn.exec_driver_sql("UPDATE hangar_meta SET value = '10' WHERE key = 'schema_version'")
        conn.exec_driver_sql("DELETE FROM hangar_meta WHERE key = 'views_version'")
    again = ResultsStore(url)
    assert sorted((r.trial_key, r.attempt) for r in again.results("sw")) == [("k1", 2), ("k2", 1)]
    with again.engine.connect() as conn:
        indexes = {i["name"] for i in inspect(conn).get_indexes("trials")}
        plan = " ".join(
            str(row[-1])
            for row in conn.exec_driver_sql(
                "EXPLAIN QUERY PLAN SELECT verdict, count(*) FROM trials "
                "WHERE sweep_id = 'sw' AND latest = 1 GROUP BY agent, model, arm, verdict"
            )
        )
    assert {"ix_trials_latest", "ix_trials_latest_finished", "ix_trials_latest_order"} <= indexes
    assert "COVERING INDEX ix_trials_latest" in plan


def test_results_are_read_as_validated_ones() -> None:
    """Rows become results without validating again (`hangar.store._trusted`): only
    right for models with no private attributes, post-init or extra fields."""
    for model in (TrialResult, Usage, Score, CheckOutcome):
        assert not model.__private_attributes__ and model.__pydantic_post_init__ is None
        assert model.model_config.get("extra") in (None, "ignore", "forbid")
