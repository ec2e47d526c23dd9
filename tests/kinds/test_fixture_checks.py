"""Phase 1: every reason a scenario cannot run is found before any container starts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hangar.kinds.execution.scenarios.fixture_checks import fixture_problems
from hangar.kinds.execution.scenarios.scenario import load_scenario
from hangar.sandbox.workspace import MirrorCache

EXAMPLE = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE / "median", tmp_path / "median")
    shutil.copytree(EXAMPLE / "repos", tmp_path / "repos")
    return tmp_path / "median"


def problems(folder: Path, tmp_path: Path, plugins: tuple[str, ...] = ()) -> list[str]:
    loaded = load_scenario(folder / "scenario.yaml")
    return fixture_problems(
        loaded, plugins, mirrors=MirrorCache(tmp_path / "mirrors"), image_problem=lambda _: None
    )


def test_example_is_admitted(scenario_dir: Path, tmp_path: Path) -> None:
    assert problems(scenario_dir, tmp_path) == []


def test_changed_script_is_refused(scenario_dir: Path, tmp_path: Path) -> None:
    script = scenario_dir / "verify.py"
    script.write_bytes(script.read_bytes() + b"\n")
    (found,) = problems(scenario_dir, tmp_path)
    assert "verifier script verify.py does not match its pin" in found


def test_missing_prepare_script(scenario_dir: Path, tmp_path: Path) -> None:
    (scenario_dir / "prepare.py").unlink()
    (found,) = problems(scenario_dir, tmp_path)
    assert "prepare script prepare.py is missing" in found


def test_script_that_cannot_run(scenario_dir: Path, tmp_path: Path) -> None:
    yaml_path = scenario_dir / "scenario.yaml"
    (scenario_dir / "verify").write_bytes((scenario_dir / "verify.py").read_bytes())
    yaml_path.write_text(yaml_path.read_text().replace("file: verify.py", "file: verify"))
    (found,) = problems(scenario_dir, tmp_path)
    assert "must end .py, .js, .mjs or .mts, or be executable" in found


def test_missing_hidden_files(scenario_dir: Path, tmp_path: Path) -> None:
    shutil.rmtree(scenario_dir / "hidden")
    (found,) = problems(scenario_dir, tmp_path)
    assert "verifier file hidden/test_median_hidden.py is missing" in found


def test_revision_not_in_repository(scenario_dir: Path, tmp_path: Path) -> None:
    yaml_path = scenario_dir / "scenario.yaml"
    yaml_path.write_text(
        yaml_path.read_text().replace("1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2", "f" * 40)
    )
    (found,) = problems(scenario_dir, tmp_path)
    assert found == f"revision {'f' * 40} is not in repository {tmp_path}/repos/statkit.bundle"


def test_missing_repository(scenario_dir: Path, tmp_path: Path) -> None:
    (tmp_path / "repos" / "statkit.bundle").unlink()
    (found,) = problems(scenario_dir, tmp_path)
    assert "repository" in found and "does not exist" in found


def test_arm_selecting_an_unknown_plugin(scenario_dir: Path, tmp_path: Path) -> None:
    (found,) = problems(scenario_dir, tmp_path, plugins=("tdd",))
    assert "the arm selects plugin 'tdd', which the scenario lacks" in found


def test_missing_image(scenario_dir: Path, tmp_path: Path) -> None:
    loaded = load_scenario(scenario_dir / "scenario.yaml")
    found = fixture_problems(
        loaded, (), mirrors=MirrorCache(tmp_path / "m"), image_problem=lambda i: f"no {i}"
    )
    assert found == ["no hangar/base:bookworm"]
