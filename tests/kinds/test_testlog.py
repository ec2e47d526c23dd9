"""The first failing test of a log, as pytest and unittest print them, and the line that
names the error: what a failed trial shows first."""

from __future__ import annotations

from hangar.kinds.execution.testlog import SECTION_LINES, first_error, first_failing_test

PYTEST = """============================= test session starts ==============================
collected 2 items

test_a.py .F                                                             [100%]

=================================== FAILURES ===================================
___________________________________ test_bad ___________________________________

    def test_bad():
        x = 3
>       assert x == 2.5
E       assert 3 == 2.5

test_a.py:5: AssertionError
__________________________________ test_later __________________________________
E       assert False
=========================== short test summary info ============================
FAILED test_a.py::test_bad - assert 3 == 2.5
========================= 1 failed, 1 passed in 0.01s ==========================
"""

UNITTEST = """.F
======================================================================
FAIL: test_hello_file (__main__.Greeting.test_hello_file)
----------------------------------------------------------------------
Traceback (most recent call last):
  File "/tests/test_greeting.py", line 11, in test_hello_file
    self.assertEqual(None, "Hello, world!")
AssertionError: None != 'Hello, world!'

----------------------------------------------------------------------
Ran 2 tests in 0.001s

FAILED (failures=1)
"""


def test_pytest_the_first_failure_section_only() -> None:
    found = first_failing_test(PYTEST)
    assert found is not None and found.name == "test_bad"
    assert "E       assert 3 == 2.5" in found.section and "test_a.py:5" in found.section
    assert "test_later" not in found.section and "short test summary" not in found.section


def test_unittest_the_traceback_without_the_summary() -> None:
    found = first_failing_test(UNITTEST)
    assert found is not None
    assert found.name == "FAIL: test_hello_file (__main__.Greeting.test_hello_file)"
    assert found.section.endswith("AssertionError: None != 'Hello, world!'")
    assert "Ran 2 tests" not in found.section


def test_a_passing_or_foreign_log_has_none() -> None:
    assert first_failing_test("==== 3 passed in 0.1s ====\n") is None
    assert first_failing_test("FAIL: not after a rule\n") is None
    assert first_error("all good\n") is None


def test_a_long_section_is_cut_in_the_middle() -> None:
    body = "\n".join(f"line {i}" for i in range(200))
    log = f"==== FAILURES ====\n____ test_long ____\n{body}\n==== 1 failed ====\n"
    found = first_failing_test(log)
    assert found is not None and len(found.section.splitlines()) == SECTION_LINES + 1
    assert "line 199" in found.section and "lines ..." in found.section


def test_the_error_that_explains_most_comes_first() -> None:
    log = "E   AssertionError: later\nE   ModuleNotFoundError: No module named 'pkg'\n"
    assert first_error(log) == "ModuleNotFoundError: No module named 'pkg'"
    assert first_error("x\nE   ValueError: bad value\n") == "E   ValueError: bad value"
    assert first_error("error: could not compile `crate`\n") == "error: could not compile `crate`"
