"""Harbor's registry datasets: a registry and its task repositories made as local git
repositories, pulled by name and version, locked, refused when changed, and run."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from hangar.errors import ConfigError
from hangar.kinds.execution.harbor.digest import content_digest
from hangar.kinds.execution.harbor.registry import dataset_folder, locate, pull
from scheduler.sweep import load_sweep
from tests.harbor import harbor_digest

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"
TASKS = ("hello-file", "count-lines")


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def commit_all(repo: Path, message: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD")


@pytest.fixture
def registry(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """(the registry repository, the tasks repository, the tasks' commit): two versions
    of a dataset `demo`, 1.0 pinned to the first commit of the tasks."""
    monkeypatch.setenv("HANGAR_CACHE_DIR", str(tmp_path / "cache"))
    tasks = tmp_path / "tasks-repo"
    tasks.mkdir()
    git(tasks, "init", "-q")
    for name in TASKS:
        shutil.copytree(DATASET / name, tasks / "tasks" / name)
    first = commit_all(tasks, "tasks")
    # a later commit changes a task: 1.0 still pins the first
    (tasks / "tasks" / "hello-file" / "instruction.md").write_text("Something else.\n")
    commit_all(tasks, "change hello-file")
    reg = tmp_path / "registry-repo"
    reg.mkdir()
    git(reg, "init", "-q")
    entries = [
        {"name": n, "git_url": str(tasks), "git_commit_id": first, "path": f"tasks/{n}"}
        for n in TASKS
    ]
    (reg / "registry.json").write_text(
        json.dumps(
            [
                {"name": "demo", "version": "1.0", "description": "two tasks", "tasks": entries},
                {"name": "demo", "version": "head", "description": "", "tasks": [
                    {"name": "hello-file", "git_url": str(tasks), "path": "tasks/hello-file"}
                ]},
            ]
        )
    )  # fmt: skip
    commit_all(reg, "registry")
    return reg, tasks, first


def test_a_pulled_dataset_is_locked_by_harbors_digests(
    registry: tuple[Path, Path, str], tmp_path: Path
) -> None:
    reg, tasks, first = registry
    lock, changed = pull("demo@1.0", str(reg))
    assert changed == [] and lock.hangar_version
    folder = dataset_folder("demo", "1.0")
    assert json.loads((folder / "lock.json").read_text())["tasks"][0]["git_commit_id"] == first
    for task in lock.tasks:
        pulled = folder / "tasks" / task.name
        assert task.digest == content_digest(pulled) == harbor_digest(pulled)
        assert task.git_commit_id == first and task.git_url == str(tasks)
    # the first commit's hello-file, not the later one
    assert "Something else" not in (folder / "tasks" / "hello-file" / "instruction.md").read_text()
    # a version without a commit is pinned at the head it found
    head, _ = pull("demo@head", str(reg))
    assert head.tasks[0].git_commit_id == git(tasks, "rev-parse", "HEAD")


def test_a_sweep_runs_only_what_the_lock_pins(
    registry: tuple[Path, Path, str], tmp_path: Path
) -> None:
    reg, _, _ = registry
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "id: reg\nscenarios: ['registry:demo@1.0']\n"
        "agents: {oracle: {kind: reference, role: oracle}}\n"
    )
    with pytest.raises(ConfigError, match=r"not pulled on this machine: `hangar dataset pull"):
        load_sweep(sweep)
    pull("demo@1.0", str(reg))
    loaded = load_sweep(sweep)
    assert sorted(t.id for t in loaded.tasks) == sorted(TASKS)
    assert {t.suite for t in loaded.tasks} == {"demo@1.0"}
    lock = loaded.sources["registry:demo@1.0"]
    assert [t["name"] for t in lock["tasks"]] == list(TASKS) and lock["registry"] == str(reg)

    # a task changed in the cache is refused until pulled again
    script = dataset_folder("demo", "1.0") / "tasks" / "count-lines" / "tests" / "test.sh"
    script.write_text(script.read_text() + "\necho 1 > /logs/verifier/reward.txt\n")
    with pytest.raises(ConfigError, match=r"task count-lines changed since it was pulled"):
        load_sweep(sweep)
    pull("demo@1.0", str(reg))
    assert load_sweep(sweep).sources["registry:demo@1.0"]["tasks"] == lock["tasks"]


def test_bad_registries_and_references_say_what_to_fix(
    registry: tuple[Path, Path, str], tmp_path: Path
) -> None:
    reg, tasks, _ = registry
    with pytest.raises(ConfigError, match=r"has no version 2.0 of demo: it has 1.0, head"):
        pull("demo@2.0", str(reg))
    with pytest.raises(ConfigError, match=r"has no dataset other \(it has demo\)"):
        pull("other@1.0", str(reg))
    with pytest.raises(ConfigError, match=r"give NAME@VERSION"):
        pull("demo", str(reg))
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "registry.json").write_text('[{"name": "x", "version": "1"}]')
    with pytest.raises(ConfigError, match=r"tasks"):
        pull("x@1", str(bad))
    (bad / "registry.json").write_text(
        json.dumps([{"name": "x", "version": "1", "tasks": [
            {"name": "t", "git_url": str(tasks), "git_commit_id": "0" * 40, "path": "tasks/t"}
        ]}])
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"task t: revision 0{40} is not in repository"):
        pull("x@1", str(bad))
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text("scenarios: ['pkg:demo@1.0']\nagents: {o: {kind: reference, role: oracle}}\n")
    with pytest.raises(ConfigError, match=r"no kind reads pkg: entries \(known: registry\)"):
        load_sweep(sweep)


def test_a_pulled_dataset_runs(
    registry: tuple[Path, Path, str], tmp_path: Path, ray_local: None, docker_client: object
) -> None:
    """The oracle passes the pulled task, and the sweep's record holds the lock."""
    from typer.testing import CliRunner

    from hangar.cli import app
    from hangar.store import ResultsStore

    reg, _, _ = registry
    cli = CliRunner()
    out = cli.invoke(app, ["dataset", "pull", "demo@1.0", "--registry", str(reg)])
    assert out.exit_code == 0 and "pulled demo@1.0: 2 task(s)" in out.output, out.output
    stock = "hangar/base:bookworm-stock"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        "id: reg\nscenarios: ['registry:demo@1.0']\n"
        "agents: {oracle: {kind: reference, role: oracle}}\nmodels: [none]\n"
        f"image_map: {{'ubuntu:*': {stock}, 'debian:*': {stock}, 'python:*': {stock}}}\n"
        f"store: sqlite:///{tmp_path}/runs.db\nevidence: {(tmp_path / 'ev').as_uri()}\n"
    )
    out = cli.invoke(app, ["run", str(sweep), "--include-unvalidated", "--json"])
    assert out.exit_code == 0, out.output
    store = ResultsStore(f"sqlite:///{tmp_path}/runs.db")
    verdicts = {r.scenario_id: r.verdict.value for r in store.results("reg")}
    assert verdicts == {"hello-file": "pass", "count-lines": "pass"}
    recorded = store.sweep_config("reg")
    assert recorded is not None
    lock = recorded.sources["registry:demo@1.0"]
    folder, _ = locate("demo@1.0")
    assert {t["name"]: t["digest"] for t in lock["tasks"]} == {
        name: content_digest(folder / name) for name in TASKS
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "../../../../escaped"),
        ("name", "a/b"),
        ("path", "../../outside"),
        ("path", "/etc"),
        ("git_url", "--upload-pack=touch /tmp/hangar-pwned"),
        ("git_url", "ext::sh -c touch% /tmp/hangar-pwned"),
        ("git_commit_id", "--output=/tmp/hangar-pwned"),
    ],
)
def test_hostile_registry_entries_are_refused_by_name(
    registry: tuple[Path, Path, str], tmp_path: Path, field: str, value: str
) -> None:
    """Every name, path, URL and revision of a registry is checked like an id; the error
    names the dataset, the task and the field, and nothing is written anywhere."""
    _, tasks, first = registry
    entry = {"name": "t", "git_url": str(tasks), "git_commit_id": first, "path": "tasks/hello-file"}
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "registry.json").write_text(
        json.dumps([{"name": "x", "version": "1", "tasks": [entry | {field: value}]}])
    )
    with pytest.raises(ConfigError, match=rf"(?s)dataset 1 'x'\).*tasks\.0\.{field}"):
        pull("x@1", str(bad))
    assert not Path("/tmp/hangar-pwned").exists()
    assert not (tmp_path / "escaped").exists() and not (tmp_path / "cache" / "escaped").exists()
    assert not dataset_folder("x", "1").exists()


def test_a_local_task_folder_never_leads_outside_its_registry(tmp_path: Path) -> None:
    """A task beside the registry file reached through a link out is refused, and links
    inside a task folder that lead out are left behind when it is copied."""
    outside = tmp_path / "outside"
    shutil.copytree(DATASET / "hello-file", outside)
    reg = tmp_path / "reg"
    reg.mkdir()
    (reg / "away").symlink_to(outside)
    shutil.copytree(DATASET / "hello-file", reg / "local")
    (reg / "local" / "tests" / "secret").symlink_to("/etc/passwd")
    tasks = [{"name": "away", "path": "away"}]
    (reg / "registry.json").write_text(json.dumps([{"name": "x", "version": "1", "tasks": tasks}]))
    with pytest.raises(ConfigError, match=r"task away: its path away leads outside"):
        pull("x@1", str(reg), cache=tmp_path / "cache")
    tasks = [{"name": "local", "path": "local"}]
    (reg / "registry.json").write_text(json.dumps([{"name": "x", "version": "1", "tasks": tasks}]))
    with pytest.raises(ConfigError, match=r"task local: .*unsafe entry.*secret"):
        pull("x@1", str(reg), cache=tmp_path / "cache")
