"""Sweep files: validation, lazy expansion, trial keys, evidence rules."""

from __future__ import annotations

import itertools
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from hangar.errors import ConfigError
from hangar.scheduler.driver import check_evidence_reachable, evidence_url
from hangar.scheduler.sweep import RetryPolicy, load_sweep

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def sweep_file(tmp_path: Path, **config: Any) -> Path:
    shutil.copytree(EXAMPLES, tmp_path / "ex", dirs_exist_ok=True)
    base: dict[str, Any] = {
        "scenarios": ["ex/median/scenario.yaml"],
        "agents_file": "ex/agents.yaml",
        "models": ["a", "b"],
        "arms": {"control": []},
        "repeats": 3,
    }
    base.update(config)
    path = tmp_path / "my-sweep.yaml"
    path.write_text(yaml.safe_dump(base))
    return path


def test_size_and_lazy_order(tmp_path: Path) -> None:
    sweep = load_sweep(sweep_file(tmp_path))
    assert sweep.id == "my-sweep" and sweep.size == 1 * 2 * 2 * 1 * 3
    trials = sweep.trials("file:///ev")
    first = list(itertools.islice(trials, 4))
    assert [t.model for t in first] == ["a", "b", "a", "b"]  # models vary fastest
    keys = [t.trial_key for t in sweep.trials("file:///ev")]
    assert len(keys) == len(set(keys)) == 12
    assert keys == [t.trial_key for t in load_sweep(sweep_file(tmp_path)).trials("x")]


def test_trial_key_tracks_agent_and_arm_bytes(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, arms={"control": []}, models=["a"], repeats=1)
    before = {t.agent.name: t.trial_key for t in load_sweep(path).trials("x")}
    agents = tmp_path / "ex" / "agents.yaml"
    agents.write_text(agents.read_text().replace("no changes made", "still nothing"))
    after = {t.agent.name: t.trial_key for t in load_sweep(path).trials("x")}
    assert before["gold"] == after["gold"] and before["noop"] != after["noop"]


def test_suite_folder_and_bad_scenarios(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, scenarios=["ex/"])
    # the examples' Harbor tasks are a folder's tasks too (tests/kinds); here, scenarios
    shutil.rmtree(tmp_path / "ex" / "harbor")
    broken = tmp_path / "ex" / "broken.scenario.yaml"
    broken.write_text("id: broken\n")
    (tmp_path / "ex" / "garbled.scenario.yaml").write_text("id: [unclosed\n")
    sweep = load_sweep(path)
    assert [s.id for s in sweep.of_kind("execution")] == ["statkit-median-even"]
    assert [(b.scenario_id, b.path.name) for b in sweep.unloadable] == [
        ("broken", "broken.scenario.yaml"),  # its id, when the YAML has one
        ("ex/garbled.scenario.yaml", "garbled.scenario.yaml"),  # else its path
    ]
    assert "has no repository of its own" in sweep.unloadable[0].error
    # Their trials are in the sweep, as blocked_setup rows: counted, never left out.
    assert sweep.size == 3 * 2 * 2 * 1 * 3
    blocked = list(sweep.blocked_results())
    assert len(blocked) == 2 * 2 * 2 * 3 and {r.verdict.value for r in blocked} == {"blocked_setup"}
    assert "broken.scenario.yaml does not load: " in blocked[0].reason
    assert len({r.trial_key for r in blocked}) == len(blocked)
    # Keyed on the file's path and bytes: the same file, the same keys; a changed one, new.
    again = [r.trial_key for r in load_sweep(path).blocked_results()]
    assert again == [r.trial_key for r in blocked]
    broken.write_text("id: broken\nrepository: x\n")
    assert load_sweep(path).unloadable[0].digest != sweep.unloadable[0].digest


def test_duplicate_ids_refuse_the_sweep(tmp_path: Path) -> None:
    path = sweep_file(tmp_path, scenarios=["ex/median/scenario.yaml", "ex/copy.scenario.yaml"])
    shutil.copy(
        tmp_path / "ex" / "median" / "scenario.yaml", tmp_path / "ex" / "copy.scenario.yaml"
    )
    with pytest.raises(ConfigError, match="two scenarios have the id 'statkit-median-even'") as e:
        load_sweep(path)
    assert "median/scenario.yaml and " in str(e.value) and "copy.scenario.yaml" in str(e.value)


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"scenarios": ["nothing/*.yaml"]}, "matches no file"),
        ({"agents_file": None, "agents": {}}, "no agents"),
        ({"models": []}, "`models` is empty"),
        ({"repeats": 0}, "field `repeats`"),
        ({"colour": "blue"}, "field `colour`"),
        ({"agents": {"x": {"comand": "typo"}}}, r"not a valid agent \('x'\)"),
        (
            {"agents": {"x": {"command": "echo", "colect": ["~/a"]}}},
            r"field `agents\.x\.colect` \(line \d+\): unknown field \(did you mean `collect`\?\)",
        ),
        (
            {"agents": {"c": {"preset": "codex", "reasoning_efort": "low"}}},
            "did you mean 'reasoning_effort'",
        ),
        ({"backend": "dokcer"}, "docker"),
        ({"backend": {"kind": "kubernetes", "namespce": "x"}}, "namespce"),
        (
            {"backend": {"kind": "kubernetes", "image_pull_policy": "Sometimes"}},
            "image_pull_policy.*'IfNotPresent'",
        ),
        ({"backend": {"kind": "docker", "labels": {"hangar.trial": "x"}}}, "hangar's own"),
        ({"backend": {"kind": "docker", "namespace": "x"}}, "namespace"),
        # A kind's own fields are validated with the sweep's, lines and spelling alike.
        ({"image_mpa": {}}, r"image_mpa` \(line \d+\): unknown field \(did you mean `image_map`"),
        ({"reward_threshold": 2}, r"reward_threshold` \(line \d+\)"),
        ({"network": {"host_services": ["nowhere"]}}, "network.host_services.*ADDRESS:PORT"),
    ],
)
def test_bad_sweeps_are_named(tmp_path: Path, config: dict[str, Any], words: str) -> None:
    with pytest.raises(ConfigError, match=words):
        load_sweep(sweep_file(tmp_path, **config))


def test_each_kind_reads_its_own_settings(tmp_path: Path) -> None:
    """The execution kind's fields reach it typed and located; the generic settings the
    scheduler holds carry none of them."""
    from hangar.kinds.execution.settings import ExecutionSettings

    path = sweep_file(
        tmp_path,
        image_map={"ubuntu:*": "mine:1"},
        repo_map={"o/r": "mirrors/r"},
        network={"host_services": ["127.0.0.1:80"]},
        registry="localhost:5000/h",
    )
    sweep = load_sweep(path)
    mine = sweep.settings.of(ExecutionSettings)
    assert mine.image_map == {"ubuntu:*": "mine:1"}
    assert mine.repo_map == {"o/r": str(tmp_path / "mirrors" / "r")}
    assert mine.network.host_services == ("127.0.0.1:80",)
    assert sweep.settings.registry == sweep.config.registry == "localhost:5000/h"
    assert not {"image_map", "repo_map", "network"} & set(type(sweep.config).model_fields)
    fixtures = tmp_path / "f.json"
    fixtures.write_text("[]")
    given = load_sweep(path, {"fixtures": str(fixtures)}).settings.of(ExecutionSettings)
    assert given.fixtures == str(fixtures)


def test_backoff_grows_and_caps() -> None:
    policy = RetryPolicy(backoff_s=2, backoff_max_s=10)
    assert [policy.backoff(a) for a in (2, 3, 4, 5)] == [2, 4, 8, 10]


def test_local_evidence_is_refused_on_many_nodes() -> None:
    check_evidence_reachable("file:///ev", 1)
    check_evidence_reachable("s3://b/p", 3)
    with pytest.raises(ConfigError, match="use an s3:// evidence store"):
        check_evidence_reachable("file:///ev", 2)


def test_s3_endpoint_travels_in_the_url() -> None:
    assert (
        evidence_url("s3://b/p", "http://127.0.0.1:9000")
        == "s3://b/p?endpoint=http://127.0.0.1:9000"
    )
    assert evidence_url("file:///x", "http://e") == "file:///x"


def test_backend_settings_travel_in_every_trial(tmp_path: Path) -> None:
    settings = {
        "kind": "kubernetes",
        "namespace": "evals",
        "runtime_class": "gvisor",
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        "service_account": "sandboxes",
    }
    sweep = load_sweep(sweep_file(tmp_path, backend=settings))
    specs = list(sweep.trials("file:///tmp/e"))
    assert {s.backend for s in specs} == {"kubernetes"}
    config = specs[0].backend_config
    assert config is not None and config.model_dump(mode="json", exclude_none=True) == {
        **settings,
        "tolerations": [{"key": "sandbox", "operator": "Exists", "effect": "NoSchedule"}],
        "image_pull_policy": "IfNotPresent",
        "schedule_timeout_s": 300.0,
        "node_selector": {},
        "labels": {},
    }
    # The short form is the backend with its defaults; settings never change a trial's key.
    plain = load_sweep(sweep_file(tmp_path, backend="kubernetes"))
    assert [s.trial_key for s in plain.trials("file:///tmp/e")] == [s.trial_key for s in specs]
    assert next(iter(plain.trials("file:///tmp/e"))).backend_config.namespace == "hangar-sandboxes"
