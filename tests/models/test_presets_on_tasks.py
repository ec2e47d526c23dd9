"""Every runnable preset on the field's tasks: its CLI's bundle in the task's own image.

The Harbor example's ``fix-median`` task (its image built from its Dockerfile, ``FROM
python:3.11-slim`` mapped onto the stock Debian image offline) and the SWE-bench example's
instance (its image, the repository at its base commit in ``/testbed``): each preset's CLI
runs inside that image (not hangar's base image) with the network off, through the relay,
against a scripted model that fixes the bug with the CLI's own shell tool; the verdict is
the task's tests', the calls are metered, the CLI's session files are collected.
"""

from __future__ import annotations

import shutil
import tarfile
from pathlib import Path
from typing import Any

import docker
import pytest

from hangar.agents import parse_agent
from hangar.kinds.execution import KIND, single_trial
from hangar.kinds.execution.harbor.tasks import load_task
from hangar.kinds.execution.settings import execution_settings
from hangar.models import ModelSpec
from hangar.results import TrialResult, Verdict
from hangar.sandbox.bundles import AGENT_CLIS
from hangar.testing.scripted import Reply, ScriptedUsage, ToolCall
from hangar.trials import Arm, run_trial
from tests.models.cli_agents import EXAMPLES, scripted_trial

pytestmark = [pytest.mark.docker, pytest.mark.slow]

MEDIAN = (
    "python3 -c \"import pathlib; p = pathlib.Path('/app/stats.py'); "
    "p.write_text(p.read_text().replace('    return ordered[len(ordered) // 2]', "
    "'    mid = len(ordered) // 2\\n    if len(ordered) % 2 == 0:\\n"
    "        return (ordered[mid - 1] + ordered[mid]) / 2\\n    return ordered[mid]'))\""
)
STATKIT = (
    "python3 -c \"import pathlib; p = pathlib.Path('/testbed/statkit/stats.py'); "
    "p.write_text(p.read_text().replace('    return ordered[mid]\\n', "
    "'    if len(ordered) % 2 == 0:\\n        return (ordered[mid - 1] + ordered[mid]) / 2\\n"
    "    return ordered[mid]\\n'))\""
)
#: preset -> (its model's provider and path, its shell tool, the argument it takes; a
#: list of commands where the argument ends in [])
PRESETS: dict[str, tuple[str, str, str, str]] = {
    "codex": ("openai", "/v1", "exec_command", "cmd"),
    "claude": ("anthropic", "", "Bash", "command"),
    "gemini": ("google", "", "run_shell_command", "command"),
    "qwen": ("openai", "/v1", "run_shell_command", "command"),
    "opencode": ("openai", "/v1", "bash", "command"),
    "copilot": ("openai", "/v1", "bash", "command"),
    "cline": ("openai", "/v1", "run_commands", "commands[]"),
    "kilo": ("openai", "/v1", "bash", "command"),
    "pi": ("openai", "/v1", "bash", "command"),
    "openhands": ("openai", "/v1", "terminal", "command"),
    "mini-swe-agent": ("openai", "/v1", "bash", "command"),
}
#: Aider edits files from its answer's SEARCH/REPLACE blocks, not with a shell tool.
AIDER_EDIT = """Averaging the two middle values.

{path}
```python
<<<<<<< SEARCH
{search}
=======
{replace}
>>>>>>> REPLACE
```
"""


def _replies(preset: str, fix: str, look: str) -> list[Any]:
    if preset == "aider":
        raise AssertionError("aider answers with an edit")
    _, _, tool, arg = PRESETS[preset]

    def call(command: str) -> list[ToolCall]:
        args = {arg[:-2]: [command]} if arg.endswith("[]") else {arg: command}
        return [ToolCall(name=tool, arguments=args)]

    finish = call("echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
    return [
        Reply(tool_calls=call(look), usage=ScriptedUsage(input=1000, output=30)),
        Reply(tool_calls=call(fix), usage=ScriptedUsage(input=1200, output=90)),
        Reply(content="Fixed: the median of an even count is the mean of the middle two.",
              tool_calls=finish if preset == "mini-swe-agent" else [],
              usage=ScriptedUsage(input=1400, output=20)),
    ]  # fmt: skip


def _model(preset: str) -> dict[str, object]:
    provider, path = PRESETS.get(preset, ("openai", "/v1", "", ""))[:2]
    model_id = "gemini-2.5-flash" if provider == "google" else f"scripted-{preset}"
    return {"id": model_id, "provider": provider, "path": path}


def _run(task: Any, preset: str, spec: ModelSpec, tmp: Path) -> TrialResult:
    agent = parse_agent(preset, {"preset": preset}, "test")
    trial = single_trial(task, agent, Arm(name="control"), model=spec,
                         evidence_url=(tmp / "ev").as_uri())  # fmt: skip
    trial = trial.model_copy(update={"work_root": tmp / "trials", "cache_root": tmp / "cache"})
    return run_trial(trial)


def _check(result: TrialResult, requests: list[dict[str, Any]], image_prefix: str) -> None:
    assert result.verdict is Verdict.PASS, (result.reason, [r["path"] for r in requests])
    assert requests and result.usage.input_tokens > 0  # metered through the relay
    assert result.evidence_uri is not None
    with tarfile.open(result.evidence_uri.removeprefix("file://")) as tar:
        names = tar.getnames()
        image = tar.extractfile("image.json")
        assert image is not None
        said = image.read().decode()
    assert image_prefix in said  # the task's own image, not hangar's base image
    assert "agent/bundle.json" in names


@pytest.fixture(scope="module")
def harbor_task(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    from hangar.sandbox.task_images import stock_image

    stock_image()
    folder = tmp_path_factory.mktemp("harbor") / "fix-median"
    shutil.copytree(EXAMPLES / "harbor" / "dataset" / "fix-median", folder)
    settings = execution_settings(image_map={"python:*": "hangar/base:bookworm-stock"})
    return KIND.configure(load_task(folder / "task.toml"), settings)


@pytest.mark.parametrize("preset", [*PRESETS, "aider"])
def test_every_preset_fixes_a_harbor_task_in_its_own_image(
    harbor_task: Any, preset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if AGENT_CLIS[preset].packages and shutil.which("npm") is None:
        pytest.skip(f"npm is not installed: the {preset} CLI comes from the npm registry")
    if preset == "aider":
        edit = AIDER_EDIT.format(
            path="stats.py",
            search="    return ordered[len(ordered) // 2]",
            replace="    mid = len(ordered) // 2\n    if len(ordered) % 2 == 0:\n"
            "        return (ordered[mid - 1] + ordered[mid]) / 2\n    return ordered[mid]",
        )
        replies: list[Any] = [Reply(content=edit, usage=ScriptedUsage(input=900, output=80))]
    else:
        replies = _replies(preset, MEDIAN, "cat /app/stats.py")
    result, requests = scripted_trial(
        "stats.py", replies, _model(preset), monkeypatch,
        lambda spec: _run(harbor_task, preset, spec, tmp_path),
    )  # fmt: skip
    _check(result, requests, "hangar-task/fix-median")


@pytest.fixture(scope="module")
def swebench_task(
    docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    pytest.importorskip("swebench")
    from hangar.scheduler.sweep import load_sweep

    folder = tmp_path_factory.mktemp("swebench")
    shutil.copytree(EXAMPLES / "swebench", folder / "swebench")
    shutil.copytree(EXAMPLES / "repos", folder / "repos")
    path = folder / "swebench" / "sweep.yaml"  # the instance's image: root, `/`, no CLI
    path.write_text(
        path.read_text().replace(": hangar/base:bookworm", ": hangar/base:bookworm-stock")
    )
    sweep = load_sweep(path)
    (task,) = [t for t in sweep.tasks if t.id == "statkit__statkit-1"]
    return task


@pytest.mark.parametrize("preset", ["codex", "claude", "copilot", "openhands", "mini-swe-agent"])
def test_presets_fix_a_swebench_instance_in_its_image(
    swebench_task: Any, preset: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if AGENT_CLIS[preset].packages and shutil.which("npm") is None:
        pytest.skip(f"npm is not installed: the {preset} CLI comes from the npm registry")
    replies = _replies(preset, STATKIT, "sed -n 13,20p /testbed/statkit/stats.py")
    result, requests = scripted_trial(
        "median", replies, _model(preset), monkeypatch,
        lambda spec: _run(swebench_task, preset, spec, tmp_path),
    )  # fmt: skip
    _check(result, requests, '"image": "hangar/base:bookworm-stock"')
    assert result.reason == "resolved"
