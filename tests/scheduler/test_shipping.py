"""Scenarios shipped to workers: what a worker unpacks is the scenario, whole and alone."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from hangar.sandbox.workspace import MirrorCache, make_workspace
from hangar.scenario import load_scenario, scenario_digest
from hangar.scheduler.shipping import REPOSITORY_BUNDLE, pack_scenario, unpack_scenario

ROOT = Path(__file__).resolve().parents[2]
REVISION = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"


def test_a_worker_without_the_drivers_files_gets_the_same_scenario(tmp_path: Path) -> None:
    # The example scenario reaches outside its folder (../repos/statkit.bundle).
    driver = tmp_path / "driver"
    shutil.copytree(ROOT / "examples" / "median", driver / "median")
    shutil.copytree(ROOT / "examples" / "repos", driver / "repos")
    loaded = load_scenario(driver / "median" / "scenario.yaml")
    package = pack_scenario(loaded)
    shutil.rmtree(driver)  # the worker's machine has none of it

    shipped = unpack_scenario(loaded, package, tmp_path / "cache")
    assert shipped.path.is_relative_to(tmp_path / "cache" / "scenarios" / loaded.digest)
    assert shipped.scenario == loaded.scenario and shipped.digest == loaded.digest
    # Every referenced file is where the scenario says, with the same bytes.
    assert scenario_digest(shipped.path, shipped.scenario) == loaded.digest
    assert Path(shipped.repository_url()).is_file()
    make_workspace(
        MirrorCache(tmp_path / "mirrors"), shipped.repository_url(), REVISION, tmp_path / "ws"
    )
    assert (tmp_path / "ws" / "statkit" / "stats.py").exists()
    # A second unpack on the same node reuses the first.
    marker = shipped.path.parent / "marker"
    marker.touch()
    again = unpack_scenario(loaded, package, tmp_path / "cache")
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
    shutil.rmtree(tmp_path / "driver")

    shipped = unpack_scenario(loaded, package, tmp_path / "cache")
    assert shipped.repository_url().endswith(REPOSITORY_BUNDLE)
    assert shipped.digest == loaded.digest
    make_workspace(
        MirrorCache(tmp_path / "mirrors"), shipped.repository_url(), REVISION, tmp_path / "ws"
    )
    assert (tmp_path / "ws" / "statkit" / "stats.py").exists()
