"""Scenarios: schema errors that name the file and field, digests, registries, pins."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ConfigError
from hangar.kinds.execution.scenarios.scenario import load_registry, load_scenario, repin

runner = CliRunner()
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "median"


@pytest.fixture
def scenario_dir(tmp_path: Path) -> Path:
    """A copy of the example scenario (with its repository beside it)."""
    shutil.copytree(EXAMPLE, tmp_path / "median")
    shutil.copytree(EXAMPLE.parent / "repos", tmp_path / "repos")
    return tmp_path / "median"


def test_example_loads(scenario_dir: Path) -> None:
    loaded = load_scenario(scenario_dir / "scenario.yaml")
    assert loaded.scenario.id == "statkit-median-even"
    assert len(loaded.digest) == 64
    assert loaded.repository_url().endswith("repos/statkit.bundle")


def test_digest_covers_referenced_bytes(scenario_dir: Path) -> None:
    path = scenario_dir / "scenario.yaml"
    before = load_scenario(path).digest
    assert load_scenario(path).digest == before  # stable
    hidden = scenario_dir / "hidden" / "test_median_hidden.py"
    hidden.write_bytes(hidden.read_bytes() + b" ")
    after_hidden = load_scenario(path).digest
    assert after_hidden != before
    path.write_text(path.read_text().replace("time_s: 300", "time_s: 301"))
    assert load_scenario(path).digest not in (before, after_hidden)


def test_digest_does_not_depend_on_location(scenario_dir: Path, tmp_path: Path) -> None:
    moved = tmp_path / "elsewhere"
    shutil.copytree(scenario_dir.parent, moved)
    assert (
        load_scenario(moved / "median" / "scenario.yaml").digest
        == load_scenario(scenario_dir / "scenario.yaml").digest
    )


def test_malformed_yaml_names_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\ncontext: [unclosed\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+:\d+: malformed YAML"):
        load_scenario(bad)


def test_schema_errors_name_each_field(scenario_dir: Path) -> None:
    path = scenario_dir / "scenario.yaml"
    text = path.read_text().replace(
        "revision: 1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2", "revision: main"
    )
    path.write_text(text + "colour: blue\n")
    with pytest.raises(ConfigError) as info:
        load_scenario(path)
    message = str(info.value)
    lines = path.read_text().splitlines()
    revision = 1 + next(i for i, line in enumerate(lines) if line.startswith("revision:"))
    assert str(path) in message
    assert f"field `revision` (line {revision}): expected the exact commit as 40 lowercase hex" in (
        message
    )
    assert f"field `colour` (line {len(lines)}): unknown field" in message
    assert "pydantic" not in message.lower()


def test_bad_pin_format_is_named(scenario_dir: Path) -> None:
    path = scenario_dir / "scenario.yaml"
    path.write_text(path.read_text().replace('sha256: "sha256:', 'sha256: "md5:', 1))
    with pytest.raises(
        ConfigError, match=r"field `prepare\.sha256` \(line \d+\): expected 'sha256:'"
    ):
        load_scenario(path)


def test_hidden_target_cannot_escape(scenario_dir: Path) -> None:
    path = scenario_dir / "scenario.yaml"
    path.write_text(path.read_text().replace("target: tests/hidden/", "target: ../../etc/"))
    with pytest.raises(ConfigError, match="relative path inside the workspace"):
        load_scenario(path)


def test_registry_refuses_duplicate_ids(scenario_dir: Path) -> None:
    copy = scenario_dir / "again.yaml"
    shutil.copy(scenario_dir / "scenario.yaml", copy)
    with pytest.raises(ConfigError, match="duplicate scenario id 'statkit-median-even'"):
        load_registry([scenario_dir / "scenario.yaml", copy])


def test_repin_updates_only_the_pins(scenario_dir: Path) -> None:
    path = scenario_dir / "scenario.yaml"
    original = path.read_text()
    (scenario_dir / "verify.py").write_text((scenario_dir / "verify.py").read_text() + "\n")
    changed = repin(path)
    assert [c[0] for c in changed] == ["verify.py"]
    new = path.read_text()
    assert new != original and new.replace(changed[0][2], changed[0][1]) == original
    assert repin(path) == []


def test_scenario_check_cli(scenario_dir: Path) -> None:
    runner = CliRunner()
    ok = runner.invoke(
        app, ["scenario", "check", "--backend", "local", str(scenario_dir / "scenario.yaml")]
    )
    assert ok.exit_code == 0, ok.output
    assert load_scenario(scenario_dir / "scenario.yaml").digest in ok.output
    (scenario_dir / "prepare.py").write_text("print('tampered')\n")
    bad = runner.invoke(
        app, ["scenario", "check", "--backend", "local", str(scenario_dir / "scenario.yaml")]
    )
    assert bad.exit_code == 1 and "does not match its pin" in bad.output


def test_unquoted_numeric_revision_says_to_quote(scenario_dir: Path) -> None:
    path = scenario_dir / "scenario.yaml"
    path.write_text(path.read_text().replace("1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2", "1" * 40))
    with pytest.raises(ConfigError, match="quote it in YAML"):
        load_scenario(path)


def test_scenario_pin_writes_missing_pins(scenario_dir: Path) -> None:
    import re

    path = scenario_dir / "scenario.yaml"
    pinned = load_scenario(path).digest
    text = path.read_text()
    # a block-style prepare and a flow-style host verifier, both without a pin
    text = re.sub(r'\n  sha256: "sha256:[0-9a-f]+"', "", text, count=1)
    text = re.sub(
        r'  host:\n    file: verify.py\n    sha256: "sha256:[0-9a-f]+"\n',
        "  host: {file: verify.py}  # the pin is written here\n",
        text,
    )
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"required field is missing \(`hangar scenario pin"):
        load_scenario(path)
    result = runner.invoke(app, ["scenario", "pin", str(path)])
    assert result.exit_code == 0, result.output
    assert "prepare.py" in result.output and "verify.py" in result.output
    after = path.read_text()
    assert "# the pin is written here" in after and "{file: verify.py, sha256:" in after
    assert load_scenario(path).digest == pinned  # the same pins as before
    assert runner.invoke(app, ["scenario", "pin", str(path)]).output.endswith("pins are current\n")


def test_a_wrong_pin_says_how_to_repin_and_fields_are_spelled_for_you(
    scenario_dir: Path,
) -> None:
    from hangar.kinds.execution.scenarios.fixture_checks import static_fixture_problems

    path = scenario_dir / "scenario.yaml"
    (scenario_dir / "verify.py").write_text("print('edited')\n")
    problems = static_fixture_problems(load_scenario(path), ())
    assert any("re-pin it: `hangar scenario pin SCENARIO`" in p for p in problems), problems
    path.write_text(path.read_text().replace("limits:", "limts:"))
    with pytest.raises(ConfigError, match=r"field `limts` \(line \d+\): unknown field \(did you"):
        load_scenario(path)


@pytest.mark.parametrize("source", ["../outside.md", "/etc/passwd", "linked.md"])
def test_a_source_outside_the_scenarios_folder_is_refused_unless_allowed(
    scenario_dir: Path, source: str
) -> None:
    outside = scenario_dir.parent / "outside.md"
    outside.write_text("a skill shared by a suite")
    (scenario_dir / "linked.md").symlink_to(outside)
    path = scenario_dir / "scenario.yaml"
    text = path.read_text()
    plugin = f"plugins:\n  - {{name: shared, source: {source}, target: SKILL.md}}\n"
    path.write_text(plugin + text)
    with pytest.raises(ConfigError, match=r"plugin:shared: .* leaves the scenario's folder"):
        load_scenario(path)
    path.write_text(plugin + "sources_outside: true\n" + text)
    assert load_scenario(path).scenario.plugins[0].source == source


def test_a_host_verifier_pinned_by_absolute_path_loads_without_an_opt_in(
    scenario_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """As a fixture registry pins its verifiers: an absolute path and the bytes' sha256.
    The script runs on the host; what is copied into the sandbox keeps the folder rule."""
    from hangar.files import file_sha256

    elsewhere = tmp_path_factory.mktemp("verifiers") / "verify.py"
    shutil.copy2(scenario_dir / "verify.py", elsewhere)
    path = scenario_dir / "scenario.yaml"
    data = yaml.safe_load(path.read_text())
    data["verifier"]["host"] = {"file": str(elsewhere), "sha256": file_sha256(elsewhere)}
    path.write_text(yaml.safe_dump(data))
    loaded = load_scenario(path)
    assert loaded.scenario.verifier.host.file == str(elsewhere)
    data["verifier"]["files"] = [{"source": str(elsewhere), "target": "tests/v.py"}]
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match=r"verifier.files: .* leaves the scenario's folder"):
        load_scenario(path)


#: sha256 over the judging code's names and bytes (`_JUDGING_CODE` and the junit builtin).
JUDGING_CODE_DIGEST = "f9ca763451739ae75a30b5eebdd6654bd682d68a6f05707dfc5a92c2b00a935b"


def test_the_judging_code_changes_only_on_purpose() -> None:
    """The judging code's bytes are in every execution scenario's digest, so any change
    to them (a comment, a renamed module in a docstring) makes every stored trial another
    version and reruns it. A change that is meant updates this digest and says so."""
    import hashlib

    import hangar.verifiers

    here = Path(hangar.verifiers.__file__).parent
    h = hashlib.sha256()
    for name in ("ecosystems.py", "harness.py", "tampering.py", "guard.py", "admission.py"):
        h.update(name.encode())
        h.update((here / name).read_bytes())
    h.update(b"junit.py")
    h.update((here / "junit.py").read_bytes())
    assert h.hexdigest() == JUDGING_CODE_DIGEST, (
        "the judging code changed: every execution scenario becomes a new version"
    )
