"""The CLI is thin, prints hangar errors without a traceback, and exits non-zero."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hangar import __version__
from hangar.cli import app

runner = CliRunner()


def test_version() -> None:
    result = runner.invoke(app, ["version"])
    assert result.exit_code == 0 and __version__ in result.stdout
    flag = runner.invoke(app, ["--version"])
    assert flag.exit_code == 0 and flag.stdout == f"hangar {__version__}\n"


def test_help_lists_commands() -> None:
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    for command in ("version", "image", "sandbox"):
        assert command in result.stdout


def _hangar(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hangar", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_each_command_is_found_in_the_module_named_for_it() -> None:
    """`hangar <command>` loads only `COMMANDS[command]`: the map names the module that
    registers each command and group, and every one there is (but the kinds' groups)."""
    from hangar.cli import COMMANDS, _app
    from hangar.trials.kind import kinds

    found = {c.name or c.callback.__name__: c.callback.__module__ for c in app.registered_commands}  # type: ignore[union-attr]
    for group in app.registered_groups:
        sub = group.typer_instance
        assert sub is not None
        found[group.name] = sub.registered_commands[0].callback.__module__  # type: ignore[union-attr,index]
    kind_groups = {name for kind in kinds() for name, _ in (*kind.cli, *kind.cli_aliases)}
    mapped = {name: f"hangar.cli.{module}" for name, module in COMMANDS.items()}
    assert {k: v for k, v in found.items() if k not in kind_groups} == mapped
    assert _app.app is app


@pytest.mark.parametrize("command", ["run", "status", "report", "trial", "version"])
def test_a_command_runs_with_its_module_alone(command: str) -> None:
    """Only the command's module is loaded, and its help (or its output) is whole."""
    script = (
        "import sys\n"
        "from hangar.cli import main\n"
        f"sys.argv = ['hangar', {command!r}] + ([] if {command!r} == 'version' else ['--help'])\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "print(sorted(m for m in sys.modules if m.startswith('hangar.cli.')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "Usage: hangar" in out.stdout or __version__ in out.stdout
    loaded = out.stdout.strip().splitlines()[-1]
    assert "hangar.cli.cluster" not in loaded and "hangar.cli.sandbox" not in loaded, loaded


@pytest.mark.docker
def test_hangar_error_is_one_clear_line(docker_client: object) -> None:
    proc = _hangar("sandbox", "exec", "--image", "hangar/nope:1", "--", "true")
    assert proc.returncode == 2
    assert "is not on the Docker engine" in proc.stderr and "hangar image build-base" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_backend_is_a_clear_error() -> None:
    proc = _hangar("sandbox", "exec", "--backend", "moon", "--", "true")
    assert proc.returncode == 2 and "unknown sandbox backend 'moon'" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.docker
def test_sandbox_exec_runs_and_tears_down(docker_client: object) -> None:
    proc = _hangar("sandbox", "exec", "--", "sh", "-c", "id -un; exit 3")
    assert proc.returncode == 1 and proc.stdout == "agent\n" and "exit 3" in proc.stderr


TINY = Path(__file__).resolve().parent / "fixtures" / "tiny" / "scenario.yaml"


def test_trial_run_cli_local(tmp_path: Path) -> None:
    proc = _hangar(
        "trial",
        "run",
        str(TINY),
        "--backend",
        "local",
        "--agent-command",
        "true",
        "--evidence",
        (tmp_path / "ev").as_uri(),
        "--store",
        f"sqlite:///{tmp_path}/r.db",
    )
    assert proc.returncode == 0, proc.stderr
    assert "-> pass" in proc.stdout and "recorded as sweep adhoc-" in proc.stdout
    # the trial is in the store, as a sweep of its own: the report shows it
    sweep_id = proc.stdout.split("recorded as sweep ", 1)[1].split()[0]
    report = _hangar(
        "report", sweep_id, "--store", f"sqlite:///{tmp_path}/r.db", "--format", "json"
    )
    assert report.returncode == 0, report.stderr
    assert '"passes": 1' in report.stdout
    unrecorded = _hangar(
        *("trial", "run", str(TINY), "--backend", "local", "--agent-command", "true"),
        *("--evidence", (tmp_path / "ev").as_uri(), "--no-store", "--json"),
    )
    assert unrecorded.returncode == 0 and '"verdict": "pass"' in unrecorded.stdout
    from hangar.store import ResultsStore

    assert ResultsStore(f"sqlite:///{tmp_path}/r.db").sweep_ids() == [sweep_id]
    assert not (TINY.parent / "runs").exists()
    missing = _hangar(
        "trial",
        "run",
        str(TINY),
        "--backend",
        "local",
        "--agent-command",
        "true",
        "--model",
        "gpt-4o-mini",
        "--api-key-env",
        "HANGAR_NO_SUCH_KEY",
        "--evidence",
        (tmp_path / "ev").as_uri(),
        "--json",
    )
    # refused before any trial, as `hangar run` refuses it
    assert missing.returncode == 2 and not missing.stdout
    assert "HANGAR_NO_SUCH_KEY" in missing.stderr and "no trial was run" in missing.stderr


def test_trial_run_refuses_a_missing_model_key_before_any_trial(tmp_path: Path) -> None:
    """As `hangar run` does (exit 2, no trial): the variable it looked for is named, and
    for a --base-url server that needs no key, how to give it one."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    argv = [sys.executable, "-m", "hangar", "trial", "run", str(TINY), "--agent-command", "true"]
    argv += ["--backend", "local", "--model", "gpt-4o-mini", "--evidence", tmp_path.as_uri()]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr
    assert "needs its key in OPENAI_API_KEY" in proc.stderr and "--api-key-env" in proc.stderr
    assert "no trial was run" in proc.stderr and not list(tmp_path.iterdir())
    argv += ["--base-url", "http://127.0.0.1:9/v1", "--api-key-env", "MY_LOCAL_KEY"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "needs its key in MY_LOCAL_KEY" in proc.stderr
    assert "export MY_LOCAL_KEY=unused" in proc.stderr


def _sweep_beside_its_results(folder: Path) -> Path:
    """A sweep file with no `store:` and, in runs/ beside it, the store of one run."""
    from hangar.results import Verdict
    from hangar.store import ResultsStore
    from tests.scores.test_report import trial

    folder.mkdir()
    sweep = folder / "sweep.yaml"
    sweep.write_text(
        f"id: here\nscenarios: [{TINY}]\nagents: {{ok: {{command: 'true'}}}}\n"
        "models: [{id: m1, provider: none}]\nbackend: local\n"
    )
    store = ResultsStore(f"sqlite:///{folder / 'runs' / 'hangar.db'}")
    store.ensure_sweep("here", {"id": "here"}, 1)
    store.record([trial("here", "tiny", "control", 0, Verdict.PASS)])
    return sweep


def test_the_store_is_the_sweep_files_wherever_the_command_runs(tmp_path: Path) -> None:
    sweep = _sweep_beside_its_results(tmp_path / "project")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    status = _hangar("status", str(sweep), cwd=elsewhere)
    assert status.returncode == 0, status.stderr
    assert "1 final" in status.stdout
    report = _hangar("report", str(sweep), cwd=elsewhere)
    assert report.returncode == 0 and "sweep here" in report.stdout
    assert not (elsewhere / "runs").exists()  # nothing created where the command ran


@pytest.mark.parametrize("command", [["status"], ["report"], ["export", "--out", "out.jsonl"]])
def test_a_missing_sweep_or_store_is_one_error_everywhere(
    tmp_path: Path, command: list[str]
) -> None:
    _sweep_beside_its_results(tmp_path / "project")
    empty = tmp_path / "empty"
    empty.mkdir()
    # no store where the command runs: said, and none created
    proc = _hangar(command[0], "nosuch", *command[1:], cwd=empty)
    assert proc.returncode == 2 and "no store at" in proc.stderr, proc.stderr
    assert not (empty / "runs").exists() and not (empty / "out.jsonl").exists()
    # a store without that sweep: the same code, the sweeps it holds named
    store = f"sqlite:///{tmp_path / 'project' / 'runs' / 'hangar.db'}"
    proc = _hangar(command[0], "nosuch", *command[1:], "--store", store, cwd=empty)
    assert proc.returncode == 2, proc.stderr
    assert "no sweep 'nosuch' in" in proc.stderr and "its sweeps: here" in proc.stderr
    assert not (empty / "out.jsonl").exists()
    # a sweep file that is not there
    proc = _hangar(command[0], "gone/sweep.yaml", *command[1:], cwd=empty)
    assert proc.returncode == 2 and "file not found: gone/sweep.yaml" in proc.stderr


def test_view_in_an_empty_folder_says_there_is_no_store(tmp_path: Path) -> None:
    proc = _hangar("view", "--port", "0", cwd=tmp_path)
    assert proc.returncode == 2 and "no store at" in proc.stderr, proc.stderr
    assert not (tmp_path / "runs").exists()


def _help_pages(width: int) -> list[tuple[str, str]]:
    """Every command's help as `hangar` prints it, at a terminal `width`."""
    import typer
    from typer import _click

    from hangar.cli.help import conventional

    pages: list[tuple[str, str]] = []

    def walk(cmd: object, name: str, parent: object = None) -> None:
        ctx = _click.Context(  # type: ignore[attr-defined]
            cmd, info_name=name.split()[-1], parent=parent, terminal_width=width
        )
        pages.append((name, cmd.get_help(ctx)))  # type: ignore[attr-defined]
        for sub_name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{name} {sub_name}", ctx)

    walk(conventional(typer.main.get_command(app)), "hangar")
    return pages


@pytest.mark.parametrize("width", [50, 80, 160])
def test_help_reads_as_people_read_it_at_any_width(width: int) -> None:
    import re

    pages = _help_pages(width)
    assert len(pages) > 40
    for name, text in pages:
        usage = text.splitlines()[0]
        assert usage.startswith(f"Usage: {name} "), (name, usage)
        assert not re.search(r"\{[a-z_]+\}", usage), (name, usage)  # no {sweep_file}
        assert not re.search(r"<(str|bool|int|float|path|list\[|int range)", text), name
        assert "`" not in text, name
        for line in text.splitlines():
            assert len(line) <= width, (name, line)
    run = dict(pages)["hangar run"]
    assert run.splitlines()[0] == "Usage: hangar run [OPTIONS] SWEEP"
    assert "--repeat N " in run and "--json  " in run and "--json <" not in run


def test_the_console_script_uses_the_conventional_help() -> None:
    proc = _hangar("report", "--help")
    assert proc.returncode == 0 and proc.stdout.startswith("Usage: hangar report [OPTIONS] SWEEP")
    assert "--format TEXT" in proc.stdout and "╭" not in proc.stdout


def test_sweeps_status_and_trial_show_read_the_store(tmp_path: Path) -> None:
    import json

    import yaml

    store = f"sqlite:///{tmp_path}/r.db"
    scenario = yaml.safe_load(TINY.read_text())
    scenario["repository"] = str((TINY.parent / scenario["repository"]).resolve())
    scenario.pop("plugins")
    scenario["verifier"]["commands"] = ["echo looking for DONE; test -f DONE"]
    (tmp_path / "undone.yaml").write_text(yaml.safe_dump(scenario))
    ran = _hangar(
        *("trial", "run", str(tmp_path / "undone.yaml"), "--backend", "local"),
        *("--agent-command", "true", "--store", store, "--json"),
        *("--evidence", (tmp_path / "ev").as_uri()),
    )
    assert ran.returncode == 1, ran.stderr
    result = json.loads(ran.stdout)
    sweep, key = result["sweep"], result["trial_key"]
    # the store's sweeps, as a table and as JSON
    listed = _hangar("sweeps", "--store", store)
    assert listed.returncode == 0 and sweep[:8] in listed.stdout and "0.0%" in listed.stdout
    data = json.loads(_hangar("sweeps", "--store", store, "--json").stdout)
    assert [s["id"] for s in data["sweeps"]] == [sweep] and data["sweeps"][0]["pass_rate"] == 0
    # status: an agent column, and JSON the same way as everywhere
    status = json.loads(_hangar("status", sweep, "--store", store, "--json").stdout)
    assert status["counts"] == [
        {"verdict": "fail", "agent": "command", "model": "none", "arm": "control", "trials": 1}
    ]
    assert "agent" in _hangar("status", sweep, "--store", store).stdout
    report = _hangar("report", sweep, "--store", store, "--json")
    assert json.loads(report.stdout)["groups"][0]["trials"] == 1
    # one trial by the start of its key: reasons, checks, the failing command's output
    shown = _hangar("trial", "show", key[:10], "--store", store)
    assert shown.returncode == 0, shown.stderr
    assert "-> fail" in shown.stdout and "- verifier command failed" in shown.stdout
    assert "$ echo looking for DONE; test -f DONE (exit 1)\nlooking for DONE" in shown.stdout
    as_json = json.loads(_hangar("trial", "show", key[:10], "--store", store, "--json").stdout)
    assert as_json["verdict"] == "fail"
    assert as_json["failures"][0]["what"].startswith("$ echo looking")
    missing = _hangar("trial", "show", "ffffffffffff", "--store", store)
    assert missing.returncode == 2 and "no trial whose key starts with" in missing.stderr
    # its session as an ATIF trajectory, as Harbor's models read it
    from tests.harbor import harbor_validates

    written = _hangar("trial", "trajectory", key[:10], "--store", store)
    assert written.returncode == 0, written.stderr
    doc = json.loads(written.stdout)
    assert doc["schema_version"] == "ATIF-v1.7" and doc["session_id"] == key
    assert doc["agent"]["name"] == "command" and doc["final_metrics"]["total_steps"] >= 1
    assert harbor_validates(doc, tmp_path) == ""
    # the viewer offers the same document from the trial's page
    from starlette.testclient import TestClient

    from hangar.store import ResultsStore
    from hangar.viewer.app import Viewer, make_app

    with TestClient(make_app(Viewer(ResultsStore(store)))) as client:
        page = client.get(f"/trials/{sweep}/{key}")
        assert page.status_code == 200 and 'id="trajectory"' in page.text
        served = client.get(f"/trials/{sweep}/{key}/1/trajectory.json")
    assert served.status_code == 200 and served.json() == doc
    # and hangar export writes it beside the trials' rows
    folder = tmp_path / "trajectories"
    exported = _hangar(
        *("export", sweep, "--store", store, "--out", str(tmp_path / "t.jsonl")),
        *("--trajectories", str(folder)),
    )
    assert exported.returncode == 0 and "wrote 1 trajectory file(s)" in exported.stdout
    assert json.loads((folder / f"{key}.json").read_text()) == doc


def test_agents_list_names_every_preset_and_kind_with_what_it_needs() -> None:
    out = runner.invoke(app, ["agents", "list", "--json"])
    assert out.exit_code == 0, out.output
    rows = {r["name"]: r for r in json.loads(out.stdout)["agents"]}
    assert {"codex", "claude", "gemini", "command", "chat", "prompt", "oracle", "nop"} <= set(rows)
    assert rows["codex"]["version"] == "0.171.0" and rows["gemini"]["version"] == "0.61.0"
    from hangar.sandbox.bundles import bundle_id

    assert rows["claude"]["bundle"] == bundle_id("claude") and "/bin/sh" in rows["claude"]["needs"]
    assert rows["amp"]["config"] == "(not runnable)" and "Amp's own service" in rows["amp"]["needs"]
    runnable = [r for r in rows.values() if str(r["config"]).startswith("{preset:")]
    assert len(runnable) >= 12 and all(r["bundle"] for r in runnable)
    assert rows["gemini"]["apis"] == ["google (gemini)"]
    assert rows["oracle"]["apis"] == [] and "solution" in rows["oracle"]["needs"]
    text = runner.invoke(app, ["agents", "list"])
    assert text.exit_code == 0 and "gemini" in text.stdout


def test_sweep_check_names_models_it_cannot_price_with_the_nearest_known_id(
    tmp_path: Path,
) -> None:
    import shutil

    import yaml

    examples = Path(__file__).resolve().parent.parent / "examples"
    shutil.copytree(examples / "decision", tmp_path / "decision")
    sweep = tmp_path / "decision" / "sweep.yaml"
    data = yaml.safe_load(sweep.read_text())
    data["models"] = [{"id": "gpt-4o-mni", "api_key_env": "HOME"}, {"id": "gpt-4o-mini"}]
    sweep.write_text(yaml.safe_dump(data))
    out = runner.invoke(app, ["sweep", "check", str(sweep), "--json"])
    unpriced = json.loads(out.stdout)["unpriced"]
    assert list(unpriced) == ["gpt-4o-mni"]  # the real id has a price
    assert "did you mean gpt-4o-mini?" in unpriced["gpt-4o-mni"]
    text = runner.invoke(app, ["sweep", "check", str(sweep)])
    assert "did you mean gpt-4o-mini?" in text.output


def test_agents_prune_removes_only_bundles_no_preset_uses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from hangar.sandbox.bundles import bundle_id

    monkeypatch.setenv("HANGAR_CACHE_DIR", str(tmp_path))
    bundles = tmp_path / "bundles"
    current = bundles / bundle_id("codex").replace("@", "-")
    old = bundles / "codex-0123456789abcdef"
    for folder in (current, old, bundles / "checks"):
        folder.mkdir(parents=True)
        (folder / "manifest.json").write_text("{}")
    (old / "codex").write_bytes(b"x" * 2**20)
    dry = runner.invoke(app, ["agents", "prune", "--dry-run"])
    assert dry.exit_code == 0 and "would remove" in dry.output and old.is_dir()
    done = runner.invoke(app, ["agents", "prune"])
    assert done.exit_code == 0, done.output
    assert "1 MiB freed" in done.output
    assert not old.exists() and current.is_dir() and (bundles / "checks").is_dir()


def test_view_says_its_url_once_it_answers(tmp_path: Path) -> None:
    import urllib.request

    from hangar.store import ResultsStore

    url = f"sqlite:///{tmp_path}/r.db"
    ResultsStore(url)  # an empty store
    proc = subprocess.Popen(
        [sys.executable, "-m", "hangar", "view", "--port", "0", "--store", url],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("hangar view on http://127.0.0.1:"), (line, proc.stderr)
        address = line.split()[3]
        assert not address.endswith(":0/")  # the port it got
        with urllib.request.urlopen(address, timeout=5) as page:  # answers at once
            assert page.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_sweeps_evidence_endpoint_reaches_the_commands_that_run_its_tasks(
    tmp_path: Path,
) -> None:
    """`hangar dataset validate SWEEP` runs with the sweep's S3 endpoint, as `hangar run`
    gives it to workers (in the evidence URL), not with the AWS default."""
    from hangar.cli._app import _sweep_tasks
    from hangar.kinds.execution.settings import execution_settings

    dataset = Path(__file__).resolve().parents[1] / "examples" / "harbor" / "dataset"
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(
        f"id: s3-validate\nscenarios: [{dataset}]\n"
        "agents: {nop: {kind: reference, role: nop}}\nmodels: [none]\n"
        "evidence: s3://bucket/sweeps\nevidence_endpoint: http://127.0.0.1:9\n"
    )
    found = _sweep_tasks(sweep, execution_settings())
    assert found.evidence == "s3://bucket/sweeps?endpoint=http://127.0.0.1:9"


def test_json_output_is_one_document_whatever_else_writes_to_stdout() -> None:
    """What Ray prints from its threads, a library's own writes to file descriptor 1 and
    what runs at exit go to stderr once a command keeps stdout for its JSON."""
    script = (
        "import atexit, os, threading\n"
        "from hangar.console import reserve_stdout\n"
        "out = reserve_stdout()\n"
        "print('a notice')\n"
        "os.write(1, b'a write to fd 1\\n')\n"
        "t = threading.Thread(target=lambda: print('(raylet) a node died')); t.start(); t.join()\n"
        "out.print_json('{\"done\": 3}')\n"
        "out.file.flush()\n"
        "atexit.register(lambda: print('at exit'))\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    assert json.loads(proc.stdout) == {"done": 3}
    for said in ("a notice", "a write to fd 1", "(raylet) a node died", "at exit"):
        assert said in proc.stderr
