"""What the tests of real agent CLIs (Codex, Claude Code) share: their image, built
offline (twice: the second build must do nothing), and one trial of the example scenario
run by a preset in that image, through the relay, against the scripted server."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from hangar.agents import parse_agent
from hangar.kinds.execution import single_trial
from hangar.kinds.execution.scenario import load_scenario
from hangar.models import ModelSpec
from hangar.results import TrialResult
from hangar.sandbox.images import build_agent_image
from hangar.trials import Arm, run_trial
from tests.require import BASE_IMAGE

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def cli_image(name: str) -> str:
    """The tag of ``<base>-<name>``, built from the npm registry (skips without npm)."""
    if shutil.which("npm") is None:
        pytest.skip(f"npm is not installed: the {name} CLI comes from the npm registry")
    outcome = build_agent_image(name, BASE_IMAGE)
    again = build_agent_image(name, BASE_IMAGE)
    assert not again.built, "a second build with the same inputs should do nothing"
    return outcome.tag


def fix_the_example(image: str, preset: str, model: ModelSpec, tmp_path: Path) -> TrialResult:
    """One trial of the example scenario (its image replaced) by the `preset` agent."""
    shutil.copytree(EXAMPLES / "median", tmp_path / "median")
    shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    path = tmp_path / "median" / "scenario.yaml"
    path.write_text(path.read_text().replace(f"image: {BASE_IMAGE}", f"image: {image}"))
    agent = parse_agent(preset, {"preset": preset}, "test")
    spec = single_trial(
        load_scenario(path),
        agent,
        Arm(name="control"),
        model=model,
        evidence_url=(tmp_path / "ev").as_uri(),
    )
    return run_trial(spec)
