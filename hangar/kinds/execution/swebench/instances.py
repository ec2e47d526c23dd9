"""SWE-bench instances: imported as task folders, graded with the ``swebench`` package.

An instance (a JSONL line with the datasets' own fields: ``instance_id``, ``repo``,
``base_commit``, ``patch``, ``test_patch``, ``problem_statement``, ``hints_text``,
``version``, ``FAIL_TO_PASS``, ``PASS_TO_PASS`` as JSON-encoded lists, ...) becomes a
task folder in Harbor's layout (`write_task`), so that validation, trials, reports and
exports treat it as any image task:

- the workspace: ``https://github.com/{repo}.git`` (or what the repository map says) at
  ``base_commit``, at ``/testbed``; the image: the instance's environment image by
  SWE-bench's naming (``sweb.eval.x86_64.{id}:latest`` under a namespace), or a user
  image for the repository or ``repo@version``;
- the task text: ``problem_statement`` (the hints only when asked); the agent never sees
  ``patch`` or ``test_patch``;
- ``tests/test.sh``: the test files put back as they were at ``base_commit``, then
  ``test_patch`` applied, then the test command over those files (``pytest -rA`` unless
  the instance or the import says otherwise), its output in ``/logs/verifier``;
- grading on the host (`grade`): the log parsed by the package's parser for the
  repository (or the one named), one check per ``FAIL_TO_PASS`` and ``PASS_TO_PASS``
  test, ``resolved`` exactly as SWE-bench's ``get_resolution_status`` says it;
- ``solution/solve.sh`` applies ``patch``: the ``gold`` (oracle) agent.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from hangar.errors import ConfigError
from hangar.kinds.execution.images.rewards import Reward
from hangar.kinds.execution.images.task import SwebenchGrading
from hangar.kinds.execution.testlog import first_error
from hangar.results import CheckOutcome, Score
from hangar.validation import validation_message

WORKDIR = "/testbed"
#: How SWE-bench's own images activate their environment before the tests (an image
#: without conda, a user image, runs the tests as they are).
ACTIVATE = (
    "if [ -f /opt/miniconda3/bin/activate ]; then "
    "source /opt/miniconda3/bin/activate && conda activate testbed; fi"
)
MAX_LOG = 50 * 1024 * 1024


class Instance(BaseModel):
    """One SWE-bench instance, with the datasets' field names."""

    model_config = ConfigDict(extra="allow")

    instance_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    repo: str = Field(pattern=r"^[^/\s]+/[^/\s]+$")
    base_commit: str = Field(pattern=r"^[0-9a-f]{40}$")
    patch: str
    test_patch: str
    problem_statement: str
    hints_text: str = ""
    version: str = ""
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str] = Field(default_factory=list)
    environment_setup_commit: str = ""
    created_at: str = ""
    test_cmd: str | None = None
    log_parser: str | None = None
    eval_script: str | None = None
    """SWE-bench's own evaluation script for the instance (its datasets ship one: the
    repository's set-up, test command and test files), run as the harness runs it."""
    eval_type: Literal["pass_and_fail", "fail_only"] | None = None
    image: str | None = None
    """The instance's environment image, as its dataset names it."""

    @field_validator("FAIL_TO_PASS", "PASS_TO_PASS", mode="before")
    @classmethod
    def _listed(cls, value: object) -> object:
        """The datasets ship these as JSON-encoded lists."""
        if isinstance(value, str):
            try:
                return json.loads(value)
            except json.JSONDecodeError:
                raise ValueError("expected a list of test ids (or one JSON-encoded)") from None
        return value


class ImportOptions(BaseModel):
    """How instances become tasks (`hangar dataset import swebench`)."""

    repositories: dict[str, str] = Field(default_factory=dict)
    """``owner/name`` -> a mirror URL or a local path (default: GitHub)."""
    images: dict[str, str] = Field(default_factory=dict)
    """``owner/name`` or ``owner/name@version`` -> a user image (default: the
    instance's SWE-bench image)."""
    namespace: str | None = "swebench"
    """The registry namespace of SWE-bench's images (None: local names)."""
    tag: str = "latest"
    """Their tag."""
    hints: bool = False
    """Add ``hints_text`` to the task text."""
    test_cmd: str = "pytest -rA"
    """The test command, run on the test files (an instance's ``test_cmd`` wins)."""
    log_parser: str | None = None
    """A parser of the package's registry by name (an instance's ``log_parser`` wins)."""
    agent_timeout_s: float = 1800
    """The agent's time."""
    verifier_timeout_s: float = 1800
    """The tests' time."""


def read_instances(path: Path) -> list[Instance]:
    """The instances of a JSONL file; errors name the line and the field."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read it: {exc}") from None
    found = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            found.append(Instance.model_validate(json.loads(line)))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{where}: not a JSON object ({exc.msg})") from None
        except ValidationError as exc:
            raise ConfigError(validation_message(where, "SWE-bench instance", exc)) from None
    if not found:
        raise ConfigError(f"{path}: no instances in it")
    return found


def image_name(instance_id: str, namespace: str | None, tag: str) -> str:
    """The instance's environment image, by SWE-bench's own naming."""
    from swebench.image_builder.image_spec import ImageSpec

    spec = ImageSpec(instance_id=instance_id, dockerfile="-", namespace=namespace, tag=tag)
    return str(spec.name)


def patched_files(test_patch: str) -> list[str]:
    """The files a test patch touches (as SWE-bench runs them)."""
    return list(dict.fromkeys(re.findall(r"^diff --git a/\S+ b/(\S+)$", test_patch, re.M)))


def _new_files(test_patch: str) -> set[str]:
    files = re.findall(r"^diff --git a/\S+ b/(\S+)\nnew file mode", test_patch, re.M)
    return set(files)


def write_task(instance: Instance, out: Path, options: ImportOptions) -> Path:
    """The task folder of `instance` under `out` (see the module docstring)."""
    import tomli_w

    folder = out / instance.instance_id
    for sub in ("tests", "solution"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    user_image = options.images.get(f"{instance.repo}@{instance.version}") or options.images.get(
        instance.repo
    )
    image = (
        user_image
        or instance.image
        or image_name(instance.instance_id, options.namespace, options.tag)
    )
    repository = options.repositories.get(instance.repo, f"https://github.com/{instance.repo}.git")
    if "://" not in repository and not Path(repository).is_absolute():
        repository = str(Path(repository).resolve())
    text = instance.problem_statement
    if options.hints and instance.hints_text.strip():
        text += "\n\nHints:\n\n" + instance.hints_text
    (folder / "instruction.md").write_text(text.rstrip() + "\n")
    (folder / "tests" / "test.patch").write_text(instance.test_patch)
    (folder / "solution" / "gold.patch").write_text(instance.patch)
    if instance.eval_script:
        (folder / "tests" / "eval.sh").write_text(harness_script(instance, image))
        (folder / "tests" / "test.sh").write_text(HARNESS_TEST)
    else:
        command = instance.test_cmd or options.test_cmd
        (folder / "tests" / "test.sh").write_text(_test_script(instance, command))
    (folder / "solution" / "solve.sh").write_text(
        f"#!/bin/bash\nset -e\ncd {WORKDIR}\ngit apply --whitespace=nowarn /solution/gold.patch\n"
    )
    grading = SwebenchGrading(
        instance_id=instance.instance_id,
        repo=instance.repo,
        version=instance.version,
        fail_to_pass=tuple(instance.FAIL_TO_PASS),
        pass_to_pass=tuple(instance.PASS_TO_PASS),
        log_parser=instance.log_parser or options.log_parser or "",
        eval_type=instance.eval_type or "",
    )
    (folder / "task.toml").write_text(
        tomli_w.dumps(
            {
                "schema_version": "1.3",
                "task": {"name": instance.instance_id, "description": f"{instance.repo}"},
                "metadata": {
                    "hangar": {
                        "repository": repository,
                        "revision": instance.base_commit,
                        "workdir": WORKDIR,
                    },
                    # (an instance without its own evaluation keeps its task's bytes)
                    "swebench": grading.model_dump(
                        mode="json", exclude=set() if grading.eval_type else {"eval_type"}
                    ),
                },
                "agent": {"timeout_sec": options.agent_timeout_s},
                "verifier": {"timeout_sec": options.verifier_timeout_s},
                "environment": {"docker_image": image},
            }
        )
    )
    return folder


#: test.sh of an instance with SWE-bench's own evaluation script: run it, its output the log.
HARNESS_TEST = (
    "#!/bin/bash\n"
    "bash /tests/eval.sh > /logs/verifier/test_output.txt 2>&1\n"
    "echo $? > /logs/verifier/test_exit_code\n"
)


def harness_script(instance: Instance, image: str) -> str:
    """The instance's evaluation script as SWE-bench's harness runs it (the package's
    `make_test_spec`: the test command's own exit status recorded after its output)."""
    from swebench.harness.utils import make_test_spec

    spec = make_test_spec(
        {
            "instance_id": instance.instance_id,
            "image": image,
            "repo": instance.repo,
            "version": instance.version,
            "FAIL_TO_PASS": instance.FAIL_TO_PASS,
            "PASS_TO_PASS": instance.PASS_TO_PASS,
            "log_parser": instance.log_parser or "",
            "eval_type": instance.eval_type or "pass_and_fail",
            "eval_script": instance.eval_script,
        }
    )
    return str(spec.eval_script)


def _test_script(instance: Instance, command: str) -> str:
    """test.sh: the test files as at base_commit, the test patch, the tests."""
    files = patched_files(instance.test_patch)
    existing = [f for f in files if f not in _new_files(instance.test_patch)]
    git = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false"
    lines = ["#!/bin/bash", ACTIVATE, f"cd {WORKDIR}"]
    if existing:
        lines.append(f"{git} checkout -q {instance.base_commit} -- {shlex.join(existing)}")
    new = sorted(_new_files(instance.test_patch))
    if new:
        lines.append(f"rm -rf -- {shlex.join(new)}")
    lines += [
        f"{git} apply --whitespace=nowarn /tests/test.patch "
        '|| echo ">>>>> Patch Apply Failed" > /logs/verifier/test_output.txt',
        f"{command} {shlex.join(files)} > /logs/verifier/test_output.txt 2>&1",
        "echo $? > /logs/verifier/test_exit_code",
        "",
    ]
    return "\n".join(lines)


def imported(path: Path, cache: Path) -> list[Path]:
    """The task folders of a JSONL file named in a sweep: imported with the default
    options once per version of the file, under `cache` (the sweep's image and repository
    maps then rewrite what they name)."""
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:24]
    out = cache / "swebench" / digest
    if not (out / ".complete").exists():
        import_instances(path, out, ImportOptions())
        (out / ".complete").touch()
    return sorted(p for p in out.iterdir() if (p / "task.toml").is_file())


def import_instances(path: Path, out: Path, options: ImportOptions) -> list[Path]:
    """Every instance of the JSONL file `path` as a task folder under `out`."""
    instances = read_instances(path)
    seen: set[str] = set()
    for instance in instances:
        if instance.instance_id in seen:
            raise ConfigError(f"{path}: instance {instance.instance_id!r} appears twice")
        seen.add(instance.instance_id)
    return [write_task(i, out, options) for i in instances]


class Graded(NamedTuple):
    """A graded SWE-bench run: the reward and scores, one check per test, the report."""

    reward: Reward
    checks: tuple[CheckOutcome, ...]
    report: dict[str, Any]


def parser_for(grading: SwebenchGrading) -> Any:
    """The package's log parser: the named one, the repository's, or pytest's."""
    from swebench.harness.log_parsers import (
        PARSER_REGISTRY,
        c,
        go,
        java,
        javascript,
        php,
        python,
        ruby,
        rust,
    )

    if grading.log_parser:
        if grading.log_parser not in PARSER_REGISTRY:
            raise ConfigError(
                f"{grading.instance_id}: no log parser {grading.log_parser!r} in swebench "
                f"(known: {', '.join(sorted(PARSER_REGISTRY))})"
            )
        return PARSER_REGISTRY[grading.log_parser]
    maps: dict[str, Any] = {}
    for module in (python, javascript, c, go, java, php, ruby, rust):
        for name, value in vars(module).items():
            if name.startswith("MAP_REPO_TO_PARSER"):
                maps.update(value)
    return maps.get(grading.repo, python.parse_log_pytest)


def grade(grading: SwebenchGrading, log: Path) -> Graded:
    """Grade the test log at `log` as SWE-bench does (see the module docstring)."""
    from swebench.harness.constants import FAIL_TO_PASS, PASS_TO_PASS, EvalType, ResolvedStatus
    from swebench.harness.grading import get_eval_tests_report, get_resolution_status
    from swebench.types import TestSpec

    evidence = (f"logs/verifier/{grading.log}",)
    text = _read_log(log)
    if text is None:
        return Graded(Reward(None, problem="the test script wrote no test log"), (), {})
    spec = TestSpec(
        instance_id=grading.instance_id,
        image="",
        eval_script_list=[],
        repo=grading.repo,
        version=grading.version,
        FAIL_TO_PASS=list(grading.fail_to_pass),
        PASS_TO_PASS=list(grading.pass_to_pass),
    )
    statuses, problem = _statuses(grading, text, spec)
    gold = {FAIL_TO_PASS: list(grading.fail_to_pass), PASS_TO_PASS: list(grading.pass_to_pass)}
    report = get_eval_tests_report(
        statuses, gold, eval_type=EvalType(grading.eval_type or "pass_and_fail")
    )
    resolution = get_resolution_status(report)
    resolved = resolution == ResolvedStatus.FULL.value
    checks = tuple(
        _checks(report, FAIL_TO_PASS, evidence) + _checks(report, PASS_TO_PASS, evidence)
    )
    share = {
        key: len(report[key]["success"]) / max(1, len(gold[key]))
        for key in (FAIL_TO_PASS, PASS_TO_PASS)
    }
    value = float(resolved)
    scores = (
        Score(metric="reward", value=value, scale="points", low=0.0, high=1.0),
        Score(metric="resolved", value=value),
        Score(metric="fail_to_pass", value=share[FAIL_TO_PASS], scale="points", low=0.0, high=1.0),
        Score(metric="pass_to_pass", value=share[PASS_TO_PASS], scale="points", low=0.0, high=1.0),
    )
    failing = [t for key in gold for t in report[key]["failure"]]
    full = {
        "resolution": resolution,
        "tests_status": report,
        "statuses_parsed": len(statuses),
        # Why, for people: failing tests the log never reports (they did not run) and the
        # log's first error line (an import that failed says more than the test names).
        "not_run": [t for t in failing if t not in statuses],
        "log_error": first_error(text) if failing else None,
        "harness_problem": problem,
        "collected_none": bool(_COLLECTED_NONE.search(text)),
    }
    return Graded(Reward(value, scores), checks, full)


def _statuses(grading: SwebenchGrading, text: str, spec: Any) -> tuple[dict[str, str], str | None]:
    """The tests' statuses in the log, and what makes a harness log unusable (None when
    nothing does). A log of SWE-bench's own evaluation script (its output between the
    harness's markers) is read by the package's `get_logs_eval`, as the harness reads it:
    a test patch that did not apply, tests that errored or timed out, or an exit status
    the log contradicts leave no statuses."""
    from swebench.harness import constants
    from swebench.harness.grading import get_logs_eval
    from swebench.harness.log_parsers import PARSER_REGISTRY

    parser = parser_for(grading)
    if constants.START_TEST_OUTPUT not in text:
        return parser(text, spec), None
    spec.log_parser = grading.log_parser or next(
        (name for name, fn in PARSER_REGISTRY.items() if fn is parser), "parse_log_pytest"
    )
    with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as copy:
        copy.write(text)  # the capped text, never the file the tests wrote
        copy.flush()
        statuses, usable = get_logs_eval(spec, copy.name)
    if usable:
        return statuses, None
    codes = {
        constants.APPLY_PATCH_FAIL: "the test patch did not apply",
        constants.RESET_FAILED: "the repository could not be reset",
        constants.TESTS_ERROR: "the tests errored",
        constants.TESTS_TIMEOUT: "the tests timed out",
    }
    found = [words for code, words in codes.items() if code in text]
    if found:
        return {}, "; ".join(found)
    if constants.END_TEST_OUTPUT not in text:
        return {}, "the test command did not finish (no end of its output in the log)"
    return {}, "the test command's exit status contradicts its log (no test reported failing)"


#: pytest's words when it collected nothing (or errors only).
_COLLECTED_NONE = re.compile(r"^collected 0 items|^no tests ran", re.M)
_IMPORT_ERROR = re.compile(r"ImportError|ModuleNotFoundError")


def failing_words(checks: Sequence[CheckOutcome], report: dict[str, Any]) -> str:
    """Why an instance is not resolved, in words: a run whose log is unusable, or in
    which no test ran, says so; otherwise the failing tests (five named), those the test
    log never reports, and the log's first error line."""
    if report.get("harness_problem"):
        return f"{report['harness_problem']} (SWE-bench's evaluation script)"
    error = report.get("log_error") or ""
    if report.get("statuses_parsed") == 0 or report.get("collected_none"):
        runner = "pytest collected no test" if report.get("collected_none") else "no test ran"
        if _IMPORT_ERROR.search(error):
            return f"{runner}: the package could not be imported ({error})"
        return f"{runner}: " + (f"the test log says: {error}" if error else "the log names none")
    failing = [c.requirement for c in checks if c.status != "pass"]
    more = f" and {len(failing) - 5} more" if len(failing) > 5 else ""
    words = "failing " + ", ".join(failing[:5]) + more
    not_run = report.get("not_run") or []
    if not_run:
        which = "none of them is" if len(not_run) == len(failing) else f"{len(not_run)} not"
        words += f" ({which} in the test log: they did not run)"
    if report.get("log_error"):
        words += f"; the test log says: {report['log_error']}"
    return words


def _checks(report: dict[str, Any], key: str, evidence: tuple[str, ...]) -> list[CheckOutcome]:
    passed = set(report[key]["success"])
    tests = list(report[key]["success"]) + list(report[key]["failure"])
    return [
        CheckOutcome(
            requirement=f"{key} {test}",
            status="pass" if test in passed else "fail",
            evidence=evidence,
        )
        for test in tests
    ]


def _read_log(path: Path) -> str | None:
    """The log if it is a regular file (never through a link), its first `MAX_LOG` bytes."""
    if path.is_symlink() or not path.is_file():
        return None
    with path.open("rb") as f:
        return f.read(MAX_LOG).decode("utf-8", errors="replace")


def predictions(rows: Iterable[tuple[str, str, str]]) -> list[dict[str, str]]:
    """SWE-bench's predictions format from (instance id, model name, patch) rows."""
    return [{"instance_id": i, "model_name_or_path": m, "model_patch": p} for i, m, p in rows]
