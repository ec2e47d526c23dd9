"""SWE-bench instances: read, imported as task folders, graded with the swebench package;
on real docker the gold patch resolves each example instance and doing nothing resolves
none; the predictions export is SWE-bench's format."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import docker
import pytest
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import ConfigError
from hangar.kinds.execution.harbor.tasks import load_task
from hangar.kinds.execution.images.task import SwebenchGrading
from hangar.kinds.execution.swebench.instances import (
    ImportOptions,
    failing_words,
    grade,
    image_name,
    import_instances,
    patched_files,
    read_instances,
)
from hangar.store import ResultsStore

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INSTANCES = EXAMPLES / "swebench" / "instances.jsonl"


def test_instances_are_read_with_the_datasets_fields() -> None:
    first, second = read_instances(INSTANCES)
    assert first.instance_id == "statkit__statkit-1" and first.repo == "statkit/statkit"
    # JSON-encoded lists, as the datasets ship them, are lists
    assert first.FAIL_TO_PASS == ["tests/test_stats.py::test_median_even_length"]
    assert len(first.PASS_TO_PASS) == 4 and second.PASS_TO_PASS == []
    assert patched_files(first.test_patch) == ["tests/test_stats.py"]
    assert patched_files(second.test_patch) == ["tests/test_variance.py"]


@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("{", [":1:", "not a JSON object"]),
        ('{"instance_id": "x"}', [":1:", "field `repo`", "required field is missing"]),
        (
            json.dumps(
                {
                    "instance_id": "a__b-1",
                    "repo": "a/b",
                    "base_commit": "main",
                    "patch": "",
                    "test_patch": "",
                    "problem_statement": "p",
                    "FAIL_TO_PASS": "[]",
                }
            ),
            [":1:", "base_commit", "[0-9a-f]{40}"],
        ),
    ],
)
def test_bad_instances_say_where_and_what(tmp_path: Path, line: str, words: list[str]) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(line + "\n")
    with pytest.raises(ConfigError) as caught:
        read_instances(path)
    for word in words:
        assert word in str(caught.value)


def test_images_follow_swebench_naming() -> None:
    assert (
        image_name("django__django-11099", "swebench", "latest")
        == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    )
    assert image_name("a__b-1", None, "v2") == "sweb.eval.x86_64.a__b-1:v2"


def test_an_import_writes_task_folders_the_agent_cannot_read_the_answer_from(
    tmp_path: Path,
) -> None:
    folders = import_instances(
        INSTANCES,
        tmp_path / "tasks",
        ImportOptions(repositories={"statkit/statkit": str(EXAMPLES / "repos" / "statkit.bundle")}),
    )
    task = load_task(folders[0] / "task.toml")
    instance = read_instances(INSTANCES)[0]
    assert task.id == "statkit__statkit-1" and task.revision == instance.base_commit
    assert task.workdir == "/testbed" and task.repository is not None
    assert task.image.reference == "swebench/sweb.eval.x86_64.statkit_1776_statkit-1:latest"
    assert task.instruction.strip() == instance.problem_statement
    assert instance.patch not in task.instruction and instance.test_patch not in task.instruction
    grading = task.grading
    assert grading is not None and grading.fail_to_pass == tuple(instance.FAIL_TO_PASS)
    script = (folders[0] / "tests" / "test.sh").read_text()
    assert "checkout -q 1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2 -- tests/test_stats.py" in script
    assert "python3 -m pytest -rA -p no:cacheprovider tests/test_stats.py" in script
    assert (folders[0] / "solution" / "gold.patch").read_text() == instance.patch
    # hints only when asked
    instance_hints = tmp_path / "hints.jsonl"
    data = json.loads(INSTANCES.read_text().splitlines()[0])
    instance_hints.write_text(json.dumps({**data, "hints_text": "look at mid"}) + "\n")
    plain = import_instances(instance_hints, tmp_path / "plain", ImportOptions())
    hinted = import_instances(instance_hints, tmp_path / "hinted", ImportOptions(hints=True))
    assert "look at mid" not in (plain[0] / "instruction.md").read_text()
    assert "look at mid" in (hinted[0] / "instruction.md").read_text()


GRADING = SwebenchGrading(
    instance_id="x",
    repo="statkit/statkit",
    fail_to_pass=("tests/t.py::test_new",),
    pass_to_pass=("tests/t.py::test_old", "tests/t.py::test_skipped"),
)


def _log(tmp_path: Path, *lines: str) -> Path:
    path = tmp_path / "test_output.txt"
    path.write_text("=== short test summary info ===\n" + "\n".join(lines) + "\n")
    return path


def test_grading_is_swebench_resolution(tmp_path: Path) -> None:
    resolved = grade(
        GRADING,
        _log(
            tmp_path,
            "PASSED tests/t.py::test_new",
            "PASSED tests/t.py::test_old",
            "SKIPPED tests/t.py::test_skipped",
        ),
    )
    assert resolved.reward.value == 1.0 and resolved.report["resolution"] == "RESOLVED_FULL"
    assert {c.requirement: c.status for c in resolved.checks} == {
        "FAIL_TO_PASS tests/t.py::test_new": "pass",
        "PASS_TO_PASS tests/t.py::test_old": "pass",
        "PASS_TO_PASS tests/t.py::test_skipped": "pass",  # a skipped P2P is no regression
    }
    broke = grade(
        GRADING,
        _log(tmp_path, "PASSED tests/t.py::test_new", "FAILED tests/t.py::test_old - boom"),
    )
    assert broke.reward.value == 0.0 and broke.report["resolution"] == "RESOLVED_NO"
    scores = {s.metric: s.value for s in broke.reward.scores}
    assert scores["resolved"] == 0.0 and scores["fail_to_pass"] == 1.0
    missing = grade(GRADING, tmp_path / "absent.txt")
    assert missing.reward.value is None and "no test log" in missing.reward.problem


#: What pytest prints when the package under test cannot be imported.
IMPORT_FAILED = """============================= test session starts ==============================
collected 0 items / 1 error

==================================== ERRORS ====================================
_________________________ ERROR collecting tests/t.py __________________________
ImportError while importing test module '/testbed/tests/t.py'.
Traceback:
tests/t.py:1: in <module>
    import statkit
E   ModuleNotFoundError: No module named 'statkit'
=========================== short test summary info ============================
ERROR tests/t.py
=============================== 1 error in 0.05s ===============================
"""


def test_a_package_that_does_not_import_is_named_in_the_reason(tmp_path: Path) -> None:
    """The tests never ran: the reason says so and what the log says, not only their names."""
    log = tmp_path / "test_output.txt"
    log.write_text(IMPORT_FAILED)
    graded = grade(GRADING, log)
    assert graded.reward.value == 0.0
    assert graded.report["not_run"] == [
        "tests/t.py::test_new",
        "tests/t.py::test_old",
        "tests/t.py::test_skipped",
    ]
    assert graded.report["log_error"] == "ModuleNotFoundError: No module named 'statkit'"
    words = failing_words(graded.checks, graded.report)
    assert words == (
        "pytest collected no test: the package could not be imported "
        "(ModuleNotFoundError: No module named 'statkit')"
    )
    # Tests that ran and failed are named; only the one missing from the log did not run.
    ran = grade(
        GRADING, _log(tmp_path, "FAILED tests/t.py::test_new", "PASSED tests/t.py::test_old")
    )
    assert ran.report["not_run"] == ["tests/t.py::test_skipped"]
    words = failing_words(ran.checks, ran.report)
    assert words.startswith("failing FAIL_TO_PASS tests/t.py::test_new, PASS_TO_PASS")
    assert "(1 not in the test log: they did not run)" in words


def _eval_script(instance: dict[str, Any], command: str) -> str:
    """An evaluation script in the shape SWE-bench's datasets ship."""
    files = " ".join(patched_files(instance["test_patch"]))
    base = instance["base_commit"]
    return "\n".join(
        [
            "#!/bin/bash",
            "set -uxo pipefail",
            "cd /testbed",
            f"git checkout {base} {files}",
            "git apply -v - <<'EOF_114329324912'",
            instance["test_patch"].rstrip("\n"),
            "EOF_114329324912",
            ": '>>>>> Start Test Output'",
            f"{command} {files}",
            ": '>>>>> End Test Output'",
            f"git checkout {base} {files}",
            "",
        ]
    )


def _harness_log(tmp_path: Path, body: str, exit_code: int = 0) -> Path:
    path = tmp_path / "test_output.txt"
    path.write_text(
        "+ git apply -v -\n+ : '>>>>> Start Test Output'\n"
        f"{body}\n+ HARNESS_EXIT={exit_code}\n+ : '>>>>> End Test Output'\n"
        f"+ echo 'HARNESS_TEST_EXIT_CODE: {exit_code}'\n"
    )
    return path


def test_a_harness_log_is_read_as_swebench_reads_it(tmp_path: Path) -> None:
    grading = GRADING.model_copy(update={"log_parser": "parse_log_pytest"})
    passed = (
        "PASSED tests/t.py::test_new\nPASSED tests/t.py::test_old\nSKIPPED tests/t.py::test_skipped"
    )
    assert grade(grading, _harness_log(tmp_path, passed)).reward.value == 1.0
    # outside the markers counts for nothing; a patch that did not apply is named
    failed = _harness_log(tmp_path, passed.replace("PASSED tests/t.py::test_new", ""))
    failed.write_text(failed.read_text() + "PASSED tests/t.py::test_new\n")
    assert grade(grading, failed).reward.value == 0.0
    broken = _harness_log(tmp_path, ">>>>> Patch Apply Failed")
    graded = grade(grading, broken)
    assert graded.reward.value == 0.0
    words = failing_words(graded.checks, graded.report)
    assert words == "the test patch did not apply (SWE-bench's evaluation script)"


def test_an_unknown_parser_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no log parser 'parse_log_nothing'"):
        grade(GRADING.model_copy(update={"log_parser": "parse_log_nothing"}), _log(tmp_path))


@pytest.fixture
def example(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLES / "swebench", tmp_path / "swebench")
    shutil.copytree(EXAMPLES / "repos", tmp_path / "repos")
    sweep = tmp_path / "swebench" / "sweep.yaml"
    sweep.write_text(
        sweep.read_text()
        + f"store: sqlite:///{tmp_path}/runs.db\nevidence: {(tmp_path / 'evidence').as_uri()}\n"
    )
    return sweep


def test_gold_resolves_nop_does_not_and_predictions_export(
    docker_client: docker.DockerClient, ray_local: None, example: Path, tmp_path: Path
) -> None:
    cli = CliRunner()
    out = cli.invoke(app, ["dataset", "validate", str(example)])
    assert out.exit_code == 0, out.output
    assert "2 valid, 0 broken" in out.output
    out = cli.invoke(app, ["run", str(example), "--allow-failures"])
    assert out.exit_code == 0, out.output
    assert "4 of 4 trials final" in out.output and "  2 passed\n  2 failed" in out.output

    out = cli.invoke(app, ["dataset", "export-predictions", str(example), "--out", "x.jsonl"])
    assert isinstance(out.exception, ConfigError) and "choose one" in str(out.exception)
    preds = tmp_path / "preds.jsonl"
    out = cli.invoke(
        app, ["dataset", "export-predictions", str(example), "--out", str(preds), "--agent", "gold"]
    )
    assert out.exit_code == 0, out.output
    rows = [json.loads(line) for line in preds.read_text().splitlines()]
    assert {r["instance_id"] for r in rows} == {"statkit__statkit-1", "statkit__statkit-2"}
    assert all(set(r) == {"instance_id", "model_name_or_path", "model_patch"} for r in rows)
    gold = {i.instance_id: i.patch for i in read_instances(INSTANCES)}
    for row in rows:  # the agent's diff is the gold patch's change, test files untouched
        assert "tests/" not in row["model_patch"]
        added = {ln for ln in row["model_patch"].splitlines() if ln.startswith("+ ")}
        assert added and added <= set(gold[row["instance_id"]].splitlines())
    _submission_grades_the_same(cli, example, tmp_path / "submission")


def _submission_grades_the_same(cli: CliRunner, sweep: Path, out: Path) -> None:
    """`hangar export --format swebench-submission`: the experiments layout, one folder per
    (agent, model); SWE-bench's own grading of its predictions and logs resolves what
    hangar resolved."""
    from swebench.harness.grading import get_eval_report
    from swebench.types import TestSpec

    result = cli.invoke(
        app, ["export", str(sweep), "--format", "swebench-submission", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    folders = {p.name.split("_", 1)[1]: p for p in out.iterdir()}
    assert set(folders) == {"gold__none", "nop__none"}
    instances = {i.instance_id: i for i in read_instances(INSTANCES)}
    for agent, folder in folders.items():
        files = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()}
        assert {"all_preds.jsonl", "results/results.json", "metadata.yaml"} <= files
        results = json.loads((folder / "results" / "results.json").read_text())
        preds = [json.loads(line) for line in (folder / "all_preds.jsonl").read_text().splitlines()]
        assert len(preds) == 2
        for pred in preds:
            iid = pred["instance_id"]
            assert {
                f"logs/{iid}/patch.diff",
                f"logs/{iid}/report.json",
                f"trajs/{iid}.json",
            } <= files
            inst = instances[iid]
            spec = TestSpec(
                instance_id=iid, image="", eval_script_list=[], repo=inst.repo,
                version=inst.version, FAIL_TO_PASS=list(inst.FAIL_TO_PASS),
                PASS_TO_PASS=list(inst.PASS_TO_PASS), log_parser="parse_log_pytest",
                eval_type="pass_and_fail",
            )  # fmt: skip
            graded = get_eval_report(
                spec, pred, str(folder / "logs" / iid / "test_output.txt"), True
            )
            assert graded[iid]["resolved"] is (iid in results["resolved"])
            assert graded[iid]["resolved"] is (agent == "gold__none")
        assert results["no_generation"] == ([] if agent == "gold__none" else sorted(instances))


def test_an_instance_with_its_own_evaluation_script_runs_it(
    docker_client: docker.DockerClient, ray_local: None, example: Path
) -> None:
    """SWE-bench's datasets ship each instance's evaluation script: it is run as the
    harness runs it and its log read by the package, gold resolving and nop not."""
    lines = (example.parent / "instances.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    command = "python3 -m pytest -rA -p no:cacheprovider"
    for row in rows:
        row.pop("test_cmd", None)
        row.update(
            eval_script=_eval_script(row, command),
            log_parser="parse_log_pytest",
            eval_type="pass_and_fail",
        )
    (example.parent / "instances.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = CliRunner().invoke(app, ["dataset", "validate", str(example)])
    assert out.exit_code == 0, out.output
    assert "2 valid, 0 broken" in out.output
    out = CliRunner().invoke(app, ["run", str(example), "--allow-failures"])
    assert "4 of 4 trials final" in out.output and "  2 passed\n  2 failed" in out.output
    store = ResultsStore(f"sqlite:///{example.parent.parent}/runs.db")
    reasons = sorted(r.reason for r in store.results("swebench-demo"))
    assert reasons[-2:] == ["resolved", "resolved"], reasons
    assert reasons[0].startswith("not resolved: failing FAIL_TO_PASS"), reasons
    # the second fix's tests import what only the fix adds: no test ran, and it says so
    assert reasons[1].startswith(
        "not resolved: pytest collected no test: the package could not be imported "
        "(ImportError: cannot import name 'variance'"
    ), reasons


def test_a_missing_instance_image_is_blocked_naming_it(
    docker_client: docker.DockerClient, ray_local: None, example: Path
) -> None:
    text = example.read_text()
    example.write_text(
        text.replace("image_map:\n", "image_map:\n  unused: x\n").replace(
            '  "swebench/sweb.eval.x86_64.statkit_1776_statkit-*": hangar/base:bookworm\n', ""
        )
    )
    out = CliRunner().invoke(app, ["dataset", "validate", str(example)])
    assert out.exit_code == 1, out.output
    assert "0 valid, 2 broken" in out.output
    store = ResultsStore(f"sqlite:///{example.parent.parent}/runs.db")
    reasons = {r.reason for r in store.results("validate-swebench-demo")}
    image = "swebench/sweb.eval.x86_64.statkit_1776_statkit-1:latest"
    assert any(r.startswith("image " + repr(image) + " is not on this node") for r in reasons)
