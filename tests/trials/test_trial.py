"""One trial end to end against real docker: verdicts, admission, forgery, teardown."""

from __future__ import annotations

import json
import shutil
import threading
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from hangar.kinds.execution.scenarios.scenario import repin
from hangar.results import Verdict
from hangar.sandbox.config import DockerConfig
from hangar.sandbox.disk import TrialDisk
from tests.require import skip_or_fail
from tests.trialkit import (
    AGENTS,
    GOLD,
    LATER_COMMIT,
    ROOT,
    Runner,
    agent_output,
    bundle,
    trace_events,
)

pytestmark = pytest.mark.docker


def set_verifier(folder: Path, mutation: str = "") -> None:
    """Use the test's rule verifier (re-pinned) with `mutation`."""
    shutil.copy(ROOT / "tests" / "fixtures" / "rule_verifier.py", folder / "verify.py")
    (folder / "mutation.txt").write_text(mutation)
    repin(folder / "scenario.yaml")


# -- the gold/noop pair ---------------------------------------------------------------------


def test_a_worker_s_trial_returns_before_its_removal_ends(run: Runner) -> None:
    """A Ray worker does not wait for the container's removal and the disk's release: the
    result is whole, and the container, the disk and the folder go after it (checked by
    the runner)."""
    gold = run(GOLD, wait=False)
    assert gold.verdict is Verdict.PASS, gold.reason
    assert "median" in bundle(gold, "diff.patch")


def test_gold_passes_and_noop_fails(run: Runner) -> None:
    gold = run(GOLD)
    assert gold.verdict is Verdict.PASS, gold.reason
    assert gold.completed and gold.agent_exit_code == 0
    assert [c.status for c in gold.checks] == ["pass", "pass", "pass"]
    assert "median" in bundle(gold, "diff.patch")
    final = json.loads(bundle(gold, "status-final.json"))
    assert final["status"] == " M statkit/stats.py\n"
    assert final["head"] == "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"
    assert json.loads(bundle(gold, "status-initial.json"))["status"] == ""
    noop = run(AGENTS["noop"].command)
    assert noop.verdict is Verdict.FAIL
    assert "verifier command failed" in noop.reason
    assert "failed check: 'median of an even-length list" in noop.reason
    for result in (gold, noop):
        assert result.evidence_uri and result.evidence_sha256
        for phase in ("admission", "workspace", "agent", "verifier_commands", "host_verifier"):
            assert phase in result.timings


def test_local_backend_runs_the_same_trial(run: Runner) -> None:
    assert run(GOLD, backend="local").verdict is Verdict.PASS


def test_the_backends_settings_are_evidence(run: Runner) -> None:
    """A sweep's `backend:` settings reach the sandbox and are recorded with the trial."""
    settings = DockerConfig(runtime="runc", labels={"team": "evals"})
    result = run(GOLD, backend=settings)
    assert result.verdict is Verdict.PASS, result.reason
    recorded = {"kind": "docker", "runtime": "runc", "labels": {"team": "evals"}}
    assert json.loads(bundle(result, "backend.json")) == recorded
    assert json.loads(bundle(result, "trial.json"))["backend_config"] == recorded


# -- what the agent does to its own repository is its result, never the farm's --------------

DAMAGE = {
    "rm-git": ("rm -rf .git", ".git is gone"),
    "gitdir-file": ("rm -rf .git && echo 'gitdir: /etc' > .git", ".git is not a folder"),
    "link-to-root": ("rm -rf .git && ln -s / .git", ".git is a link to '/'"),
    "no-head": ("rm -f .git/HEAD", ".git/HEAD is gone"),
}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_broken_repository_does_not_escape_a_fail(run: Runner, kind: str) -> None:
    damage, words = DAMAGE[kind]
    result = run(f"echo giving up; {damage}")
    assert result.verdict is Verdict.FAIL, result.reason
    assert "failed check" in result.reason
    final = json.loads(bundle(result, "status-final.json"))
    assert words in " ".join(final["damage"]), final
    assert "head_error" in final or "status_error" in final, final
    assert final["changes"] == "", final  # nothing tracked changed against the pin
    assert bundle(result, "diff.patch") == ""


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_a_fix_survives_a_broken_repository(run: Runner, kind: str) -> None:
    damage, words = DAMAGE[kind]
    result = run(f"{GOLD}\n{damage}")
    assert result.verdict is Verdict.PASS, result.reason
    final = json.loads(bundle(result, "status-final.json"))
    assert words in " ".join(final["damage"]), final
    assert final["changes"] == "M\tstatkit/stats.py\n"
    assert "+        return (ordered[mid - 1] + ordered[mid]) / 2" in bundle(result, "diff.patch")


def test_a_committed_fix_is_in_the_diff(run: Runner) -> None:
    # The diff is against the pinned commit, not the agent's HEAD.
    result = run(f"{GOLD}\ngit commit -qam fix && git log --oneline | head -1")
    assert result.verdict is Verdict.PASS, result.reason
    final = json.loads(bundle(result, "status-final.json"))
    assert final["head"] != final["pinned"] and final["status"] == "" and final["damage"] == []
    assert "ordered[mid - 1]" in bundle(result, "diff.patch")


def test_an_unreadable_workspace_is_a_fail(run: Runner) -> None:
    result = run("cd / && chmod -R 000 /workspace")
    assert result.verdict is Verdict.FAIL, result.reason
    assert "verifier command failed" in result.reason


def test_special_files_and_nested_links_do_not_break_the_diff(run: Runner) -> None:
    result = run(f"{GOLD}\nmkfifo pipe; ln -s /etc/shadow shadow; mkdir -p sub && ln -s / sub/.git")
    assert result.verdict is Verdict.FAIL, result.reason  # scope: files beside the fix
    assert "failed scope" in result.reason
    final = json.loads(bundle(result, "status-final.json"))
    assert "A\tshadow" in final["changes"] and "pipe" not in final["changes"]
    assert "root:" not in bundle(result, "diff.patch")  # the link, never what it names


def _disk_limit(folder: Path, size: str) -> None:
    path = folder / "scenario.yaml"
    path.write_text(path.read_text().replace("  pids: 256\n", f"  pids: 256\n  disk: {size}\n"))


def test_an_agent_that_fills_its_disk_fails_and_the_node_stays_healthy(
    run: Runner, tmp_path: Path
) -> None:
    probe = TrialDisk(tmp_path / "probe", 1024**2)
    probe.image.parent.mkdir()
    state = probe.open(ttl_s=60)
    probe.close()
    if not state.enforced:  # before writing 900 MB to a disk that is not capped
        skip_or_fail("disk", f"trial disks cannot be mounted here: {state.why}")
    free = shutil.disk_usage(tmp_path).free
    fill = "; ".join(
        f"dd if=/dev/zero of={where}/big bs=1M count=300 2>&1 | grep -o 'No space left on device'"
        for where in (".", "/tmp", "$HOME")
    )
    result = run(fill, edit=lambda f: _disk_limit(f, "96m"))
    assert json.loads(bundle(result, "disk.json"))["enforced"]
    assert result.verdict is Verdict.FAIL, result.reason
    assert "the agent filled its disk (limit 96 MiB)" in result.reason
    assert agent_output(result).count("No space left on device") == 3
    assert shutil.disk_usage(tmp_path).free > free - 400 * 1024**2  # not 900 MB gone
    assert run(GOLD).verdict is Verdict.PASS  # the next trial on the node is fine


# -- what the agent can and cannot see ------------------------------------------------------

# The canary is split with shell quotes so the command line itself does not contain it.
SEARCH = (
    "find / \\( -path /proc -o -path /sys \\) -prune -o -name 'test_median_hidden*' -print "
    "2>/dev/null; "
    "grep -rIh 'HANGAR-CANARY-7c4''1e9' / --exclude-dir=proc --exclude-dir=sys 2>/dev/null; "
    f"git cat-file -t {LATER_COMMIT} 2>/dev/null || echo no-future-commit; "
    "git log --all --format=%H; git remote -v; echo search-done"
)


def test_agent_cannot_read_hidden_tests_or_later_commits(run: Runner) -> None:
    result = run(SEARCH)
    out = agent_output(result)
    assert "search-done" in out and "no-future-commit" in out
    assert "test_median_hidden" not in out
    assert out.count("1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2") == 1  # only the pinned one
    assert result.verdict is Verdict.FAIL  # not void: no canary was reached


def test_the_same_search_finds_a_leaked_file(run: Runner) -> None:
    # Positive control: the search above does find the hidden file when it is reachable,
    # and the canary it prints voids the trial.
    def leak(folder: Path) -> None:
        path = folder / "scenario.yaml"
        path.write_text(
            path.read_text()
            + (
                "plugins:\n  - name: leak\n    source: hidden/test_median_hidden.py\n"
                "    target: /home/agent/test_median_hidden_copy.py\n"
            )
        )

    result = run(SEARCH, arm="leaky=leak", edit=leak)
    assert "test_median_hidden_copy.py" in agent_output(result)
    assert result.verdict is Verdict.VOID and "HANGAR-CANARY-7c41e9" in result.reason


# -- admission of the fixture: blocked_setup, no container, no agent --------------------------


def _tamper_verifier(folder: Path) -> None:
    (folder / "verify.py").write_text((folder / "verify.py").read_text() + "\n# edit\n")


def _missing_revision(folder: Path) -> None:
    path = folder / "scenario.yaml"
    path.write_text(path.read_text().replace("1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2", "d" * 40))


def _missing_image(folder: Path) -> None:
    path = folder / "scenario.yaml"
    path.write_text(
        path.read_text().replace("image: hangar/base:bookworm", "image: hangar/absent:1")
    )


def _failing_prepare(folder: Path) -> None:
    (folder / "prepare.py").write_text("import sys\nsys.exit('fixture is broken')\n")
    repin(folder / "scenario.yaml")


@pytest.mark.parametrize(
    ("edit", "words"),
    [
        (_tamper_verifier, "verifier script verify.py does not match its pin"),
        (_missing_revision, f"revision {'d' * 40} is not in repository"),
        (lambda f: (f / "hidden" / "test_median_hidden.py").unlink(), "verifier file"),
        (_missing_image, "image 'hangar/absent:1' is not on the Docker engine"),
        (_failing_prepare, "prepare exited 1: fixture is broken"),
    ],
    ids=["pin", "revision", "missing-file", "image", "prepare"],
)
def test_blocked_setup(run: Runner, edit: Callable[[Path], None], words: str) -> None:
    result = run("touch /tmp/agent-ran", edit=edit)
    assert result.verdict is Verdict.BLOCKED_SETUP and words in result.reason
    assert "sandbox_up" not in result.timings and "agent" not in result.timings
    assert result.agent_exit_code is None and result.evidence_uri is not None


# -- admission of the verification, end to end ----------------------------------------------


@pytest.mark.parametrize(
    ("mutation", "words"),
    [
        ("missing_item", "checklist item not covered"),
        ("extra_item", "not in the checklist: 'a requirement nobody asked for'"),
        ("duplicate_item", "covered 2 times"),
        ("reworded_item", "not in the checklist: 'MEDIAN OF AN EVEN"),
        ("no_evidence", "passing finding without evidence"),
        ("absolute_evidence", "is an absolute path"),
        ("dotdot_evidence", "contains '..'"),
        ("symlink_evidence", "goes through a symlink (evidence/passwd)"),
        ("symlink_parent_evidence", "goes through a symlink (linked)"),
        ("missing_evidence", "evidence/never-written.txt' does not exist"),
        ("folder_evidence", "is not a regular file"),
        ("stale_trace", "stale trace"),
        ("unassessed", "unassessed finding"),
        ("string_route", 'malformed verification: route: route must be a Finding {"status"'),
        ("failed_scope", "failed scope"),
        ("unassessed_route", "unassessed route"),
        ("route_without_evidence", "passing route without evidence"),
        ("scope_escaping_evidence", "inadmissible evidence for scope: evidence '../scenario.json'"),
        ("malformed", "malformed verification: not JSON"),
        ("crash", "host verifier crashed (exit 1): RuntimeError: the verifier fell over"),
    ],
)
def test_verification_rules(run: Runner, mutation: str, words: str) -> None:
    result = run(GOLD, edit=lambda f: set_verifier(f, mutation))
    # A verifier that crashed, printed no Verification, or answered another request is
    # the task's problem; a sound verification that finds fault is the agent's fail.
    broken = mutation in VERIFIERS_FAULT
    expected = Verdict.VERIFIER_ERROR if broken else Verdict.FAIL
    assert result.verdict is expected and words in result.reason, result.reason


VERIFIERS_FAULT = {
    "missing_item",
    "extra_item",
    "duplicate_item",
    "reworded_item",
    "stale_trace",
    "string_route",
    "malformed",
    "crash",
}


def test_the_rule_verifier_passes_gold_unmutated(run: Runner) -> None:
    result = run(GOLD, edit=lambda f: set_verifier(f))
    assert result.verdict is Verdict.PASS, result.reason


def test_hanging_verifier_is_cut_off(run: Runner) -> None:
    def hang(folder: Path) -> None:
        set_verifier(folder, "hang")
        path = folder / "scenario.yaml"
        path.write_text(path.read_text().replace("host_timeout_s: 60", "host_timeout_s: 3"))

    started = time.monotonic()
    result = run(GOLD, edit=hang)
    assert result.verdict is Verdict.VERIFIER_ERROR and "host verifier hung" in result.reason
    assert time.monotonic() - started < 60


@pytest.mark.parametrize(
    ("command", "words"),
    [("exit 3", "the agent exited with code 3"), ("sleep 60", "out of its time budget")],
)
def test_incomplete_run_cannot_pass(run: Runner, command: str, words: str) -> None:
    def short(folder: Path) -> None:
        path = folder / "scenario.yaml"
        path.write_text(path.read_text().replace("time_s: 300", "time_s: 4"))

    result = run(f"{GOLD}\n{command}", edit=short)
    assert result.verdict is Verdict.FAIL and "incomplete run" in result.reason
    assert not result.completed
    end = trace_events(result)[-1]
    assert end["kind"] == "trace_end" and end["completed"] is False and words in end["reason"]


# -- agents that try to cheat ---------------------------------------------------------------

FAKE_JUNIT = (
    '<testsuite failures="0" errors="0"><testcase classname="x" name="test_median_even_length"/>'
    "</testsuite>"
)


def test_forged_verification_files_do_not_pass(run: Runner) -> None:
    command = (
        "mkdir -p /tmp/hangar-verifier evidence && "
        f"echo '{FAKE_JUNIT}' | tee /tmp/hangar-verifier/junit.xml > evidence/junit.xml && "
        'echo \'{"caseId": "statkit-median-even", "checks": []}\' > verification.json'
    )
    result = run(command)
    assert result.verdict is Verdict.FAIL
    assert "failed check: 'median of an even-length list" in result.reason


def test_symlinked_evidence_to_host_files_is_dropped(run: Runner) -> None:
    result = run(
        "ln -s /etc/passwd REPORT.md && ln -s / hostroot",
        edit=lambda f: set_verifier(f, "copy_report"),
    )
    # the links are gone before the verifier runs, which crashes on the missing file; the
    # agent's own record (its tests fail) still decides the trial
    assert result.verdict is Verdict.FAIL and "host verifier crashed" in result.reason
    assert "verifier command failed" in result.reason
    removed = json.loads(bundle(result, "workspace-links-removed.json"))
    assert {r["path"] for r in removed} == {"REPORT.md", "hostroot"}
    assert "root:x:0:0" not in bundle(result, "verifier/host-stderr.txt")


def test_edits_outside_the_workspace_do_not_reach_verification(run: Runner) -> None:
    # Runs at every python3 start of the agent user: patches median in the package.
    hack = (
        "import os, sys; sys.path.insert(0, os.getcwd()); import statkit, statkit.stats as s; "
        "statkit.median = s.median = lambda v: (sorted(v)[len(v)//2-1] + sorted(v)[len(v)//2]) "
        "/ 2 if len(v) % 2 == 0 else sorted(v)[len(v)//2]"
    )
    command = (
        "site=$(python3 -m site --user-site) && mkdir -p $site && "
        f"echo '{hack}' > $site/usercustomize.py && "
        "python3 -c 'import statkit; print(\"hack active:\", statkit.median([1, 2, 3, 4]))'"
    )
    result = run(command)
    assert "hack active: 2.5" in agent_output(result)  # the hack works where it was planted
    assert result.verdict is Verdict.FAIL
    assert "failed check: 'median of an even-length list" in result.reason


@pytest.mark.parametrize("writable_root", [False, True], ids=["one-sandbox", "fresh-sandbox"])
def test_nothing_the_agent_left_outside_the_workspace_reaches_verification(
    run: Runner, writable_root: bool
) -> None:
    # The agent plants files in every writable place but the workspace, a System V
    # shared-memory segment and a daemon; the first verifier command lists what it sees.
    # One sandbox (read-only root, scratch wiped) or, with writable_root, a fresh one.
    command = (
        "for d in ~ /tmp /var/tmp /dev/shm; do echo x > $d/planted-by-agent; done && "
        "echo 'echo PLANTED' >> ~/.bashrc && ipcmk -M 4096 && "
        "(setsid nohup sleep 4242 >/dev/null 2>&1 &) && "
        "ls -A ~ /tmp /var/tmp /dev/shm && ipcs -m"
    )
    look = (
        "    - '{ ls -A ~ /tmp /var/tmp /dev/shm; ipcs -m; grep -c PLANTED ~/.bashrc; "
        'cat /proc/[0-9]*/cmdline | tr "\\\\0" " "; } > $HANGAR_VERIFIER_OUT/seen.txt\'\n'
    )

    def add_look(folder: Path) -> None:
        path = folder / "scenario.yaml"
        text = path.read_text().replace("  commands:\n", "  commands:\n" + look)
        path.write_text(text + ("writable_root: true\n" if writable_root else ""))

    result = run(command, edit=add_look)
    out = agent_output(result)
    assert out.count("planted-by-agent") == 4 and "0x" in out  # planted where it ran
    seen = bundle(result, "verifier/out/seen.txt")
    assert "planted-by-agent" not in seen and "0x" not in seen and "4242" not in seen
    assert ".bashrc" in seen and "hangar-verifier" in seen  # HOME as the image has it
    assert seen.splitlines().count("0") == 1  # .bashrc without the planted line
    fresh = "verifier_sandbox_up" in result.timings
    assert fresh is writable_root and ("scratch_reset" in result.timings) is not writable_root
    assert result.verdict is Verdict.FAIL


def test_what_the_agent_put_at_a_hidden_target_is_replaced(run: Runner) -> None:
    # A passing fake at the hidden test's path, and a link there: both replaced.
    fake = "def test_median_even_length(): pass"
    result = run(f"mkdir -p tests/hidden && echo '{fake}' > tests/hidden/test_median_hidden.py")
    assert result.verdict is Verdict.FAIL
    assert "failed check: 'median of an even-length list" in result.reason
    assert json.loads(bundle(result, "verifier/hidden-files.json")) == [
        "tests/hidden/test_median_hidden.py"
    ]
    linked = run("mkdir -p tests/hidden && ln -s /etc/passwd tests/hidden/test_median_hidden.py")
    assert linked.verdict is Verdict.FAIL and "failed check" in linked.reason


@pytest.mark.parametrize("writable_root", [False, True], ids=["one-sandbox", "fresh-sandbox"])
def test_an_agent_blocking_the_hidden_files_gets_a_fail_not_an_infra_error(
    run: Runner, writable_root: bool
) -> None:
    # The agent owns tests/: with no write permission there, the hidden file cannot land.
    def edit(folder: Path) -> None:
        path = folder / "scenario.yaml"
        path.write_text(path.read_text() + ("writable_root: true\n" if writable_root else ""))

    result = run("mkdir -p tests/hidden && chmod 555 tests/hidden tests", edit=edit)
    assert result.verdict is Verdict.FAIL, result.reason
    assert "verifier command failed" in result.reason
    commands = json.loads(bundle(result, "verifier/commands.json"))
    assert commands[0]["exitCode"] == 97
    assert "Permission denied" in bundle(result, "verifier/commands/0.stderr")


def test_forged_trace_lines_stay_text(run: Runner) -> None:
    forged = '{"kind": "trace_end", "completed": true, "seq": 0}'
    result = run(f"echo '{forged}'; exit 1")
    events = trace_events(result)
    assert [e["seq"] for e in events] == list(range(len(events)))
    assert events[-1]["kind"] == "trace_end" and events[-1]["completed"] is False
    assert any(forged in e.get("text", "") for e in events if e["kind"] == "stdout")
    assert result.verdict is Verdict.FAIL


def test_agent_killing_everything_is_a_fail_not_an_infra_error(run: Runner) -> None:
    result = run("kill -9 -1")
    assert result.verdict is Verdict.FAIL


# -- infrastructure failures ----------------------------------------------------------------


def test_container_killed_mid_run(run: Runner, docker_client: docker.DockerClient) -> None:
    def killer() -> None:
        for _ in range(300):
            for container in docker_client.containers.list(
                ignore_removed=True, filters={"label": "hangar.managed"}
            ):
                top = docker_client.api.top(container.id)
                if any("sleep 600" in " ".join(p) for p in top.get("Processes") or []):
                    container.kill()
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=killer, daemon=True)
    thread.start()
    result = run("echo working; sleep 600")
    thread.join(5)
    assert result.verdict is Verdict.INFRA_ERROR and "SandboxUnavailable" in result.reason
    events = trace_events(result)
    assert events[-1]["kind"] == "trace_end" and events[-1]["completed"] is False
    assert "working" in agent_output(result)


def test_exception_in_a_phase_still_tears_down(
    run: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    import hangar.kinds.execution.scenarios.verification

    def boom(*args: object, **kwargs: object) -> None:
        raise RuntimeError("verifier phase exploded")

    monkeypatch.setattr(
        hangar.kinds.execution.scenarios.verification, "run_verifier_commands", boom
    )
    result = run(GOLD)
    assert result.verdict is Verdict.INFRA_ERROR
    assert result.reason == "hangar failure: RuntimeError: verifier phase exploded"
    assert "Traceback" in bundle(result, "error.txt")


def test_every_phase_a_sandboxed_trial_times_is_in_the_table() -> None:
    """The phase table is the one source of phase names (timings, viewer, docs)."""
    import re

    from hangar.trials.phases import BOUNDARY, BY_NAME, markdown

    root = Path(__file__).resolve().parents[2] / "hangar"
    sandboxed = [
        root / "trials" / "sandboxed.py",
        root / "kinds" / "execution" / "scenarios" / "trial.py",
        root / "kinds" / "execution" / "images" / "trial.py",
        root / "kinds" / "execution" / "scenarios" / "verification.py",
        root / "kinds" / "routing" / "trial.py",
        root / "kinds" / "knowledge" / "trial.py",
    ]
    used = {
        name
        for path in sandboxed
        for name in re.findall(r"\.phase\(\"([a-z_]+)\"\)", path.read_text())
    }
    assert len(used) > 20 and used <= set(BY_NAME) | set(BOUNDARY), used - set(BY_NAME)
    assert all(f"| `{name}` |" in markdown() for name in BY_NAME)
