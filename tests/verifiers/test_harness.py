"""The test harness as pinned: which paths are harness, what a comparison finds, what is
put back, and the signs of code that reaches into the test run (no sandbox needed)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hangar.verifiers.ecosystems import command_files
from hangar.verifiers.harness import (
    HarnessAllowance,
    HarnessBaseline,
    HarnessChange,
    findings,
    placements,
)
from hangar.verifiers.tampering import added_lines, is_test_module, signs

REPO = {
    "statkit/__init__.py": "from statkit.stats import median\n",
    "statkit/stats.py": "def median(v):\n    return sorted(v)[len(v) // 2]\n",
    "tests/test_stats.py": (
        "from statkit import median\n\ndef test_odd():\n    assert median([3, 1, 2]) == 2\n"
    ),
    "pyproject.toml": "[project]\nname = 'statkit'\n\n[tool.pytest.ini_options]\naddopts = '-q'\n",
    "setup.cfg": "[metadata]\nname = statkit\n",
    "README.md": "statkit\n",
}


def make(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    return make(tmp_path / "ws", REPO)


def baseline(ws: Path, tmp_path: Path, **kwargs: object) -> HarnessBaseline:
    return HarnessBaseline.take(ws, tmp_path / "store", **kwargs)  # type: ignore[arg-type]


def changes_of(
    ws: Path, base: HarnessBaseline, allowance: HarnessAllowance | None = None
) -> dict[str, HarnessChange]:
    found = base.compare(ws, allowance or HarnessAllowance())
    return {c.path: c for c in found.changes}


@pytest.mark.parametrize(
    ("rel", "text", "what"),
    [
        ("conftest.py", "def pytest_runtest_makereport(): ...\n", "python test harness file"),
        ("tests/deep/conftest.py", "x = 1\n", "python test harness file"),
        ("pytest.ini", "[pytest]\naddopts = -k 'not median'\n", "python test harness file"),
        ("tests/pytest.ini", "[pytest]\n", "python test harness file"),
        (".pytest.ini", "[pytest]\n", "python test harness file"),
        ("pytest.toml", "[pytest]\n", "python test harness file"),
        ("tox.ini", "[pytest]\naddopts = -p no:junitxml\n", "[pytest] of tox.ini"),
        ("sitecustomize.py", "import os\n", "python test harness file"),
        ("lib/usercustomize.py", "import os\n", "python test harness file"),
        ("hack.pth", "import os\n", "python test harness file"),
        ("pytest/__init__.py", "", "a new module named like `pytest`"),
        ("pytest/__main__.py", "", "a new module named like `pytest`"),
        ("_pytest/runner.py", "", "a new module named like `_pytest`"),
        ("pluggy.py", "", "a new module named like `pluggy`"),
        ("tests/unittest.py", "", "a new module named like `unittest`"),
        ("textwrap.py", "", "a new module named like `textwrap`"),
        ("pytest_evil.py", "", "a new module named like `pytest_evil`"),
        ("evil.dist-info/entry_points.txt", "[pytest11]\nevil = evil\n", "pytest11"),
        ("jest.config.js", "module.exports = {}\n", "javascript test harness file"),
        ("node_modules/jest-junit/index.js", "", "an installed copy of `jest-junit`"),
        (".venv/lib/python3.11/site-packages/_pytest/reports.py", "", "an installed copy"),
        ("tests/aaa/statkit/__init__.py", "", "a second copy of `statkit`"),
        ("tests/statkit.py", "", "a second copy of `statkit`"),
    ],
)
def test_added_harness_files_are_removed(
    ws: Path, tmp_path: Path, rel: str, text: str, what: str
) -> None:
    base = baseline(ws, tmp_path)
    make(ws, {rel: text})
    change = changes_of(ws, base)[rel]
    assert change.change == "added" and change.action == "removed"
    assert what in change.what, change.what
    assert findings([change]) == [change]


@pytest.mark.parametrize(
    "rel",
    [
        "statkit/json.py",  # inside a package: `statkit.json`, no top-level name
        "tests/test_new.py",  # an ordinary new test file
        "test/test_more.py",  # `test/` is left out of the standard-library names
        "packaging/debian/control",  # named like a tool, but nothing importable
        "statkit/extra.py",  # in the code under test itself
        "docs/statkit/index.md",  # named like it, but nothing importable
        "tests/setup.py",  # a root script is not the code under test
        "docs/index.md",
    ],
)
def test_ordinary_additions_are_not_harness(ws: Path, tmp_path: Path, rel: str) -> None:
    base = baseline(ws, tmp_path)
    make(ws, {rel: "x = 1\n"})
    assert rel not in changes_of(ws, base)


def test_sections_of_shared_files_are_compared_as_data(ws: Path, tmp_path: Path) -> None:
    base = baseline(ws, tmp_path)
    # Elsewhere in the file: not a harness change.
    (ws / "pyproject.toml").write_text(REPO["pyproject.toml"].replace("statkit", "statkit2"))
    (ws / "setup.cfg").write_text("[metadata]\nname = other\n")
    assert changes_of(ws, base) == {}
    # The pytest sections: changed (restored whole) and added (the file restored).
    (ws / "pyproject.toml").write_text(REPO["pyproject.toml"].replace("-q", "-k 'not median'"))
    (ws / "setup.cfg").write_text("[metadata]\nname = statkit\n[tool:pytest]\naddopts = -x\n")
    found = changes_of(ws, base)
    assert {p: (c.change, c.action) for p, c in found.items()} == {
        "pyproject.toml": ("changed", "restored"),
        "setup.cfg": ("changed", "restored"),
    }
    undo = dict(placements(base, list(found.values())))
    assert undo["pyproject.toml"].read_text() == REPO["pyproject.toml"]  # type: ignore[union-attr]
    assert undo["setup.cfg"].read_text() == REPO["setup.cfg"]  # type: ignore[union-attr]


def test_unreadable_shared_files_still_count(ws: Path, tmp_path: Path) -> None:
    base = baseline(ws, tmp_path)
    (ws / "pyproject.toml").write_text("[tool.pytest.ini_options\nnot toml")
    assert changes_of(ws, base)["pyproject.toml"].action == "restored"


def test_changed_and_removed_harness_files_are_restored(ws: Path, tmp_path: Path) -> None:
    make(ws, {"tests/conftest.py": "import pytest\n"})
    base = baseline(ws, tmp_path, judged=frozenset({"tests/test_stats.py"}))
    (ws / "tests" / "conftest.py").unlink()
    (ws / "tests" / "test_stats.py").write_text("def test_odd(): pass\n")
    found = changes_of(ws, base)
    assert (found["tests/conftest.py"].change, found["tests/conftest.py"].action) == (
        "removed",
        "restored",
    )
    assert found["tests/test_stats.py"].what == "a judged test file"
    undo = dict(placements(base, list(found.values())))
    assert undo["tests/test_stats.py"].read_text() == REPO["tests/test_stats.py"]  # type: ignore[union-attr]


def test_a_link_in_place_of_a_harness_file_is_a_change(ws: Path, tmp_path: Path) -> None:
    make(ws, {"tests/conftest.py": "import pytest\n"})
    base = baseline(ws, tmp_path)
    (ws / "tests" / "conftest.py").unlink()
    (ws / "tests" / "conftest.py").symlink_to("/tmp/anything.py")
    assert changes_of(ws, base)["tests/conftest.py"].action == "restored"


def test_caches_are_removed_quietly(ws: Path, tmp_path: Path) -> None:
    base = baseline(ws, tmp_path)
    make(
        ws,
        {
            "tests/__pycache__/test_stats.cpython-311-pytest-7.2.1.pyc": "forged",
            ".pytest_cache/v/cache/lastfailed": "{}",
        },
    )
    found = changes_of(ws, base)
    assert {c.action for c in found.values()} == {"removed"}
    assert len(found) == 2 and findings(list(found.values())) == []


def test_the_code_under_test_may_be_a_test_tool(tmp_path: Path) -> None:
    # The repository *is* pytest: its own `_pytest` is the code under test ...
    ws = make(tmp_path / "pytest-repo", {"src/_pytest/python.py": "x = 1\n", "src/pytest.py": ""})
    base = baseline(ws, tmp_path)
    make(ws, {"src/_pytest/python.py": "x = 2\n", "src/_pytest/new.py": "y = 1\n"})
    assert changes_of(ws, base) == {}
    # ... but an installed copy of it never is.
    make(ws, {"venv/lib/python3.11/site-packages/_pytest/runner.py": "x = 1\n"})
    base = baseline(ws, tmp_path / "again")
    make(ws, {"venv/lib/python3.11/site-packages/_pytest/runner.py": "x = 2\n"})
    found = changes_of(ws, base)
    assert list(found) == ["venv/lib/python3.11/site-packages/_pytest/runner.py"]
    assert found["venv/lib/python3.11/site-packages/_pytest/runner.py"].action == "restored"


def test_allowance_keeps_named_paths_only(ws: Path, tmp_path: Path) -> None:
    base = baseline(ws, tmp_path)
    make(ws, {"tests/conftest.py": "import pytest\n", "statkit/conftest.py": "x = 1\n"})
    allowance = HarnessAllowance.of((), ("statkit/*", "tests/conftest.py"))
    found = changes_of(ws, base, allowance)
    assert found["tests/conftest.py"].allowed and found["tests/conftest.py"].action == "kept"
    # `statkit/*` is a wildcard: it does not name the conftest, so it does not allow it.
    assert not found["statkit/conftest.py"].allowed
    assert [c.path for c in findings(list(found.values()))] == ["statkit/conftest.py"]
    explicit = HarnessAllowance.of(("statkit/conftest.py",))
    assert explicit.allows("statkit/conftest.py")


def test_plugin_files_join_the_baseline(ws: Path, tmp_path: Path) -> None:
    plugin = tmp_path / "plugin-conftest.py"
    plugin.write_text("import pytest\n")
    base = baseline(ws, tmp_path, extra={"tests/conftest.py": plugin})
    make(ws, {"tests/conftest.py": "import pytest\n"})  # as the plugin lands in the sandbox
    assert changes_of(ws, base) == {}


def test_the_state_after_placement_is_the_next_baseline(ws: Path, tmp_path: Path) -> None:
    base = baseline(ws, tmp_path)
    make(ws, {"conftest.py": "x = 1\n", "tests/conftest.py": "y = 1\n"})
    allowance = HarnessAllowance.of(("tests/conftest.py",))
    first = base.compare(ws, allowance)
    (ws / "conftest.py").unlink()  # what the placement does in the sandbox
    # While the commands ran, code under test wrote a conftest a later collection loads.
    make(ws, {"tests/sub/conftest.py": "z = 1\n", "tests/__pycache__/x.pyc": ""})
    during = first.after.compare(ws, allowance, during=True)
    assert [(c.path, c.during, c.action) for c in during.changes] == [
        ("tests/sub/conftest.py", True, "not restored")
    ]


def test_hidden_targets_are_hangars(ws: Path, tmp_path: Path) -> None:
    base = baseline(ws, tmp_path)
    make(ws, {"tests/hidden/conftest.py": "x = 1\n"})
    found = base.compare(ws, HarnessAllowance(), skip=frozenset({"tests/hidden"}))
    assert found.changes == []


def test_an_unreadable_folder_is_a_finding(
    ws: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = baseline(ws, tmp_path)
    walk = os.walk

    def refusing(top: str, onerror: object = None, **kw: object):  # type: ignore[no-untyped-def]
        # What os.walk does with a folder it may not list (root reads them all).
        onerror(PermissionError(13, "Permission denied", str(Path(top) / "locked")))  # type: ignore[operator]
        return walk(top, **kw)  # type: ignore[call-overload]

    monkeypatch.setattr("hangar.verifiers.harness.os.walk", refusing)
    found = base.compare(ws, HarnessAllowance())
    assert [c.path for c in findings(found.changes)] == ["locked"]
    assert "cannot read" in found.changes[0].what


def test_files_the_commands_name_are_harness(ws: Path, tmp_path: Path) -> None:
    make(ws, {"Makefile": "test:\n\tpytest\n", "scripts/check.sh": "pytest\n", "tox.ini": ""})
    commands = (
        "make -s test",
        "bash ./scripts/check.sh --fast",
        "tox -e py",
        "python3 -m pytest tests/test_stats.py::test_odd -c=setup.cfg",
        "cat /etc/passwd ../outside $HOME/x",
    )
    assert command_files(commands, ws) == (
        "Makefile",
        "scripts/check.sh",
        "tox.ini",
        "tests/test_stats.py",
        "setup.cfg",
    )
    base = baseline(ws, tmp_path, also=command_files(commands, ws))
    (ws / "Makefile").write_text("test:\n\ttrue\n")
    assert changes_of(ws, base)["Makefile"].action == "restored"


# -- signs of tampering ----------------------------------------------------------------------

DIFF = """diff --git a/tests/test_zz.py b/tests/test_zz.py
new file mode 100644
--- /dev/null
+++ b/tests/test_zz.py
@@ -0,0 +1,3 @@
+import statkit.stats
+statkit.stats.median = lambda v: 2.5
+def test_x(): pass
diff --git a/statkit/stats.py b/statkit/stats.py
--- a/statkit/stats.py
+++ b/statkit/stats.py
@@ -1,2 +1,3 @@
 def median(v):
+    import _pytest  # reaches into the runner
     return sorted(v)[len(v) // 2]
"""


def test_reading_the_callers_frame_is_a_sign(tmp_path: Path) -> None:
    make(tmp_path, {"statkit/stats.py": "import sys\ndef median(v):\n    f = sys._getframe(1)\n"})
    found = signs(tmp_path, ["statkit/stats.py"], None, known=set())
    assert [s.sign for s in found] == ["refers to `sys._getframe`, reads the frames of its callers"]


def test_added_lines_from_a_diff() -> None:
    assert added_lines(DIFF) == {"tests/test_zz.py": {1, 2, 3}, "statkit/stats.py": {2}}


def test_signs_on_added_lines(tmp_path: Path) -> None:
    ws = make(
        tmp_path,
        {
            "tests/test_zz.py": "import statkit.stats\nstatkit.stats.median = lambda v: 2.5\n"
            "def test_x(): pass\n",
            "statkit/stats.py": "def median(v):\n    import _pytest  # reaches into the runner\n"
            "    return sorted(v)[len(v) // 2]\n",
        },
    )
    found = signs(ws, ["tests/test_zz.py", "statkit/stats.py"], DIFF, known=set())
    assert [(s.path, s.line) for s in found] == [("tests/test_zz.py", 2), ("statkit/stats.py", 2)]
    assert "assigns `statkit.stats.median` at import" in found[0].sign
    # A repository that already uses the runner's internals (pytest, its plugins).
    assert signs(ws, ["statkit/stats.py"], DIFF, known={"_pytest"}) == []


@pytest.mark.parametrize(
    ("source", "sign"),
    [
        ("import os\nos._exit(0)\n", "leaves the process at import"),
        ("import sys\nif True:\n    sys.exit(0)\n", "leaves the process at import"),
        ("import statkit\nsetattr(statkit, 'median', len)\n", "calls `setattr` at import"),
        ("import sys\nsys.modules['statkit'] = None\n", "replaces a module in `sys.modules`"),
        ("def f(): pass\ndef test_x():\n    f.__code__ = len.__code__\n", "replaces the code"),
        ("import atexit\ndef test_x():\n    atexit.register(print)\n", "registers code to run"),
        ("import os\nX = os.environ['HANGAR_VERIFIER_OUT']\n", "`HANGAR_VERIFIER_OUT`"),
        ("class TestA:\n    import statkit\n    statkit.median = len\n", "assigns"),
        ("import base64\nexec(base64.b64decode('cGFzcw=='))\n", "runs code built at import"),
        ("import os\ndef test_x():\n    os._exit(0)\n", "refers to `os._exit`"),
        ("import sys\ndef test_x():\n    path = sys.argv[-1]\n", "refers to `sys.argv`"),
        ("def test_x():\n    open('/tmp/junit.xml', 'w')\n", "refers to `junit`"),
    ],
)
def test_import_time_signs_in_test_modules(tmp_path: Path, source: str, sign: str) -> None:
    make(tmp_path, {"tests/test_new.py": source})
    found = signs(tmp_path, ["tests/test_new.py"], None, known=set())
    assert any(sign in s.sign for s in found), found


@pytest.mark.parametrize(
    "source",
    [
        # pytest undoes these after each test.
        "def test_x(monkeypatch):\n    import statkit\n"
        "    monkeypatch.setattr(statkit, 'median', len)\n",
        "import os\nos.environ['X'] = '1'\nX = 1\n",
        "import pytest\npytestmark = pytest.mark.slow\n\ndef test_x():\n    assert 1\n",
    ],
)
def test_ordinary_test_modules_have_no_signs(tmp_path: Path, source: str) -> None:
    make(tmp_path, {"tests/test_new.py": source})
    assert signs(tmp_path, ["tests/test_new.py"], None, known=set()) == []


def test_what_counts_as_a_test_module() -> None:
    assert is_test_module("tests/test_x.py") and is_test_module("pkg/x_test.py")
    assert is_test_module("tests/__init__.py") and not is_test_module("statkit/__init__.py")
    assert not is_test_module("statkit/testing_utils.py")
