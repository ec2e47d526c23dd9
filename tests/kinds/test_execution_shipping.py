"""Scenarios shipped to workers: what a worker unpacks is the scenario, whole and alone."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hangar.kinds.execution.scenarios.scenario import load_scenario, scenario_digest
from hangar.kinds.execution.scenarios.shipping import (
    local_repository,
    pack_scenario,
    unpack_scenario,
)
from hangar.kinds.execution.shipping import pack_repository
from hangar.sandbox.workspace import MirrorCache, make_workspace

ROOT = Path(__file__).resolve().parents[2]
REVISION = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"


def test_a_worker_without_the_drivers_files_gets_the_same_scenario(tmp_path: Path) -> None:
    # The example scenario reaches outside its folder (../repos/statkit.bundle).
    driver = tmp_path / "driver"
    shutil.copytree(ROOT / "examples" / "median", driver / "median")
    shutil.copytree(ROOT / "examples" / "repos", driver / "repos")
    loaded = load_scenario(driver / "median" / "scenario.yaml")
    package = pack_scenario(loaded)
    repo = local_repository(loaded)
    assert repo == (driver / "repos" / "statkit.bundle").resolve()
    repository = pack_repository(repo)
    assert len(package) < 20_000  # the repository travels on its own, once
    shutil.rmtree(driver)  # the worker's machine has none of it

    shipped = unpack_scenario(loaded, package, tmp_path / "cache", repository)
    assert shipped.path.is_relative_to(tmp_path / "cache" / "scenarios" / loaded.digest)
    assert shipped.digest == loaded.digest
    assert shipped.scenario.model_copy(update={"repository": loaded.scenario.repository}) == (
        loaded.scenario
    )
    # Every referenced file is where the scenario says, with the same bytes.
    files = shipped.model_copy(update={"scenario": loaded.scenario})
    assert scenario_digest(files.path, files.scenario) == loaded.digest
    assert shipped.repository_url() == str(
        tmp_path / "cache" / "repositories" / f"{repository[0]}.bundle"
    )
    make_workspace(
        MirrorCache(tmp_path / "mirrors"), shipped.repository_url(), REVISION, tmp_path / "ws"
    )
    assert (tmp_path / "ws" / "statkit" / "stats.py").exists()
    # A second unpack on the same node reuses the first.
    marker = shipped.path.parent / "marker"
    marker.touch()
    again = unpack_scenario(loaded, package, tmp_path / "cache", repository)
    assert again.path == shipped.path and marker.exists()


def test_a_repository_directory_ships_as_a_bundle(tmp_path: Path) -> None:
    repo = tmp_path / "driver" / "repo"
    subprocess.run(
        ["git", "clone", "-q", str(ROOT / "examples" / "repos" / "statkit.bundle"), str(repo)],
        check=True,
    )
    scenario = tmp_path / "driver" / "s.yaml"
    scenario.write_text(
        f"id: dir\nrepository: repo\nrevision: '{REVISION}'\ncontext: x\n"
        "verifier: {host: {builtin: junit}, commands: ['true']}\n"
    )
    loaded = load_scenario(scenario)
    package = pack_scenario(loaded)
    repository = pack_repository(local_repository(loaded) or repo)
    shutil.rmtree(tmp_path / "driver")

    shipped = unpack_scenario(loaded, package, tmp_path / "cache", repository)
    assert shipped.repository_url().endswith(f"{repository[0]}.bundle")
    assert shipped.digest == loaded.digest
    make_workspace(
        MirrorCache(tmp_path / "mirrors"), shipped.repository_url(), REVISION, tmp_path / "ws"
    )
    assert (tmp_path / "ws" / "statkit" / "stats.py").exists()


def test_a_repository_by_url_is_not_shipped(tmp_path: Path) -> None:
    for url in ("https://example.invalid/repo.git", "git@example.invalid:repo.git"):
        scenario = tmp_path / "s.yaml"
        scenario.write_text(
            f"id: url\nrepository: '{url}'\nrevision: '{REVISION}'\ncontext: x\n"
            "verifier: {host: {builtin: junit}}\n"
        )
        assert local_repository(load_scenario(scenario)) is None


def test_a_missing_revision_on_a_worker_names_the_users_repository(tmp_path: Path) -> None:
    from hangar.kinds.execution.scenarios.fixture_checks import fixture_problems

    driver = tmp_path / "driver"
    shutil.copytree(ROOT / "examples" / "median", driver / "median")
    shutil.copytree(ROOT / "examples" / "repos", driver / "repos")
    path = driver / "median" / "scenario.yaml"
    path.write_text(path.read_text().replace(REVISION, "a" * 40))
    loaded = load_scenario(path)
    repository = pack_repository(local_repository(loaded) or path)
    shipped = unpack_scenario(loaded, pack_scenario(loaded), tmp_path / "cache", repository)
    problems = fixture_problems(
        shipped, (), mirrors=MirrorCache(tmp_path / "mirrors"), image_problem=lambda image: None
    )
    users = str((driver / "repos" / "statkit.bundle").resolve())
    assert any(f"is not in repository {users} (shipped to this node as" in p for p in problems), (
        problems
    )
