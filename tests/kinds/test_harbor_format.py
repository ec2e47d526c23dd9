"""Harbor task directories read into image tasks, rewards, and FROM mapping (no docker)."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime
from pathlib import Path

import pytest

from hangar.errors import ConfigError
from hangar.kinds.execution.harbor.tasks import load_task, task_files
from hangar.kinds.execution.images.rewards import read_reward
from hangar.kinds.execution.images.validate import judge_task, partition
from hangar.results import TrialResult, Verdict
from hangar.sandbox.task_images import context_tag, map_dockerfile

NOW = datetime.now(UTC)
DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"


def make_task(root: Path, toml: str, *, instruction: str = "Do it.\n", name: str = "t") -> Path:
    """A task folder with `toml` as its task.toml, a Dockerfile and a test script."""
    folder = root / name
    (folder / "environment").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "task.toml").write_text(toml)
    (folder / "instruction.md").write_text(instruction)
    (folder / "environment" / "Dockerfile").write_text("FROM ubuntu:24.04\nWORKDIR /app\n")
    (folder / "tests" / "test.sh").write_text("echo 1 > /logs/verifier/reward.txt\n")
    return folder / "task.toml"


def test_the_example_dataset_loads_with_each_field_mapped() -> None:
    tasks = {load_task(p).id: load_task(p) for p in task_files(DATASET)}
    assert set(tasks) == {"hello-file", "fix-median", "count-lines", "count-words", "broken-tests"}
    words = tasks["count-words"]
    assert words.verifier.network.mode == "allowlist"
    assert words.verifier.network.allowed_hosts == ("localhost:8799",)
    assert words.agent_network.mode == "no-network" and not words.blocked
    hello = tasks["hello-file"]
    assert hello.title == "hangar-examples/hello-file"
    assert hello.instruction.startswith("Create the file `/app/hello.txt`")
    assert hello.limits.time_s == 120 and hello.limits.cpus == 1
    assert hello.limits.memory == 512 * 1024**2 and hello.limits.disk == 256 * 1024**2
    assert hello.verifier.timeout_s == 60 and hello.verifier.user == "root"
    assert hello.agent_user == "root" and hello.image.context == "environment"
    assert hello.solution is not None and not hello.blocked and not hello.notes
    # the deprecated spellings of sizes (schema 1.2)
    median = tasks["fix-median"]
    assert median.limits.memory == 1024**3 and median.limits.disk == 512 * 1024**2
    separate = tasks["count-lines"].verifier
    assert separate.mode == "separate" and separate.cpus is None
    assert [(a.source, a.target) for a in separate.artifacts] == [
        ("/tmp/answer.json", "/tmp/answer.json")
    ]


def test_a_task_version_is_every_byte_of_its_folder_and_its_image_map(tmp_path: Path) -> None:
    shutil.copytree(DATASET / "hello-file", tmp_path / "hello-file")
    before = load_task(tmp_path / "hello-file" / "task.toml")
    (tmp_path / "hello-file" / "tests" / "test.sh").write_text("echo 0\n")
    after = load_task(tmp_path / "hello-file" / "task.toml")
    assert before.digest != after.digest
    mapped = after.configured(image_map={"ubuntu:*": "hangar/base:bookworm-stock"}, threshold=None)
    assert mapped.digest != after.digest
    assert mapped.mapped("ubuntu:24.04") == "hangar/base:bookworm-stock"
    assert mapped.mapped("alpine:3") == "alpine:3"
    assert mapped.configured(image_map=mapped.image_map, threshold=0.5).threshold == 0.5


@pytest.mark.parametrize(
    ("toml", "reason"),
    [
        ("[environment]\ngpus = 1\n", "GPUs"),
        ('[environment]\nos = "windows"\n', "only Linux"),
        ("[[steps]]\nname = 'a'\n[verifier]\nenvironment_mode = 'separate'\n", "separate"),
        (
            "[[environment.mcp_servers]]\nname = 'x'\nurl = 'https://mcp.example.com/sse'\n",
            "mcp.example.com is not a service of the task",
        ),
        (
            "[[environment.mcp_servers]]\nname = 'x'\nurl = 'http://localhost:1/mcp'\n"
            "headers = {Authorization = 'Bearer ${TOKEN}'}\n",
            "headers are not passed",
        ),
        ('[agent]\nnetwork_mode = "allowlist"\n', "agent's allowlist network names no"),
    ],
)
def test_what_cannot_be_honoured_blocks_the_task(tmp_path: Path, toml: str, reason: str) -> None:
    path = make_task(tmp_path, toml)
    (path.parent / "steps" / "a" / "tests").mkdir(parents=True)
    (path.parent / "steps" / "a" / "instruction.md").write_text("Step a.\n")
    task = load_task(path)
    assert any(reason in b for b in task.blocked), task.blocked


def test_healthcheck_and_skills_dir_are_read(tmp_path: Path) -> None:
    toml = (
        '[environment]\nskills_dir = "/skills"\n'
        '[environment.healthcheck]\ncommand = "test -f /ready"\nretries = 5\n'
    )
    task = load_task(make_task(tmp_path, toml))
    assert not task.blocked and task.skills_dir == "/skills"
    assert task.healthcheck is not None
    assert (task.healthcheck.command, task.healthcheck.retries) == ("test -f /ready", 5)
    assert task.healthcheck.interval_s == 5.0  # Harbor's default
    plain = load_task(make_task(tmp_path / "plain", ""))
    assert plain.digest != task.digest


def test_steps_are_read_with_their_folders(tmp_path: Path) -> None:
    toml = (
        'multi_step_reward_strategy = "final"\n[verifier]\ntimeout_sec = 30\n'
        '[[steps]]\nname = "one"\nmin_reward = 0.5\n[steps.agent]\ntimeout_sec = 9\n'
        '[[steps]]\nname = "two"\n[steps.verifier]\ntimeout_sec = 7\n'
        '[steps.verifier.env]\nX = "1"\n'
    )
    path = make_task(tmp_path, toml)
    with pytest.raises(ConfigError, match=r"\[\[steps\]\] 'one': no folder"):
        load_task(path)
    for name in ("one", "two"):
        (path.parent / "steps" / name / "tests").mkdir(parents=True)
        (path.parent / "steps" / name / "instruction.md").write_text(f"Step {name}.\n")
    (path.parent / "steps" / "two" / "workdir").mkdir()
    task = load_task(path)
    assert [s.name for s in task.steps] == ["one", "two"] and task.step_reward == "final"
    one, two = task.steps
    assert (one.time_s, one.min_reward, one.workdir) == (9, {"reward": 0.5}, None)
    assert (two.verifier.timeout_s, two.verifier.env, two.workdir) == (
        7,
        {"X": "1"},
        "steps/two/workdir",
    )
    assert two.verifier.tests == "steps/two/tests" and two.shared_tests == "tests"
    assert task.instruction == "Step one.\n" and task.at_step(1).instruction == "Step two.\n"
    assert task.at_step(0).limits.time_s == 9 and task.at_step(1).limits.time_s == 600
    assert "steps/one/tests/test.sh is missing" in " ".join(task.blocked)


def _compose(tmp_path: Path, text: str) -> Path:
    path = make_task(tmp_path, "")
    (path.parent / "environment" / "db").mkdir()
    (path.parent / "environment" / "docker-compose.yaml").write_text(text)
    return path


def test_a_compose_file_gives_services(tmp_path: Path) -> None:
    path = _compose(
        tmp_path,
        "services:\n"
        "  main:\n    depends_on: {web: {condition: service_healthy}}\n    cpus: 4\n"
        "  web:\n    image: nginx:1\n    command: nginx -g 'daemon off;'\n"
        "    depends_on: [db]\n    environment: [A=1, B=x=y]\n    expose: ['80']\n"
        "    healthcheck: {test: curl -f localhost, interval: 1m30s, timeout: 500ms}\n"
        "  db:\n    build: ./db\n    mem_limit: 256m\n",
    )
    task = load_task(path)
    assert not task.blocked and task.service_waits == {"web": "healthy"}
    db, web = task.services  # each after what it depends on
    assert db.image.context == "environment/db" and db.memory == 256 * 1024**2
    assert web.command == ("nginx", "-g", "daemon off;") and web.env == {"A": "1", "B": "x=y"}
    assert web.healthcheck is not None and web.healthcheck.test == (
        "CMD-SHELL",
        "curl -f localhost",
    )
    assert (web.healthcheck.interval_s, web.healthcheck.timeout_s) == (90.0, 0.5)
    assert any("services.web.expose: ignored" in n for n in task.notes)
    assert any("services.main.cpus" in n for n in task.notes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("services:\n  a:\n    image: x\n    ports: ['80:80']\n", "services.a: `ports` is not"),
        ("services:\n  a:\n    image: x\n    privileged: true\n", "`privileged` is not"),
        ("services:\n  a:\n    image: x\nvolumes:\n  data: {}\n", "top-level `volumes`"),
    ],
)
def test_what_reaches_past_the_trial_blocks_a_compose_task(
    tmp_path: Path, text: str, message: str
) -> None:
    task = load_task(_compose(tmp_path, text))
    assert any(message in b for b in task.blocked), task.blocked


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("services: [a]\n", "a mapping with `services:`"),
        ("services:\n  a:\n    image: x\n    depends_on: [b]\n", "no service 'b'"),
        (
            "services:\n  a: {image: x, depends_on: [b]}\n  b: {image: x, depends_on: [a]}\n",
            "a cycle",
        ),
        ("services:\n  a:\n    build: ../../..\n", "is not a folder of the task"),
        ("services:\n  a: {image: x, healthcheck: {test: [CMD, x], interval: soon}}\n", "duration"),
        ("services:\n  a: {}\n", "give `build`"),
    ],
)
def test_a_broken_compose_file_says_what_to_fix(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_task(_compose(tmp_path, text))


def test_an_mcp_server_without_its_address_says_what_to_fix(tmp_path: Path) -> None:
    path = make_task(tmp_path, "[[environment.mcp_servers]]\nname = 'x'\ntransport = 'stdio'\n")
    with pytest.raises(ConfigError, match="a stdio server needs `command`"):
        load_task(path)
    path.write_text("[[environment.mcp_servers]]\nname = 'x'\ntransport = 'http'\n")
    with pytest.raises(ConfigError, match="streamable-http needs `url`"):
        load_task(path)


def test_on_another_backend_each_docker_feature_is_a_reason(tmp_path: Path) -> None:
    from hangar.agents import ORACLE
    from hangar.kinds.execution import single_trial
    from hangar.kinds.execution.images.backends import backend_problems
    from hangar.results import Verdict
    from hangar.trials import Arm, run_trial

    task = load_task(make_task(tmp_path, ""))
    assert backend_problems(task, "docker") == []
    reasons = backend_problems(task, "kubernetes")
    assert any("snapshot of the agent's sandbox" in r for r in reasons)
    assert any("give the sweep a `registry`" in r for r in reasons)
    assert any(r.startswith("the agent runs as root") for r in reasons)
    separate = load_task(
        make_task(
            tmp_path / "s",
            '[verifier]\nenvironment_mode = "separate"\nuser = "tester"\n'
            '[agent]\nuser = "agent"\n[environment]\ndocker_image = "python:3.12"\n',
        )
    )
    left = backend_problems(separate, "kubernetes")
    assert len(left) == 2  # no other feature holds it back
    assert "observer" in left[0] and "hand-over" in left[1]
    spec = single_trial(
        task,
        ORACLE,
        Arm(name="control"),
        backend="kubernetes",
        evidence_url=(tmp_path / "e").as_uri(),
    ).model_copy(update={"work_root": tmp_path / "trials", "cache_root": tmp_path / "cache"})
    result = run_trial(spec)  # refused at admission: no cluster is needed to say why
    assert result.verdict is Verdict.BLOCKED_SETUP
    assert "snapshot of the agent's sandbox" in result.reason and "runs as root" in result.reason


def test_a_separate_verifier_has_its_own_sizes(tmp_path: Path) -> None:
    toml = (
        '[verifier]\nenvironment_mode = "separate"\n'
        "[verifier.environment]\ncpus = 2\nmemory_mb = 3072\n"
    )
    verifier = load_task(make_task(tmp_path, toml)).verifier
    assert (verifier.cpus, verifier.memory) == (2, 3072 * 1024**2)


def test_compose_tasks_without_a_main_image_and_tasks_without_tests_are_blocked(
    tmp_path: Path,
) -> None:
    path = make_task(tmp_path, "")
    (path.parent / "environment" / "Dockerfile").unlink()
    (path.parent / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    (path.parent / "tests" / "test.sh").unlink()
    blocked = " ".join(load_task(path).blocked)
    assert "without environment/Dockerfile" in blocked and "tests/test.sh is missing" in blocked


def test_a_public_agent_network_is_noted_and_unknown_fields_are_named(tmp_path: Path) -> None:
    task = load_task(make_task(tmp_path, '[agent]\nnetwork_mode = "public"\nfoo = 1\nbar = 2\n'))
    assert not task.blocked
    assert "the agent asks for a public network: here it has none" in task.notes
    assert "[agent] foo: unknown field, ignored" in task.notes


@pytest.mark.parametrize(
    ("toml", "mode", "refused"),
    [
        ("", "public", False),  # Harbor's default: public, not asked for in so many words
        ('[verifier]\nnetwork_mode = "public"\n', "public", True),
        ("[environment]\nallow_internet = true\n", "public", True),
        ("[environment]\nallow_internet = false\n", "no-network", False),
        ('[environment]\nnetwork_mode = "no-network"\n', "no-network", False),
    ],
)
def test_a_verifier_s_network(tmp_path: Path, toml: str, mode: str, refused: bool) -> None:
    network = load_task(make_task(tmp_path, toml)).verifier.network
    assert (network.mode, network.refused) == (mode, refused)
    # a public network is every named host through the proxy, only where the sweep allows
    assert network.hosts(allow_public=True) == (("*:*",) if mode == "public" else None)
    assert network.hosts(allow_public=False) is None


@pytest.mark.parametrize(
    ("toml", "words"),
    [
        ('schema_version = "2.0"\n', ["task.toml", "schema_version", "1.0, 1.1, 1.2, 1.3, 1.4"]),
        ("[agent]\ntimeout_sec = -1\n", ["task.toml", "agent.timeout_sec", "greater than 0"]),
        ("[agent\n", ["task.toml", "not valid TOML"]),
        ('[verifier]\nenvironment_mode = "sideways"\n', ["environment_mode", "'separate'"]),
        ('artifacts = ["relative/path"]\n', ["artifacts", "absolute"]),
        ('[environment]\nmemory = "lots"\n', ["[environment]", "not a size"]),
    ],
)
def test_bad_task_files_say_what_to_fix(tmp_path: Path, toml: str, words: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        load_task(make_task(tmp_path, toml))
    for word in words:
        assert word in str(caught.value)


def test_a_task_needs_its_text_and_an_image(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="task text is empty"):
        load_task(make_task(tmp_path, "", instruction="  \n"))
    path = make_task(tmp_path, "", name="u")
    (path.parent / "environment" / "Dockerfile").unlink()
    with pytest.raises(ConfigError, match="docker_image"):
        load_task(path)
    (path.parent / "instruction.md").unlink()
    with pytest.raises(ConfigError, match=r"no instruction\.md"):
        load_task(path)


def test_rewards_are_read_as_scores(tmp_path: Path) -> None:
    (tmp_path / "reward.txt").write_text("0.25\n")
    reward = read_reward(tmp_path)
    assert reward.value == 0.25 and [s.metric for s in reward.scores] == ["reward"]
    assert reward.scores[0].scale == "points" and reward.scores[0].high == 1.0
    (tmp_path / "reward.json").write_text('{"a": 1, "b": 0.5}')
    named = read_reward(tmp_path)  # the json wins; no "reward" entry: the mean
    assert named.value == 0.75 and {s.metric for s in named.scores} == {"reward", "a", "b"}


@pytest.mark.parametrize(
    ("name", "text", "problem"),
    [
        ("reward.txt", "1.5", "outside 0..1"),
        ("reward.txt", "nan", "outside 0..1"),
        ("reward.txt", "yes", "not one number"),
        ("reward.json", "[1]", "must map names to numbers"),
        ("reward.json", '{"a": "1"}', "not a number"),
        ("reward.json", '{"a": true}', "not a number"),
        ("reward.json", "{", "not JSON"),
    ],
)
def test_a_malformed_reward_is_a_named_problem(
    tmp_path: Path, name: str, text: str, problem: str
) -> None:
    (tmp_path / name).write_text(text)
    reward = read_reward(tmp_path)
    assert reward.value is None and problem in reward.problem


def test_a_missing_or_linked_reward_is_no_reward(tmp_path: Path) -> None:
    assert "neither reward.txt nor reward.json" in read_reward(tmp_path).problem
    (tmp_path / "elsewhere").write_text("1")
    os.symlink(tmp_path / "elsewhere", tmp_path / "reward.txt")
    assert read_reward(tmp_path).value is None
    (tmp_path / "reward.txt").unlink()
    (tmp_path / "reward.txt").mkdir()
    assert "not a regular file" in read_reward(tmp_path).problem


def test_from_lines_are_mapped_but_not_stage_names() -> None:
    text = (
        "FROM --platform=linux/amd64 python:3.11 AS build\n"
        "RUN echo hi\n"
        "FROM build\n"
        "from ubuntu:24.04\n"
        "COPY --from=build /a /a\n"
    )
    mapping = {"python:3.11": "py-local", "ubuntu:24.04": "u-local", "build": "never"}
    out = map_dockerfile(text, lambda ref: mapping.get(ref, ref))
    assert out.splitlines() == [
        "FROM --platform=linux/amd64 py-local AS build",
        "RUN echo hi",
        "FROM build",
        "from u-local",
        "COPY --from=build /a /a",
    ]


def test_an_image_tag_is_the_digest_of_its_context(tmp_path: Path) -> None:
    (tmp_path / "Dockerfile").write_text("FROM x\n")
    one = context_tag("My Task", tmp_path, "FROM x\n")
    assert one.startswith("hangar-task/my-task:")
    assert one == context_tag("My Task", tmp_path, "FROM x\n")
    assert one != context_tag("My Task", tmp_path, "FROM y\n")
    (tmp_path / "data").write_text("1")
    assert one != context_tag("My Task", tmp_path, "FROM x\n")


def _result(task_digest: str, agent: str, verdict: Verdict, reason: str = "") -> TrialResult:
    return TrialResult(
        sweep="v",
        trial_key=f"{agent}{verdict}{reason}",
        scenario_id="t",
        scenario_digest=task_digest,
        agent=agent,
        model="none",
        arm="control",
        verdict=verdict,
        reason=reason,
        started_at=NOW,
        finished_at=NOW,
    )


def test_validation_rules() -> None:
    task = load_task(DATASET / "hello-file" / "task.toml")
    d, P, F = task.digest, Verdict.PASS, Verdict.FAIL

    def judged(*results: TrialResult, repeats: int = 1) -> tuple[str, str]:
        v = judge_task(task, results, repeats)
        return v.status, v.reason

    assert judged(_result(d, "oracle", P), _result(d, "nop", F))[0] == "valid"
    assert judged(_result(d, "oracle", F, "reward 0"), _result(d, "nop", F)) == (
        "broken",
        "the oracle fails: reward 0",
    )
    assert "nop agent passes" in judged(_result(d, "oracle", P), _result(d, "nop", P))[1]
    flaky = judged(
        _result(d, "oracle", P, "1"),
        _result(d, "oracle", F, "2"),
        _result(d, "nop", F, "1"),
        _result(d, "nop", F, "2"),
        repeats=2,
    )
    assert flaky == ("broken", "flaky: the oracle passes in 1 of 2")
    blocked = judged(_result(d, "oracle", Verdict.BLOCKED_SETUP, "image: failed"))
    assert blocked == ("broken", "cannot run: image: failed")
    assert judged(_result(d, "oracle", P))[0] == "unvalidated"
    assert judged(_result("other", "oracle", P), _result("other", "nop", F))[0] == "unvalidated"
    kept = partition([task], {d: {"status": "broken", "reason": "x"}})
    assert not kept.run and kept.left_out[0].status == "broken"
    assert partition([task], {d: {"status": "valid", "reason": ""}}).run == [task]
    assert partition([task], {}).left_out[0].status == "unvalidated"


def test_validate_fails_when_a_task_does_not_load(tmp_path: Path) -> None:
    """Tasks that do not load are broken, in the table and the exit status, not only a
    line on stderr."""
    from typer.testing import CliRunner

    from hangar.cli import app

    for name in ("bad-one", "bad-two"):
        (tmp_path / "dataset" / name).mkdir(parents=True)
        (tmp_path / "dataset" / name / "task.toml").write_text("[agent\ntimeout_sec = 1\n")
    (tmp_path / "sweep.yaml").write_text(
        f"id: ds\nscenarios: [dataset]\nagents: {{nop: {{kind: reference, role: nop}}}}\n"
        f"models: [none]\nstore: sqlite:///{tmp_path}/r.db\n"
    )
    out = CliRunner().invoke(app, ["dataset", "validate", str(tmp_path / "sweep.yaml")])
    assert out.exit_code == 1, out.output
    assert out.output.count("does not load") == 2
    assert "0 valid, 0 broken, 0 not validated yet, 2 not loading" in out.output


def test_a_sweep_names_harbor_tasks_and_swebench_instances_as_such() -> None:
    from hangar.scheduler.sweep import load_sweep

    examples = Path(__file__).resolve().parents[2] / "examples"
    harbor = load_sweep(examples / "harbor" / "sweep.yaml").breakdown()
    assert {t["kind"] for t in harbor} == {"Harbor tasks"}
    swebench = load_sweep(examples / "swebench" / "sweep.yaml").breakdown()
    assert {t["kind"] for t in swebench} == {"SWE-bench instances"}
    scenarios = load_sweep(examples / "sweep.yaml").breakdown()
    assert {t["kind"] for t in scenarios} == {"execution scenarios"}
