"""Trials of Harbor tasks on real docker: the image as the fixture, rewards, the oracle and
nop agents, shared and separate verifiers, and what an agent cannot do to its judgement."""

from __future__ import annotations

import json
import shutil
import tarfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.agents import NOP, ORACLE, AgentSpec, CommandAgent
from hangar.kinds.execution import KIND, single_trial
from hangar.kinds.execution.harbor.tasks import load_task
from hangar.kinds.execution.settings import execution_settings
from hangar.results import TrialResult, Verdict
from hangar.testing.answers import EXAMPLE_ANSWERS, EXAMPLE_PORT, serve_answers
from hangar.trials import Arm, run_trial

DATASET = Path(__file__).resolve().parents[2] / "examples" / "harbor" / "dataset"
STOCK = "hangar/base:bookworm-stock"
IMAGE_MAP = {"ubuntu:*": STOCK, "debian:*": STOCK, "python:*": STOCK}

Runner = Callable[..., TrialResult]


@pytest.fixture(scope="module")
def stock(docker_client: docker.DockerClient) -> str:
    from hangar.sandbox.task_images import stock_image

    return stock_image().tag


@pytest.fixture
def tasks(tmp_path: Path) -> Path:
    shutil.copytree(DATASET, tmp_path / "dataset")
    return tmp_path / "dataset"


@pytest.fixture
def run(docker_client: docker.DockerClient, stock: str, tasks: Path, tmp_path: Path) -> Runner:
    """One trial of a task of the dataset copy; checks that nothing is left behind."""

    def go(name: str, agent: AgentSpec, model: Any = None) -> TrialResult:
        task = KIND.configure(
            load_task(tasks / name / "task.toml"), execution_settings(image_map=IMAGE_MAP)
        )
        spec = single_trial(
            task,
            agent,
            Arm(name="control"),
            evidence_url=(tmp_path / "evidence").as_uri(),
            **({"model": model} if model is not None else {}),
        ).model_copy(update={"work_root": tmp_path / "trials", "cache_root": tmp_path / "cache"})
        result = run_trial(spec)
        left = docker_client.containers.list(
            all=True, ignore_removed=True, filters={"label": f"hangar.trial={spec.trial_key}"}
        )
        assert not left, "a container was left behind"
        return result

    return go


def evidence(result: TrialResult) -> dict[str, str]:
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        return {
            m.name: tar.extractfile(m).read().decode(errors="replace")  # type: ignore[union-attr]
            for m in tar.getmembers()
            if m.isfile()
        }


def scores(result: TrialResult) -> dict[str, float | None]:
    return {s.metric: s.value for s in result.scores}


@pytest.mark.parametrize("name", ["hello-file", "fix-median", "count-lines"])
def test_the_oracle_passes_and_nop_fails(run: Runner, name: str) -> None:
    oracle = run(name, ORACLE)
    assert oracle.verdict is Verdict.PASS, oracle.reason
    assert scores(oracle)["reward"] == 1.0 and scores(oracle)["pass"] == 1.0
    files = evidence(oracle)
    assert any(f.startswith("logs/verifier/reward.") for f in files)
    assert "verifier/test.json" in files and "image.json" in files
    nop = run(name, NOP)
    assert nop.verdict is Verdict.FAIL, nop.reason
    assert scores(nop)["reward"] == 0.0 and "below the threshold 1" in nop.reason


def test_named_rewards_are_scores(run: Runner) -> None:
    nop = run("fix-median", NOP)
    assert scores(nop) == {"pass": 0.0, "reward": 0.0, "odd": 1.0, "even": pytest.approx(1 / 3)}


def test_the_broken_task_fails_its_oracle(run: Runner) -> None:
    result = run("broken-tests", ORACLE)
    assert result.verdict is Verdict.FAIL and scores(result)["reward"] == 0.0


def test_the_workspace_diff_is_taken_on_the_host(run: Runner) -> None:
    hider = CommandAgent(
        name="hider",
        command="echo 'Hello, world!' > hello.txt; rm README; echo '*' > .gitignore; rm -rf /tmp/x",
    )
    result = run("hello-file", hider)
    assert result.verdict is Verdict.PASS, result.reason
    patch = evidence(result)["diff.patch"]
    assert "+Hello, world!" in patch and "deleted file" in patch and ".gitignore" in patch


def test_a_reward_the_agent_wrote_never_counts(run: Runner, tasks: Path) -> None:
    forger = CommandAgent(name="forger", command="echo 1 > /logs/verifier/reward.txt")
    assert run("hello-file", forger).verdict is Verdict.FAIL
    # a test script that writes nothing: the forged reward is gone, a named failure
    (tasks / "hello-file" / "tests" / "test.sh").write_text("#!/bin/bash\nexit 0\n")
    result = run("hello-file", forger)
    assert result.verdict is Verdict.FAIL
    assert result.reason.startswith("verifier failure in the agent's environment: the test")
    assert "pass" in scores(result) and "reward" not in scores(result)


def test_a_separate_verifier_sees_only_the_artifacts(run: Runner) -> None:
    # the right answer, but in the workspace rather than the declared artifact
    misplaced = CommandAgent(name="misplaced", command="""echo '{"lines": 17}' > answer.json""")
    result = run("count-lines", misplaced)
    assert result.verdict is Verdict.FAIL, result.reason
    assert "verifier/image.json" in evidence(result)


def test_a_separate_verifier_that_writes_no_reward_is_the_tasks_problem(
    run: Runner, tasks: Path
) -> None:
    (tasks / "count-lines" / "tests" / "test.sh").write_text("#!/bin/bash\nexit 2\n")
    result = run("count-lines", ORACLE)
    assert result.verdict is Verdict.VERIFIER_ERROR, result.reason
    assert result.reason.startswith("verifier failure: the test script wrote neither")
    assert "exit 2" in result.reason and not result.scores


def test_a_root_agent_that_stops_its_sandbox_is_judged_on_what_it_left(run: Runner) -> None:
    stopper = CommandAgent(
        name="stopper", command="echo 'Hello, world!' > hello.txt; kill -TERM 1; sleep 30"
    )
    result = run("hello-file", stopper)
    assert result.verdict is Verdict.PASS, result.reason


def test_the_agent_runs_as_the_user_the_task_names(run: Runner, tasks: Path) -> None:
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(toml.read_text().replace("[agent]\n", '[agent]\nuser = "agent"\n'))
    (tasks / "hello-file" / "tests" / "test.sh").write_text(
        "#!/bin/bash\n"
        '[ "$(cat /app/who)" = agent ] && [ "$(stat -c %U /app/README)" = agent ] '
        "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    )
    result = run("hello-file", CommandAgent(name="who", command="id -un > /app/who"))
    assert result.verdict is Verdict.PASS, result.reason


def test_an_image_that_does_not_build_is_blocked_with_its_log(run: Runner, tasks: Path) -> None:
    dockerfile = tasks / "hello-file" / "environment" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "RUN echo the-build-log-line && false\n")
    result = run("hello-file", ORACLE)
    assert result.verdict is Verdict.BLOCKED_SETUP
    assert result.reason.startswith("image: building hangar-task/hello-file:")
    assert "the-build-log-line" in evidence(result)["image/build.log"]


def test_a_task_hangar_cannot_honour_is_blocked_before_anything_runs(
    run: Runner, tasks: Path
) -> None:
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(toml.read_text() + "gpus = 2\n")
    result = run("hello-file", ORACLE)
    assert result.verdict is Verdict.BLOCKED_SETUP and "GPUs" in result.reason
    shutil.rmtree(tasks / "hello-file" / "solution")
    toml.write_text(toml.read_text().replace("gpus = 2\n", ""))
    result = run("hello-file", ORACLE)
    assert result.verdict is Verdict.BLOCKED_SETUP and "solution/solve.sh" in result.reason


def _with_healthcheck(tasks: Path, command: str, retries: int) -> None:
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(
        toml.read_text()
        + "\n[environment.healthcheck]\n"
        + f"command = {command!r}\ninterval_sec = 0.1\nretries = {retries}\n"
    )


def test_the_healthcheck_is_waited_for_before_the_agent(run: Runner, tasks: Path) -> None:
    # fails twice, then passes: the agent starts only after, and the attempts are evidence
    _with_healthcheck(
        tasks,
        "n=$(cat /tmp/hc 2>/dev/null || echo 0); echo $((n+1)) > /tmp/hc; [ $n -ge 2 ]",
        retries=3,
    )
    seen = CommandAgent(name="seen", command="cp /tmp/hc seen; echo 'Hello, world!' > hello.txt")
    result = run("hello-file", seen)
    assert result.verdict is Verdict.PASS, result.reason
    files = evidence(result)
    report = json.loads(files["healthcheck.json"])
    assert report["healthy"] and [a["exit"] for a in report["attempts"]] == [1, 1, 0]
    assert "+3" in files["diff.patch"]  # the agent saw the third attempt's mark
    assert "healthcheck" in result.timings


def test_an_environment_that_never_becomes_healthy_is_blocked(run: Runner, tasks: Path) -> None:
    _with_healthcheck(tasks, "echo still-starting; exit 7", retries=2)
    marker = CommandAgent(name="marker", command="echo 'Hello, world!' > hello.txt")
    result = run("hello-file", marker)
    assert result.verdict is Verdict.BLOCKED_SETUP, result.reason
    assert "never became healthy" in result.reason and "exit 7: still-starting" in result.reason
    report = json.loads(evidence(result)["healthcheck.json"])
    assert not report["healthy"] and len(report["attempts"]) == 2


def _with_skills(tasks: Path) -> None:
    env = tasks / "hello-file" / "environment"
    (env / "skills" / "greet").mkdir(parents=True)
    (env / "skills" / "greet" / "SKILL.md").write_text(
        "---\nname: greet\ndescription: Greets the world\n---\nWrite `Hello, world!`.\n"
    )
    (env / "Dockerfile").write_text((env / "Dockerfile").read_text() + "COPY skills /skills\n")
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(toml.read_text() + 'skills_dir = "/skills"\n')


def test_the_tasks_skills_are_where_the_agent_finds_skills(run: Runner, tasks: Path) -> None:
    _with_skills(tasks)
    reader = CommandAgent(
        name="reader",
        command="grep -o 'Hello, world!' ~/.agents/skills/greet/SKILL.md > hello.txt; "
        "stat -c %U ~/.agents/skills/greet/SKILL.md > owner",
    )
    result = run("hello-file", reader)
    assert result.verdict is Verdict.PASS, result.reason
    files = evidence(result)
    installed = json.loads(files["skills.json"])
    assert installed["from"] == "/skills" and installed["folder"] == "/root/.agents/skills"
    assert list(installed["skills"]["greet"]) == ["SKILL.md"]
    assert "+root" in files["diff.patch"]


def test_a_skills_dir_the_image_lacks_is_the_tasks_problem(run: Runner, tasks: Path) -> None:
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(toml.read_text() + 'skills_dir = "/skills"\n')
    result = run("hello-file", ORACLE)
    assert result.verdict is Verdict.BLOCKED_SETUP, result.reason
    assert "skills_dir /skills is not a folder of its image" in result.reason


def _files(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def _multi_step(tasks: Path, strategy: str = "mean") -> Path:
    """A two-step task: a script, then a greeting read from a file the step brings; the
    second step's tests also check state the first left outside the workspace."""
    root = tasks / "two-steps"
    reward = "echo $1 > /logs/verifier/reward.txt\n"
    _files(
        root,
        {
            "task.toml": (
                f'schema_version = "1.1"\nmulti_step_reward_strategy = "{strategy}"\n'
                '[agent]\ntimeout_sec = 60\n[environment]\nnetwork_mode = "no-network"\n'
                '[[steps]]\nname = "scaffold"\nmin_reward = 1.0\n'
                '[[steps]]\nname = "implement"\n[steps.verifier.env]\nWHO = "Ada"\n'
                '[steps.healthcheck]\ncommand = "test -x /app/greet.sh"\nretries = 1\n'
            ),
            "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
            "tests/helpers.sh": f"give() {{ {reward.strip()}; }}\n",
            "steps/scaffold/instruction.md": "Write /app/greet.sh printing hello.\n",
            "steps/scaffold/tests/test.sh": (
                '. /tests/helpers.sh\n[ "$(bash /app/greet.sh)" = hello ] && give 1 || give 0\n'
            ),
            "steps/scaffold/solution/solve.sh": (
                "printf '#!/bin/bash\\necho hello\\n' > /app/greet.sh\n"
                "chmod +x /app/greet.sh\necho kept > /opt/state\n"
            ),
            "steps/implement/instruction.md": "Greet the name in /app/name.txt.\n",
            "steps/implement/workdir/name.txt": "Ada\n",
            "steps/implement/workdir/setup.sh": ('echo set-up > /tmp/setup-ran\nrm -- "$0"\n'),
            "steps/implement/tests/test.sh": (
                ". /tests/helpers.sh\n"
                '[ "$(bash /app/greet.sh)" = "Hello, $WHO!" ] && [ "$(cat /opt/state)" = kept ] '
                "&& [ ! -e /app/setup.sh ] && give 1 || give 0\n"
            ),
            "steps/implement/solution/solve.sh": (
                "test -f /tmp/setup-ran || exit 3\n"
                "printf '#!/bin/bash\\necho \"Hello, $(cat /app/name.txt)!\"\\n' > /app/greet.sh\n"
            ),
        },
    )
    return root


def test_a_multi_step_task_keeps_its_environment_from_step_to_step(
    run: Runner, tasks: Path
) -> None:
    _multi_step(tasks)
    oracle = run("two-steps", ORACLE)
    assert oracle.verdict is Verdict.PASS, oracle.reason
    assert "2 of 2 steps (scaffold reward 1, implement reward 1; mean)" in oracle.reason
    files = evidence(oracle)
    records = json.loads(files["steps.json"])
    assert [(r["name"], r["reward"]) for r in records] == [("scaffold", 1.0), ("implement", 1.0)]
    assert "steps/scaffold/trace.jsonl" in files and "trace.jsonl" in files
    assert "steps/scaffold/verifier/test.json" in files
    assert json.loads(files["healthcheck.json"])["healthy"]  # the second step's
    assert "+Ada" not in files["diff.patch"] and "greet.sh" in files["diff.patch"]


def test_a_link_the_agent_leaves_never_takes_the_next_steps_files_to_the_host(
    run: Runner, tasks: Path, tmp_path: Path
) -> None:
    """The next step's files go into the workspace through the sandbox: a link the agent
    put where one of them goes is followed inside the sandbox, never on the host."""
    _multi_step(tasks)
    host_file = tmp_path / "host-only" / "planted"
    host_file.parent.mkdir()
    linker = CommandAgent(
        name="linker",
        command="printf 'echo hello' > /app/greet.sh; chmod +x /app/greet.sh; "
        f"ln -s {host_file} /app/name.txt",
    )
    result = run("two-steps", linker)
    assert result.verdict is Verdict.FAIL, result.reason  # the second step is not done
    assert not host_file.exists(), "a step's file was written through the agent's link"
    assert len(json.loads(evidence(result)["steps.json"])) == 2  # the second step ran


def test_a_later_steps_healthcheck_that_the_agent_broke_is_its_fail(
    run: Runner, tasks: Path
) -> None:
    """After the first step the environment is the agent's: the step's healthcheck runs
    as its user, and one the agent made fail (here: no executable greet.sh) is a fail,
    never an uncounted blocked_setup."""
    _multi_step(tasks)
    breaker = CommandAgent(name="breaker", command="echo 'echo hello' > /app/greet.sh")
    toml = tasks / "two-steps" / "task.toml"
    toml.write_text(toml.read_text().replace("min_reward = 1.0\n", ""))
    result = run("two-steps", breaker)  # greet.sh works through bash, but is not executable
    assert result.verdict is Verdict.FAIL, result.reason
    assert "never became healthy" in result.reason


def test_a_step_below_its_minimum_ends_the_trial(run: Runner, tasks: Path) -> None:
    _multi_step(tasks)
    nop = run("two-steps", NOP)
    assert nop.verdict is Verdict.FAIL, nop.reason
    assert "1 of 2 steps (scaffold reward 0; mean); stopped: step 'scaffold': reward 0" in (
        nop.reason
    )
    assert scores(nop)["reward"] == 0.0
    # the first step done, the second not: half the reward, a fail
    half = CommandAgent(
        name="half", command="printf 'echo hello' > /app/greet.sh; chmod +x /app/greet.sh"
    )
    result = run("two-steps", half)
    assert result.verdict is Verdict.FAIL, result.reason
    assert scores(result)["reward"] == 0.5 and "implement reward 0" in result.reason


def _with_service(tasks: Path, health: str = "") -> Path:
    """A task whose answer is served by a service beside the agent."""
    root = tasks / "ask-service"
    check = health or "import socket; socket.create_connection(('localhost', 5000), 2)"
    _files(
        root,
        {
            "task.toml": '[agent]\ntimeout_sec = 60\n[environment]\nnetwork_mode = "no-network"\n',
            "instruction.md": "Write what http://api:5000/secret.txt says into /app/answer.txt.\n",
            "environment/Dockerfile": "FROM ubuntu:24.04\nWORKDIR /app\n",
            "environment/api/Dockerfile": (
                "FROM ubuntu:24.04\nWORKDIR /srv\nRUN echo s3cr3t-42 > /srv/secret.txt\n"
                'CMD ["python3", "-m", "http.server", "5000"]\n'
            ),
            "environment/docker-compose.yaml": (
                "services:\n  main:\n    depends_on:\n      api:\n"
                "        condition: service_healthy\n"
                "  api:\n    build:\n      context: ./api\n    expose: ['5000']\n"
                "    healthcheck:\n"
                f'      test: ["CMD", "python3", "-c", "{check}"]\n'
                "      interval: 1s\n      timeout: 2s\n      retries: 3\n"
            ),
            "tests/test.sh": (
                'want=$(python3 -c "import urllib.request as u; '
                "print(u.urlopen('http://api:5000/secret.txt', timeout=5)"
                '.read().decode().strip())")\n'
                '[ -n "$want" ] && [ "$(cat /app/answer.txt)" = "$want" ] '
                "&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
            ),
            "solution/solve.sh": (
                'python3 -c "import urllib.request as u; '
                "open('/app/answer.txt','w').write(u.urlopen('http://api:5000/secret.txt').read().decode().strip())\"\n"
            ),
        },
    )
    return root


def test_a_service_beside_the_agent_is_reached_by_it_and_its_verifier(
    run: Runner, tasks: Path, docker_client: docker.DockerClient
) -> None:
    _with_service(tasks)
    oracle = run("ask-service", ORACLE)
    assert oracle.verdict is Verdict.PASS, oracle.reason
    files = evidence(oracle)
    # the agent asked it, then the verifier
    assert files["services/api.log"].count("GET /secret.txt") == 2
    assert "api" in json.loads(files["services/addresses.json"])
    assert run("ask-service", NOP).verdict is Verdict.FAIL
    assert not docker_client.networks.list(filters={"label": "hangar.managed=true"})


def test_the_services_network_has_no_route_out(run: Runner, tasks: Path) -> None:
    import socket

    listener = socket.create_server(("0.0.0.0", 0))  # the host's own service
    listener.setblocking(False)
    port = listener.getsockname()[1]
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        udp.connect(("192.0.2.1", 9))  # no packet sent: the address the host goes out from
        address = udp.getsockname()[0]
    assert not address.startswith("127."), "the host needs an address besides loopback"
    _with_service(tasks)
    probe = CommandAgent(
        name="probe",
        command=(
            "python3 - <<'EOF'\nimport socket\nout = []\n"
            f"for host in ['{address}', '172.17.0.1', '1.1.1.1']:\n"
            "    try:\n"
            f"        socket.create_connection((host, {port}), 2); out.append(host + ' open')\n"
            "    except OSError as e:\n        out.append(host + ' closed')\n"
            "open('/app/answer.txt', 'w').write(' '.join(out))\nEOF"
        ),
    )
    result = run("ask-service", probe)
    with pytest.raises(BlockingIOError):  # no connection reached the host's listener
        listener.accept()
    listener.close()
    assert result.verdict is Verdict.FAIL, result.reason
    patch = evidence(result)["diff.patch"]
    assert " open" not in patch and patch.count(" closed") == 3, patch


def test_a_service_that_never_becomes_healthy_blocks_the_trial(run: Runner, tasks: Path) -> None:
    _with_service(tasks, health="import sys; print('not-yet'); sys.exit(1)")
    result = run("ask-service", ORACLE)
    assert result.verdict is Verdict.BLOCKED_SETUP, result.reason
    assert "service api is unhealthy" in result.reason
    assert "services/api.log" in evidence(result)


MCP_SERVER = Path(__file__).parent / "fixtures" / "mcp_server.py"


def _with_mcp(tasks: Path) -> Path:
    """The service task, its service also an MCP server (streamable HTTP and SSE), and a
    stdio server in the agent's image."""
    root = _with_service(tasks)
    for folder in (root / "environment", root / "environment" / "api"):
        shutil.copy(MCP_SERVER, folder / "mcp_server.py")
    env = root / "environment"
    (env / "Dockerfile").write_text(
        (env / "Dockerfile").read_text() + "COPY mcp_server.py /opt/mcp_server.py\n"
    )
    (env / "api" / "Dockerfile").write_text(
        "FROM ubuntu:24.04\nCOPY mcp_server.py /srv/mcp_server.py\n"
        'CMD ["python3", "/srv/mcp_server.py", "http"]\n'
    )
    compose = (env / "docker-compose.yaml").read_text().replace("5000", "8000")
    (env / "docker-compose.yaml").write_text(compose)
    toml = root / "task.toml"
    toml.write_text(
        toml.read_text()
        + '[[environment.mcp_servers]]\nname = "tools"\ntransport = "streamable-http"\n'
        'url = "http://api:8000/mcp"\n'
        '[[environment.mcp_servers]]\nname = "legacy"\nurl = "http://api:8000/sse"\n'
        '[[environment.mcp_servers]]\nname = "local"\ntransport = "stdio"\n'
        'command = "python3"\nargs = ["/opt/mcp_server.py", "stdio"]\n'
    )
    return root


def test_the_tasks_mcp_servers_are_the_agents_tools(
    run: Runner, tasks: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hangar.agents import ChatAgent
    from hangar.models import ModelSpec
    from hangar.testing.scripted import Conversation, Reply, Script, ScriptedServer, ToolCall

    _with_mcp(tasks)
    reader = CommandAgent(
        name="reader",
        command=(
            "python3 -c \"import json, os; d = json.load(open(os.environ['HANGAR_MCP_CONFIG'])); "
            "print(d['mcpServers']['tools'], d['mcpServers']['local']['command'])\" > told.txt"
        ),
    )
    files = evidence(run("ask-service", reader))
    listed = {t["name"] for t in json.loads(files["mcp-tools.json"])}
    assert listed == {"mcp__tools__secret", "mcp__legacy__secret", "mcp__local__secret"}
    assert "+{'type': 'http', 'url': 'http://api:8000/mcp'} python3" in files["diff.patch"]

    calls = [ToolCall(name=f"mcp__{n}__secret", arguments={}) for n in ("tools", "legacy", "local")]
    script = Script(
        conversations=[
            Conversation(match="Write what", replies=[Reply(tool_calls=calls), Reply(content="ok")])
        ]
    )
    server = ScriptedServer(script).start()
    monkeypatch.setenv("HANGAR_TEST_KEY", "k")
    model = ModelSpec(id="m", base_url=f"{server.url}/v1", api_key_env="HANGAR_TEST_KEY")
    try:
        run("ask-service", ChatAgent(name="chat", tools="edit"), model=model)
    finally:
        server.shutdown()
    answers = [
        m["content"] for m in server.requests[1]["body"]["messages"] if m.get("role") == "tool"
    ]
    assert answers == ["s3cr3t-42"] * 3


def test_a_dataset_is_validated_and_sweeps_leave_broken_tasks_out(
    ray_local: None, stock: str, tmp_path: Path
) -> None:
    """`hangar dataset validate` records valid and broken task versions in the store;
    `hangar run` then leaves the broken one out (and runs it with --include-unvalidated);
    `hangar task check` names what is wrong without running anything."""
    from typer.testing import CliRunner

    from hangar.cli import app

    shutil.copytree(DATASET.parent, tmp_path / "harbor")
    sweep = tmp_path / "harbor" / "sweep.yaml"
    sweep.write_text(
        sweep.read_text()
        + f"store: sqlite:///{tmp_path}/runs.db\nevidence: {(tmp_path / 'evidence').as_uri()}\n"
    )
    cli = CliRunner()
    out = cli.invoke(app, ["run", str(sweep)])
    assert out.exit_code == 3, out.output  # every task left out: none validated
    assert out.output.count("is unvalidated: never validated") == 5
    assert "5 task(s) left out (5 unvalidated)" in out.output
    answers = serve_answers(EXAMPLE_ANSWERS, EXAMPLE_PORT)  # count-words' verifier asks it

    out = cli.invoke(app, ["dataset", "validate", str(sweep)])
    assert out.exit_code == 1, out.output  # one broken
    assert "4 valid, 1 broken, 0 not validated yet, 0 not loading" in out.output
    assert "the oracle fails: reward 0 is below" in out.output

    out = cli.invoke(app, ["run", str(sweep), "--allow-failures"])
    assert out.exit_code == 3, out.output  # the broken task was not run
    assert "left out: broken-tests is broken" in out.output
    assert "1 task(s) left out (1 broken)" in out.output
    assert "8 of 8 trials final" in out.output
    out = cli.invoke(app, ["status", str(sweep)])
    assert "left out: broken-tests is broken" in out.output
    out = cli.invoke(app, ["report", str(sweep), "--format", "md"])
    assert "- broken-tests is broken: the oracle fails" in out.output, out.output
    assert "broken-tests" not in out.output.split("## Tasks left out")[0]

    _viewer_shows_image_tasks(f"sqlite:///{tmp_path}/runs.db")
    _exports_harbor_jobs(cli, sweep, tmp_path / "jobs")

    out = cli.invoke(app, ["run", str(sweep), "--allow-failures", "--include-unvalidated"])
    assert (
        "run anyway: broken-tests is broken" in out.output and "10 of 10 trials final" in out.output
    )
    answers.shutdown()

    out = cli.invoke(app, ["task", "check", str(tmp_path / "harbor" / "dataset")])
    assert out.exit_code == 0, out.output
    toml = tmp_path / "harbor" / "dataset" / "hello-file" / "task.toml"
    toml.write_text(toml.read_text() + "gpus = 1\n")
    out = cli.invoke(app, ["task", "check", str(toml.parent)])
    assert out.exit_code == 1 and "[environment] asks for GPUs" in out.output


def _exports_harbor_jobs(cli: Any, sweep: Path, out: Path) -> None:
    """`hangar export --format harbor-job`: a job folder per agent that Harbor's models and
    viewer read, each task pinned by Harbor's own digest, and the departures said."""
    from hangar.cli import app
    from tests.harbor import harbor_digest, harbor_reads_jobs

    result = cli.invoke(app, ["export", str(sweep), "--format", "harbor-job", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "oracle__none: 4 task(s) have fewer than 5 trials" in result.output
    assert "images were mapped onto others (debian:* -> hangar/base:bookworm-stock" in result.output
    jobs = harbor_reads_jobs(out)
    assert set(jobs) == {"oracle__none", "nop__none"}
    oracle, nop = jobs["oracle__none"]["trials"], jobs["nop__none"]["trials"]
    tasks = {"count-lines", "count-words", "fix-median", "hello-file"}
    assert set(oracle) == set(nop) == tasks and jobs["oracle__none"]["n"] == 4
    assert {t: v["reward"] for t, v in oracle.items()} == dict.fromkeys(tasks, 1)
    assert all(v["reward"] != 1 for v in nop.values())
    assert all(v["trajectory"] for v in oracle.values())
    folder = sweep.parent / "dataset" / "hello-file"
    assert oracle["hello-file"]["digest"] == harbor_digest(folder)
    meta = (out / "oracle__none" / "metadata.yaml").read_text()
    assert "agent_display_name: oracle" in meta and "# departs from a leaderboard's rules" in meta


def _viewer_shows_image_tasks(store_url: str) -> None:
    """The sweep page lists the task left out; an image task's trial page shows its test
    script, its output and its reward."""
    import time

    from starlette.testclient import TestClient

    from hangar.store import ResultsStore
    from hangar.viewer.app import Viewer, make_app

    store = ResultsStore(store_url)
    with TestClient(make_app(Viewer(store, poll_s=0.2))) as client:
        for _ in range(100):  # the report is built in the background
            page = client.get("/sweeps/harbor-demo").text
            if "Tasks left out" in page:
                break
            time.sleep(0.1)
        assert "Tasks left out" in page and "broken-tests is broken" in page
        hello = next(
            r
            for r in store.results("harbor-demo")
            if r.scenario_id == "hello-file" and r.agent == "oracle"
        )
        trial = client.get(f"/trials/harbor-demo/{hello.trial_key}").text
        assert "bash /tests/test.sh" in trial and "<h2>Reward</h2>" in trial
        assert "+Hello, world!" in trial
