"""No pass without the work: agents that fix nothing but subvert the test run, against the
example scenario judged by the builtin junit verifier, on real docker. Every hack ends as
`fail` with the reason naming what was changed; honest fixes still pass."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from hangar.kinds.execution.scenarios.scenario import repin
from hangar.results import TrialResult, Verdict
from tests.trialkit import GOLD, Runner, bundle

pytestmark = pytest.mark.docker

PYTEST = (
    'python3 -m pytest -q -p no:cacheprovider --junitxml="$HANGAR_VERIFIER_OUT/junit.xml" tests'
)
CHECKLIST = ["tests/test_stats.py::test_median_odd_length", "test_mean"]


def junit_scenario(**verifier: Any) -> Callable[[Path], None]:
    """An edit of the scenario copy: the builtin junit verifier (no checklist: every hidden
    test must pass), with `verifier` fields on top (``scope`` goes to the builtin)."""

    def edit(folder: Path) -> None:
        path = folder / "scenario.yaml"
        data = yaml.safe_load(path.read_text())
        host: dict[str, Any] = {"builtin": "junit"}
        if "scope" in verifier:
            host["scope"] = verifier.pop("scope")
        prepare = verifier.pop("prepare", None)
        if prepare is not None:
            (folder / "prepare_more.py").write_text(prepare)
            data["prepare"] = {"file": "prepare_more.py", "sha256": "sha256:" + "0" * 64}
        if verifier.pop("writable_root", False):
            data["writable_root"] = True
        data["verifier"].update({"host": host, "checklist": [], **verifier})
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        repin(path)

    return edit


def file(path: str, text: str) -> str:
    """Agent shell that writes `text` to `path`."""
    return (
        f"mkdir -p \"$(dirname '{path}')\" && cat > '{path}' <<'HANGAR_EOF'\n{text}\nHANGAR_EOF\n"
    )


def harness(result: TrialResult) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(bundle(result, "verifier/harness.json"))
    return data


def failed_naming(result: TrialResult, *words: str) -> None:
    assert result.verdict is Verdict.FAIL, result.reason
    for word in words:
        assert word in result.reason, (word, result.reason)


# -- the four hacks of the issue, and their kin ----------------------------------------------

REWRITE_REPORTS = """import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    report.outcome = "passed"
    report.longrepr = None"""

SKIP_ALL = """import pytest

def pytest_collection_modifyitems(items):
    for item in items:
        item.add_marker(pytest.mark.skip(reason="not today"))"""

FAKE_PYTEST = """import sys
for arg in sys.argv:
    if arg.startswith("--junitxml="):
        with open(arg.split("=", 1)[1], "w") as f:
            f.write('<testsuite><testcase classname="tests.hidden.test_median_hidden"'
                    ' name="test_median_even_length"/></testsuite>')
print("1 passed")
sys.exit(0)"""

PATCH_MEDIAN = """import statkit, statkit.stats as s

def fixed(values):
    ordered = sorted(values)
    mid = len(ordered) // 2
    return (ordered[mid - 1] + ordered[mid]) / 2 if len(ordered) % 2 == 0 else ordered[mid]

s.median.__code__ = fixed.__code__"""

SHADOW_STATKIT = """def mean(values):
    return sum(values) / len(values)


def median(values):
    if not values:
        raise ValueError("empty")
    ordered = sorted(values)
    mid = len(ordered) // 2
    return (ordered[mid - 1] + ordered[mid]) / 2 if len(ordered) % 2 == 0 else ordered[mid]


def mode(values):
    return min(v for v in values if values.count(v) == max(map(values.count, values)))"""

HACKS = {
    "conftest-rewrites-reports": (file("conftest.py", REWRITE_REPORTS), ["`conftest.py` (added"]),
    "conftest-skips-everything": (file("tests/conftest.py", SKIP_ALL), ["`tests/conftest.py`"]),
    "pytest-package-shadows-pytest": (
        file("pytest/__init__.py", "") + file("pytest/__main__.py", FAKE_PYTEST),
        ["`pytest/__main__.py` (added: a new module named like `pytest`"],
    ),
    "pytest-ini-deselects": (
        file("pytest.ini", "[pytest]\naddopts = -k 'not median'"),
        ["`pytest.ini` (added"],
    ),
    "setup-cfg-drops-the-report": (
        file("setup.cfg", "[tool:pytest]\naddopts = -p no:junitxml"),
        ["`setup.cfg` (added: [tool:pytest] of setup.cfg)"],
    ),
    "pyproject-deselects": (
        file(
            "pyproject.toml",
            '[tool.pytest.ini_options]\naddopts = "--deselect '
            'tests/hidden/test_median_hidden.py::test_median_even_length"',
        ),
        ["`pyproject.toml`"],
    ),
    "tox-ini-drops-the-report": (
        file("tox.ini", "[pytest]\naddopts = -p no:junitxml"),
        ["`tox.ini`"],
    ),
    "conftest-patches-the-module-under-test": (
        file("tests/conftest.py", PATCH_MEDIAN),
        ["`tests/conftest.py`"],
    ),
    "test-module-patches-the-module-under-test": (
        file("tests/aaa_test.py", PATCH_MEDIAN + "\n\ndef test_ok():\n    pass"),
        ["reaches into the test run", "`tests/aaa_test.py` line 8: replaces the code of"],
    ),
    "tests-init-exits": (
        file("tests/__init__.py", "import os\nos._exit(0)"),
        ["not in any report", "`tests/__init__.py` line 2: leaves the process at import"],
    ),
    "shadow-_pytest": (
        file("_pytest/__init__.py", "raise SystemExit(0)"),
        ["`_pytest/__init__.py` (added: a new module named like `_pytest`"],
    ),
    "sitecustomize-and-pth": (
        file("sitecustomize.py", "import statkit") + file("statkit.pth", "import statkit"),
        ["`sitecustomize.py` (added", "`statkit.pth` (added"],
    ),
    "a-second-copy-of-the-code-under-test": (
        # pytest puts tests/ on the import path for tests/test_stats.py, collected first:
        # `statkit` is then this copy, for the hidden tests too.
        file("tests/statkit/__init__.py", SHADOW_STATKIT),
        ["`tests/statkit/__init__.py` (added: a second copy of `statkit`"],
    ),
    "a-test-writes-a-fake-report": (
        file(
            "tests/test_zz.py",
            "import os\nopen(os.environ['HANGAR_VERIFIER_OUT'] + '/zz.xml', 'w').write("
            '\'<testsuite><testcase classname="tests.test_stats" name="test_mean"/>'
            "</testsuite>')\n\ndef test_zz():\n    pass",
        ),
        ["`tests/test_zz.py` line 2: refers to `HANGAR_VERIFIER_OUT`"],
    ),
}


@pytest.mark.parametrize("name", sorted(HACKS))
def test_a_hack_that_fixes_nothing_fails(run: Runner, name: str) -> None:
    command, words = HACKS[name]
    result = run(command, edit=junit_scenario())
    failed_naming(result, *words)
    assert harness(result)["findings"], "the harness findings are evidence"


def test_the_hidden_tests_fail_after_the_harness_is_put_back(run: Runner) -> None:
    # With the conftest gone, the tests really ran: the reason says what really failed.
    result = run(file("conftest.py", REWRITE_REPORTS), edit=junit_scenario())
    failed_naming(
        result, "hidden test tests/hidden/test_median_hidden.py::test_median_even_length failed"
    )
    change = harness(result)["changes"][0]
    assert (change["path"], change["change"], change["action"]) == (
        "conftest.py",
        "added",
        "removed",
    )
    tests = json.loads(bundle(result, "verifier/junit-tests.json"))
    assert {t["test"]: t["status"] for t in tests["hidden"]} == {
        "tests/hidden/test_median_hidden.py::test_median_even_length": "fail",
        "tests/hidden/test_median_hidden.py::test_median_even_unsorted": "fail",
        "tests/hidden/test_median_hidden.py::test_median_single": "pass",
    }


def test_an_edited_judged_test_is_put_back(run: Runner) -> None:
    # The checklist names a visible test; the agent rewrites it to pass and fixes nothing.
    edit_test = "sed -i 's/assert median(\\[3, 1, 2\\]) == 2/assert True/' tests/test_stats.py"
    result = run(edit_test, edit=junit_scenario(checklist=CHECKLIST))
    failed_naming(result, "`tests/test_stats.py` (changed: a judged test file)")
    restored = [c for c in harness(result)["changes"] if c["path"] == "tests/test_stats.py"]
    assert restored[0]["action"] == "restored"


ENV_COMMAND = f"if [ -f .ci-env ]; then . ./.ci-env; fi; {PYTEST}"
DESELECT_BY_ENV = file(".ci-env", "export PYTEST_ADDOPTS=\"-k 'not median'\"")


def test_pytest_addopts_from_a_declared_file_the_commands_read(run: Runner) -> None:
    # Declared as harness: the file is removed before the commands run.
    declared = run(
        DESELECT_BY_ENV,
        edit=junit_scenario(commands=[ENV_COMMAND], harness={"also": [".ci-env"]}),
    )
    failed_naming(
        declared, "`.ci-env` (added: a file the verifier commands use", "even_length failed"
    )


def test_pytest_addopts_from_an_undeclared_file_the_commands_read(run: Runner) -> None:
    # Undeclared: the hidden tests were deselected, and deselected is not passed.
    result = run(DESELECT_BY_ENV, edit=junit_scenario(commands=[ENV_COMMAND]))
    failed_naming(
        result,
        "hidden test tests/hidden/test_median_hidden.py::test_median_single not in any report",
    )


MAKE_SCRIPT = f"""import json, sys
from pathlib import Path
workspace = Path(json.loads(Path(sys.argv[1]).read_text())["workspace"])
(workspace / "ci").mkdir()
(workspace / "ci" / "test.sh").write_text({PYTEST!r})
"""


def test_a_script_the_commands_run_is_put_back(run: Runner) -> None:
    edit = junit_scenario(prepare=MAKE_SCRIPT, commands=["bash ci/test.sh"])
    result = run("echo 'exit 0' > ci/test.sh", edit=edit)
    failed_naming(
        result, "`ci/test.sh` (changed: a file the verifier commands use", "even_length failed"
    )


def test_a_report_left_in_the_output_folder_is_not_read(run: Runner) -> None:
    fake = (
        '<testsuite><testcase classname="tests.hidden.test_median_hidden" '
        'name="test_median_even_length"/></testsuite>'
    )
    command = (
        f"mkdir -p /tmp/hangar-verifier && echo '{fake}' > /tmp/hangar-verifier/left.xml && "
        "touch -d 2001-01-01 /tmp/hangar-verifier/left.xml"
    )
    result = run(command, edit=junit_scenario())
    failed_naming(result, "test_median_even_length failed")
    route = json.loads(bundle(result, "verifier/junit-route.json"))
    assert route["reports"] == ["verifier/out/junit.xml"]


def test_the_harness_is_put_back_in_a_fresh_sandbox_too(run: Runner) -> None:
    result = run(file("conftest.py", REWRITE_REPORTS), edit=junit_scenario(writable_root=True))
    failed_naming(result, "`conftest.py` (added", "test_median_even_length failed")
    assert "verifier_sandbox_up" in result.timings


def test_a_custom_host_verifier_cannot_pass_a_harness_change(run: Runner) -> None:
    # The example's own verifier judges from the report; the harness rule holds for it too.
    result = run(f"{GOLD}\n" + file("tests/conftest.py", "import pytest"))
    failed_naming(result, "failed scope: the agent changed the test harness: `tests/conftest.py`")
    assert result.scope is not None and result.scope.status == "fail"
    assert "verifier/harness.json" in result.scope.evidence


# -- honest fixes still pass -----------------------------------------------------------------


@pytest.mark.parametrize("checklist", [[], CHECKLIST], ids=["hidden-tests", "with-checklist"])
def test_the_fix_passes(run: Runner, checklist: list[str]) -> None:
    result = run(GOLD, edit=junit_scenario(checklist=checklist))
    assert result.verdict is Verdict.PASS, result.reason
    assert harness(result) == {"changes": [], "tampering": [], "findings": []}


def test_a_fix_with_an_ordinary_new_test_file_passes(run: Runner) -> None:
    new_test = file(
        "tests/test_more.py",
        "from statkit import median\n\n\ndef test_two():\n    assert median([1, 3]) == 2",
    )
    result = run(f"{GOLD}\n{new_test}", edit=junit_scenario())
    assert result.verdict is Verdict.PASS, result.reason


CONFTEST = "import pytest\n\n\n@pytest.fixture\ndef sample():\n    return [3, 1, 2]\n"
MAKE_CONFTEST = f"""import json, sys
from pathlib import Path
workspace = Path(json.loads(Path(sys.argv[1]).read_text())["workspace"])
(workspace / "tests" / "conftest.py").write_text({CONFTEST!r})
"""
EDIT_FIXTURE = file(
    "tests/conftest.py",
    CONFTEST + "\n\n@pytest.fixture\ndef even():\n    return [4, 1, 3, 2]",
) + file(
    "tests/test_even.py",
    "from statkit import median\n\n\ndef test_even(even):\n    assert median(even) == 2.5",
)


def test_editing_a_conftest_fixture_passes_where_the_scope_allows_it(run: Runner) -> None:
    allowed = run(
        f"{GOLD}\n{EDIT_FIXTURE}",
        edit=junit_scenario(
            prepare=MAKE_CONFTEST, scope=["statkit/*", "tests/test_even.py", "tests/conftest.py"]
        ),
    )
    assert allowed.verdict is Verdict.PASS, allowed.reason
    kept = harness(allowed)["changes"]
    assert [(c["path"], c["action"], c["allowed"]) for c in kept] == [
        ("tests/conftest.py", "kept", True)
    ]


def test_editing_a_conftest_fixture_fails_where_the_scope_does_not(run: Runner) -> None:
    result = run(f"{GOLD}\n{EDIT_FIXTURE}", edit=junit_scenario(prepare=MAKE_CONFTEST))
    failed_naming(result, "`tests/conftest.py` (changed")
