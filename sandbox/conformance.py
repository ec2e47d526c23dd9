"""The sandbox conformance battery: what every backend must do, as pytest tests.

hangar's own backends pass it (``tests/sandbox``), and so can a backend from a package of
its own (an entry point of ``hangar.sandboxes``, `hangar.plugins`): in that package's
tests, one module takes the battery and a ``conftest.py`` names the backend::

    # test_hangar_conformance.py
    from hangar.sandbox.conformance import *  # noqa: F403

    # conftest.py
    import pytest
    from hangar.sandbox.conformance import expect

    @pytest.fixture
    def backend(request: pytest.FixtureRequest) -> str:
        return expect(request, "mybackend", {"test_exec_as_other_user": ("xfail", "why")})

A backend that cannot do something by design lists the test with the reason: ``xfail``
(strict: if it starts passing, the list is wrong) or ``skip`` (unsafe to run against it,
e.g. a fork bomb on the host). The sandboxes start `sandbox_image` (override the fixture
for another image; default ``HANGAR_TEST_IMAGE``, else ``hangar/base:bookworm``).
"""

from __future__ import annotations

import hashlib
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from hangar.errors import (
    SandboxError,
    SandboxFileNotFound,
    SandboxFileTooLarge,
    SandboxIsADirectory,
    SandboxUnavailable,
)
from hangar.sandbox import Mount, Sandbox, SandboxLimits, SandboxSpec, sandbox_class
from hangar.sandbox.ending import END_USER_PROCESSES

pytestmark = pytest.mark.docker

#: Starts a sandbox of the backend under test (`SandboxSpec` fields as keywords).
MakeSandbox = Callable[..., Sandbox]
#: Test name -> ("xfail" or "skip", why): what a backend cannot do by design.
Expected = Mapping[str, tuple[str, str]]


def expect(request: pytest.FixtureRequest, backend: str, expected: Expected) -> str:
    """`backend`, with its expected failures applied to the test `request` runs (for a
    ``backend`` fixture)."""
    found = expected.get(request.node.originalname)
    if found is not None:
        kind, reason = found
        if kind == "skip":
            pytest.skip(f"{backend}: {reason}")
        request.applymarker(pytest.mark.xfail(reason=f"{backend}: {reason}", strict=True))
    return backend


@pytest.fixture
def sandbox_image() -> str:
    """The image the battery's sandboxes start."""
    return os.environ.get("HANGAR_TEST_IMAGE", "hangar/base:bookworm")


@pytest.fixture
def make_sandbox(backend: str, sandbox_image: str) -> Iterator[MakeSandbox]:
    """Start sandboxes of the backend under test; all are closed after the test (and on
    docker, none of their containers is left)."""
    made: list[Sandbox] = []
    trial = f"test-{uuid.uuid4().hex[:12]}"

    def make(**overrides: Any) -> Sandbox:
        spec = SandboxSpec(image=sandbox_image, sweep="conformance", trial=trial, **overrides)
        sandbox = sandbox_class(backend)(spec)
        made.append(sandbox)
        sandbox.start()
        return sandbox

    yield make
    for sandbox in made:
        sandbox.close()
    if backend == "docker":
        from hangar.sandbox.docker import docker_client

        left = docker_client().containers.list(
            all=True, ignore_removed=True, filters={"label": f"hangar.trial={trial}"}
        )
        assert not left, f"containers left behind: {[c.id for c in left]}"


@pytest.fixture
def sandbox(make_sandbox: MakeSandbox) -> Sandbox:
    """One started sandbox with the default spec."""
    return make_sandbox()


def _docker_only(backend: str) -> None:
    if backend != "docker":
        pytest.skip(f"{backend}: the test reads docker's own API")


# -- exec -----------------------------------------------------------------------------------


def test_exec_stdout_stderr_exit_code(sandbox: Sandbox) -> None:
    res = sandbox.exec("echo out; echo err >&2; exit 3")
    assert (res.returncode, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert not res.ok and not res.timed_out and not res.oom_killed


def test_exec_argv_is_not_shell_parsed(sandbox: Sandbox) -> None:
    res = sandbox.exec(["echo", "$HOME", "a b", "'q'"])
    assert res.ok and res.stdout == "$HOME a b 'q'\n"


def test_exec_string_runs_in_shell(sandbox: Sandbox) -> None:
    assert sandbox.exec("echo $((40 + 2))").stdout == "42\n"


def test_missing_program_is_a_result(sandbox: Sandbox) -> None:
    res = sandbox.exec(["hangar-no-such-program"])
    assert res.returncode in (126, 127) and not res.ok


def test_exec_stdin_text_and_bytes(sandbox: Sandbox) -> None:
    assert sandbox.exec(["cat"], stdin="héllo\nwörld").stdout == "héllo\nwörld"
    blob = bytes(range(256)) * 64
    res = sandbox.exec(["sha256sum"], stdin=blob)
    assert res.stdout.split()[0] == hashlib.sha256(blob).hexdigest()


def test_exec_without_stdin_sees_eof(sandbox: Sandbox) -> None:
    res = sandbox.exec(["cat"], timeout=20)
    assert res.ok and res.stdout == "" and not res.timed_out


def test_exec_cwd(sandbox: Sandbox) -> None:
    sandbox.write_file("sub/dir/marker.txt", "x")
    assert sandbox.exec(["ls"], cwd="sub/dir").stdout == "marker.txt\n"
    assert sandbox.exec("ls", cwd=sandbox.resolve("sub")).stdout == "dir\n"


def test_exec_env_layers(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(env={"A": "from-spec", "B": "spec-b"})
    assert sb.exec('echo "$A $B"', env={"B": "from-exec"}).stdout == "from-spec from-exec\n"
    assert sb.exec('echo "$B"').stdout == "spec-b\n"


def test_home_is_private_and_writable(sandbox: Sandbox) -> None:
    assert sandbox.exec('touch "$HOME/.marker" && echo ok').stdout == "ok\n"
    assert sandbox.read_file(f"{sandbox.spec.home}/.marker") == ""


def test_exec_as_other_user(sandbox: Sandbox) -> None:
    assert sandbox.exec(["id", "-un"]).stdout == "agent\n"
    assert sandbox.exec(["id", "-un"], user="root").stdout == "root\n"


_ALIVE = (
    'for p in $(cat pids); do s=$(cut -d" " -f3 /proc/$p/stat 2>/dev/null); '
    '[ -n "$s" ] && [ "$s" != Z ] && echo "$p"; done; true'
)


def _wait_gone(sandbox: Sandbox) -> str:
    for _ in range(50):
        alive = sandbox.exec(_ALIVE).stdout
        if not alive:
            return ""
        time.sleep(0.1)
    return alive


def test_timeout_kills_the_process_inside(sandbox: Sandbox) -> None:
    res = sandbox.exec("sleep 300 & echo $! > pids; echo $$ >> pids; sleep 300", timeout=1)
    assert res.timed_out and not res.ok and res.returncode in (124, 137)
    assert res.duration_s < 30
    assert sandbox.exec("wc -l < pids").stdout.strip() == "2"
    assert _wait_gone(sandbox) == "", "processes survived their timeout"


def test_timeout_kills_a_process_that_ignores_term(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(kill_after_s=1)
    res = sb.exec("trap '' TERM; echo $$ > pids; sleep 300 & echo $! >> pids; wait", timeout=1)
    assert res.timed_out and res.returncode == 137
    assert _wait_gone(sb) == ""


def test_output_cap_keeps_the_tail(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(output_limit=1000)
    res = sb.exec("seq 1 100000; echo small >&2")
    assert res.ok and res.stdout_truncated and not res.stderr_truncated
    assert len(res.stdout) == 1000 and res.stdout.endswith("\n99999\n100000\n")
    assert res.stderr == "small\n"


def test_output_just_under_the_cap_is_whole(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(output_limit=4096)
    res = sb.exec("head -c 4096 /dev/zero | tr '\\0' x")
    assert res.stdout == "x" * 4096 and not res.stdout_truncated


def test_output_streams_to_callback(sandbox: Sandbox) -> None:
    seen: list[tuple[str, bytes]] = []
    res = sandbox.exec(
        "for i in 1 2 3; do echo line$i; sleep 0.2; done; echo bad >&2",
        on_output=lambda stream, chunk: seen.append((stream, chunk)),
    )
    assert b"".join(c for s, c in seen if s == "stdout").decode() == res.stdout
    assert b"".join(c for s, c in seen if s == "stderr") == b"bad\n"
    assert len([1 for s, _ in seen if s == "stdout"]) >= 2, "output was not streamed"


# -- files ----------------------------------------------------------------------------------


def test_write_and_read_text(sandbox: Sandbox) -> None:
    sandbox.write_file("notes.txt", "héllo wörld\nline 2\n")
    assert sandbox.read_file("notes.txt") == "héllo wörld\nline 2\n"
    assert sandbox.exec(["cat", "notes.txt"]).stdout == "héllo wörld\nline 2\n"


def test_write_and_read_binary(sandbox: Sandbox) -> None:
    blob = bytes(range(256)) * 10
    sandbox.write_file("blob.bin", blob)
    assert sandbox.read_file("blob.bin", text=False) == blob


def test_empty_file(sandbox: Sandbox) -> None:
    sandbox.write_file("empty", b"")
    assert sandbox.read_file("empty", text=False) == b""
    assert sandbox.exec(["stat", "-c", "%s", "empty"]).stdout == "0\n"


def test_utf8_names(sandbox: Sandbox) -> None:
    name = "dossier ünï/cødé 名前.txt"
    sandbox.write_file(name, "ok")
    assert sandbox.read_file(name) == "ok"
    assert "cødé 名前.txt" in sandbox.exec(["ls", "dossier ünï"]).stdout


def test_large_file_roundtrip(sandbox: Sandbox) -> None:
    blob = os.urandom(20 * 1024 * 1024)
    sandbox.write_file("big.bin", blob)
    res = sandbox.exec(["sha256sum", "big.bin"])
    assert res.stdout.split()[0] == hashlib.sha256(blob).hexdigest()
    assert sandbox.read_file("big.bin", text=False) == blob


def test_write_creates_parents_and_user_owns_file(sandbox: Sandbox) -> None:
    sandbox.write_file("a/b/c.txt", "one\n")
    assert sandbox.exec("echo two >> a/b/c.txt && touch a/b/new").ok
    assert sandbox.read_file("a/b/c.txt") == "one\ntwo\n"


def test_write_absolute_path(sandbox: Sandbox) -> None:
    sandbox.write_file("/tmp/hangar-abs.txt", "abs")
    assert sandbox.read_file("/tmp/hangar-abs.txt") == "abs"


def test_write_mode(sandbox: Sandbox) -> None:
    sandbox.write_file("run.sh", "#!/bin/sh\necho ran\n", mode=0o755)
    assert sandbox.exec(["./run.sh"]).stdout == "ran\n"


def test_read_missing_file_is_a_clear_error(sandbox: Sandbox) -> None:
    with pytest.raises(SandboxFileNotFound, match="no-such-file") as info:
        sandbox.read_file("no-such-file")
    assert isinstance(info.value, FileNotFoundError)


def test_read_directory_is_a_clear_error(sandbox: Sandbox) -> None:
    sandbox.write_file("d/f", "x")
    with pytest.raises(SandboxIsADirectory, match="copy_out"):
        sandbox.read_file("d")


def test_read_cap(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(read_limit=1000)
    sb.write_file("ok.bin", b"x" * 1000)
    assert len(sb.read_file("ok.bin", text=False)) == 1000
    sb.write_file("big.bin", b"x" * 1001)
    with pytest.raises(SandboxFileTooLarge, match="read cap"):
        sb.read_file("big.bin")


def test_read_follows_symlink_inside(sandbox: Sandbox) -> None:
    sandbox.write_file("real.txt", "real")
    assert sandbox.exec(["ln", "-s", "real.txt", "link.txt"]).ok
    assert sandbox.read_file("link.txt") == "real"


def _tree(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_symlink():
            out[rel] = f"-> {p.readlink()}"
        elif p.is_file():
            out[rel] = p.read_bytes()
        else:
            out[rel] = "dir"
    return out


def test_open_stream_carries_bytes_both_ways(sandbox: Sandbox) -> None:
    # `cat` echoes stdin to stdout: what goes in must come back whole and in order.
    stream = sandbox.open_stream(["cat"])
    payload = os.urandom(300_000)
    writer = threading.Thread(target=stream.send, args=(payload,))
    writer.start()
    got = b""
    while len(got) < len(payload):
        chunk = stream.recv()
        assert chunk, "the stream ended early"
        got += chunk
    writer.join()
    assert got == payload
    stream.close()
    assert stream.recv() == b""


def test_copy_directory_in_and_out(sandbox: Sandbox, tmp_path: Path) -> None:
    src = tmp_path / "src"
    (src / "sub" / "deeper").mkdir(parents=True)
    (src / "empty-dir").mkdir()
    (src / "a.txt").write_text("alpha\n")
    (src / "sub" / "b.bin").write_bytes(bytes(range(256)))
    (src / "sub" / "deeper" / "ünï.txt").write_text("deep\n")
    (src / "link").symlink_to("a.txt")
    sandbox.copy_in(src, "proj")
    assert sandbox.exec(["cat", "proj/sub/deeper/ünï.txt", "proj/link"]).stdout == "deep\nalpha\n"
    assert sandbox.exec("echo changed > proj/a.txt && touch proj/new").ok
    out = tmp_path / "out"
    sandbox.copy_out("proj", out)
    expected = _tree(src)
    expected["a.txt"], expected["new"] = b"changed\n", b""
    assert _tree(out) == expected


def test_copy_out_refuses_links_that_escape(sandbox: Sandbox, tmp_path: Path) -> None:
    assert sandbox.exec("mkdir -p leak && ln -s /etc/passwd leak/passwd").ok
    with pytest.raises(SandboxError, match="unsafe"):
        sandbox.copy_out("leak", tmp_path / "out")
    assert not (tmp_path / "out" / "passwd").exists()
    assert sandbox.exec("mkdir -p up && ln -s ../../../../.. up/root").ok
    with pytest.raises(SandboxError, match="unsafe"):
        sandbox.copy_out("up", tmp_path / "out2")


def test_copy_out_cap(make_sandbox: MakeSandbox, tmp_path: Path) -> None:
    sb = make_sandbox(read_limit=10_000)
    assert sb.exec("mkdir d && head -c 20000 /dev/zero > d/big").ok
    with pytest.raises(SandboxFileTooLarge):
        sb.copy_out("d", tmp_path / "out")


def test_mounted_folder_is_shared(make_sandbox: MakeSandbox, tmp_path: Path) -> None:
    shared = tmp_path / "trial"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    (shared / "from-host.txt").write_text("host\n")
    sb = make_sandbox(mounts=(Mount(source=shared, target="/trial"),))
    assert sb.exec(["cat", "/trial/from-host.txt"]).stdout == "host\n"
    assert sb.exec("echo sandbox > /trial/from-sandbox.txt").ok
    assert (shared / "from-sandbox.txt").read_text() == "sandbox\n"


# -- lifecycle ------------------------------------------------------------------------------


def test_close_is_idempotent_and_final(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox()
    sb.close()
    sb.close()
    with pytest.raises(SandboxError):
        sb.exec(["true"])


def test_context_manager_closes_after_error(backend: str, sandbox_image: str) -> None:
    sb = sandbox_class(backend)(SandboxSpec(image=sandbox_image, trial="ctx-error"))
    with pytest.raises(RuntimeError, match="boom"), sb:
        assert sb.exec(["true"]).ok
        raise RuntimeError("boom")
    with pytest.raises(SandboxError):
        sb.exec(["true"])


# -- isolation ------------------------------------------------------------------------------


def test_network_has_only_loopback(sandbox: Sandbox) -> None:
    res = sandbox.exec("tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '")
    assert res.ok and res.stdout.split() == ["lo"]


@pytest.fixture
def host_server() -> tuple[int, threading.Event]:
    """A TCP server on the host's loopback that records whether anyone connected."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    touched = threading.Event()
    stop = time.monotonic() + 60

    def serve() -> None:
        while time.monotonic() < stop:
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            touched.set()
            conn.close()
        srv.close()

    threading.Thread(target=serve, daemon=True).start()
    return srv.getsockname()[1], touched


_CONNECT = """
import socket, sys
try:
    socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=3).close()
    print("connected")
except OSError as e:
    print("refused", e)
"""


def test_host_loopback_server_unreachable(
    sandbox: Sandbox, host_server: tuple[int, threading.Event]
) -> None:
    port, touched = host_server
    # Positive control: the same client reaches the server from the host.
    with socket.create_connection(("127.0.0.1", port), timeout=3):
        pass
    assert touched.wait(5)
    touched.clear()
    res = sandbox.exec(["python3", "-c", _CONNECT, str(port)], timeout=30)
    assert res.stdout.startswith("refused"), res.stdout + res.stderr
    assert not touched.wait(1)


def test_dns_fails(sandbox: Sandbox) -> None:
    res = sandbox.exec(
        ["python3", "-c", "import socket; print(socket.getaddrinfo('example.com', 443))"],
        timeout=30,
    )
    assert res.returncode != 0 and "gaierror" in res.stderr


def test_host_files_invisible(make_sandbox: MakeSandbox, tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("top secret")
    visible = tmp_path / "trial"
    visible.mkdir()
    (visible / "ok.txt").write_text("ok")
    sb = make_sandbox(mounts=(Mount(source=visible, target="/trial", read_only=True),))
    assert sb.exec(["cat", "/trial/ok.txt"]).stdout == "ok"  # positive control
    for path in (str(secret), str(tmp_path), "/var/run/docker.sock", str(Path.cwd())):
        assert not sb.exec(["test", "-e", path]).ok, f"{path} is visible in the sandbox"
    found = sb.exec(
        "grep -rlsI --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev 'top secret' /; true",
        timeout=300,
    )
    assert found.stdout == "" and not found.timed_out


def test_not_root_and_no_privileges(sandbox: Sandbox) -> None:
    assert sandbox.exec(["id", "-u"]).stdout.strip() != "0"
    status = sandbox.exec(["cat", "/proc/self/status"]).stdout
    assert "NoNewPrivs:\t1" in status and "CapEff:\t0000000000000000" in status
    res = sandbox.exec(["python3", "-c", "import os; os.setuid(0)"])
    assert res.returncode != 0 and "PermissionError" in res.stderr
    root_status = sandbox.exec(["cat", "/proc/self/status"], user="root").stdout
    assert "CapEff:\t0000000000000000" in root_status, "root in the sandbox kept capabilities"
    # Without CAP_CHOWN even the sandbox's root cannot give a file away.
    res = sandbox.exec(["chown", "1000", "/etc/passwd"], user="root")
    assert res.returncode != 0 and "not permitted" in res.stderr


def test_agent_cannot_kill_the_sandbox(sandbox: Sandbox) -> None:
    res = sandbox.exec("kill -9 -1; echo survived")
    assert sandbox.exec(["echo", "alive"]).stdout == "alive\n", res


_USER_LEFTOVERS = """
setsid nohup sh -c 'trap "" TERM HUP INT; while :; do sleep 1; done' >/dev/null 2>&1 &
setsid nohup sleep 1000 >/dev/null 2>&1 &
ipcmk -M 4096 >/dev/null
python3 -c "import os; os.close(os.open('/dev/mqueue/left', os.O_CREAT | os.O_WRONLY))"
echo planted > /dev/shm/note && mkdir /dev/shm/locked && touch /dev/shm/locked/x
chmod 000 /dev/shm/locked
"""
_USER_PROCESSES = "for d in /proc/[0-9]*; do [ -O $d ] && [ ${d#/proc/} != $$ ] && echo $d; done"


def test_ending_user_processes_leaves_nothing_of_the_user(sandbox: Sandbox) -> None:
    assert sandbox.exec(_USER_LEFTOVERS).ok
    assert sandbox.exec(_USER_PROCESSES).stdout.count("/proc/") >= 2  # the daemons run
    assert "0x" in sandbox.exec(["ipcs", "-m"]).stdout
    assert "left" in sandbox.exec("ls -A /dev/mqueue").stdout
    assert sandbox.exec(["/bin/sh", "-c", END_USER_PROCESSES]).ok
    assert sandbox.exec(_USER_PROCESSES).stdout == ""
    assert "0x" not in sandbox.exec(["ipcs", "-m"]).stdout
    assert sandbox.exec(["ls", "-A", "/dev/shm"]).stdout == ""
    assert "left" not in sandbox.exec("ls -A /dev/mqueue 2>&1").stdout
    assert sandbox.exec(["echo", "alive"]).stdout == "alive\n"  # the sandbox itself lives on


def test_ending_finds_what_hides_from_a_glance(sandbox: Sandbox) -> None:
    """The wipes run only where something is left: a dot file alone in /dev/shm, a
    semaphore alone in System V IPC are found and wiped."""
    assert sandbox.exec("echo x > /dev/shm/.hidden && ipcmk -S 1 >/dev/null").ok
    assert "0x" in sandbox.exec(["ipcs", "-s"]).stdout
    assert sandbox.exec(["/bin/sh", "-c", END_USER_PROCESSES]).ok
    assert sandbox.exec(["ls", "-A", "/dev/shm"]).stdout == ""
    assert "0x" not in sandbox.exec(["ipcs", "-s"]).stdout


def test_held_exec_runs_the_second_part_after_the_host(sandbox: Sandbox) -> None:
    """A held exec: the first part's result comes back while the exec waits; the host's
    work happens; the second part runs with its own environment, timeout and result."""
    held = sandbox.exec_held("echo first; echo note >&2; printf 'ab12 0\\n'; exit 3")
    assert (held.first.returncode, held.first.stdout, held.first.stderr) == (
        3,
        "first\nab12 0\n",  # a line that looks like the pause is just output
        "note\n",
    )
    sandbox.write_file("host-did-this", b"meanwhile")  # the host's work
    res = held.resume(
        ["sh", "-c", 'cat host-did-this; echo " $WHO"; cat; echo bye >&2; exit 5'],
        timeout=30,
        env={"WHO": "the second part"},
    )
    assert (res.returncode, res.stdout, res.stderr) == (5, "meanwhile the second part\n", "bye\n")
    held.release()  # after a resume: nothing more happens
    assert sandbox.exec(["echo", "alive"]).stdout == "alive\n"


def test_held_exec_released_or_timed_out(sandbox: Sandbox) -> None:
    held = sandbox.exec_held("true")
    held.release()
    held.release()
    assert sandbox.exec(["echo", "alive"]).stdout == "alive\n"
    held = sandbox.exec_held("true")
    res = held.resume(["sleep", "30"], timeout=1)
    assert res.timed_out and res.duration_s < 20


def test_held_exec_ends_the_user_after_its_second_part(sandbox: Sandbox) -> None:
    """The final status's shape: the user ended first; the second part ends it again."""
    assert sandbox.exec(_USER_LEFTOVERS).ok
    held = sandbox.exec_held(f"{END_USER_PROCESSES}\n{_USER_PROCESSES}; echo ended")
    assert held.first.stdout == "ended\n"  # nothing but the held shell is left
    res = held.resume(["sh", "-c", "setsid nohup sleep 1000 >/dev/null 2>&1 & echo ran"],
                      timeout=30, end_user=True)  # fmt: skip
    assert res.ok and res.stdout == "ran\n"
    assert sandbox.exec(_USER_PROCESSES).stdout == ""


_FORK_BOMB = """
import os, time
children = []
try:
    while len(children) < 2000:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
    print("unbounded", len(children))
except OSError as e:
    print("blocked", len(children), e.errno)
for pid in children:
    os.kill(pid, 9)
"""


def test_fork_bomb_hits_pids_limit(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(limits=SandboxLimits(pids=64))
    res = sb.exec(["python3", "-c", _FORK_BOMB], timeout=60)
    word, count, *_ = res.stdout.split()
    assert word == "blocked" and int(count) < 64, res.stdout
    assert sb.exec(["echo", "still-alive"]).stdout == "still-alive\n"


def test_memory_hog_killed(make_sandbox: MakeSandbox) -> None:
    sb = make_sandbox(limits=SandboxLimits.model_validate({"memory": "128m"}))
    res = sb.exec(
        ["python3", "-c", "x = bytes(range(256)) * (2 * 1024 * 1024); print('survived')"],
        timeout=60,
    )
    assert res.oom_killed and res.returncode == 137 and "survived" not in res.stdout
    assert not res.timed_out
    assert sb.exec(["echo", "after"]).stdout == "after\n"
    # A later SIGKILL that is not an OOM is not reported as one.
    assert not sb.exec("kill -9 $$").oom_killed


def test_held_exec_is_one_exec_on_docker(backend: str, make_sandbox: MakeSandbox) -> None:
    _docker_only(backend)
    from hangar.sandbox.docker import DockerSandbox, docker_client

    sb = make_sandbox()
    assert isinstance(sb, DockerSandbox)
    since = int(time.time()) - 1
    held = sb.exec_held("echo first")
    assert held.resume(["echo", "second"], timeout=30).stdout == "second\n"
    events = docker_client().events(
        since=since,
        until=int(time.time()) + 1,
        decode=True,
        filters={"container": sb.container_id, "event": "exec_start"},
    )
    assert len(list(events)) == 1


def test_killed_from_outside_raises_unavailable(backend: str, make_sandbox: MakeSandbox) -> None:
    _docker_only(backend)
    from hangar.sandbox.docker import DockerSandbox, docker_client

    sb = make_sandbox()
    assert isinstance(sb, DockerSandbox)
    threading.Timer(1.0, lambda: docker_client().api.kill(sb.container_id)).start()
    with pytest.raises(SandboxUnavailable):
        sb.exec(["sleep", "30"], timeout=60)
    with pytest.raises(SandboxUnavailable):
        sb.exec(["true"])
    with pytest.raises(SandboxUnavailable):
        sb.read_file("anything")
