"""hangar's observer (the helper's ``observe``, `hangar.sandbox.observe`) on real docker:
what it records of a command's processes, what it refuses them as they run, and that
nothing they do can silence it, fool it or keep it from its record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hangar.sandbox import Mount, SandboxSpec
from hangar.sandbox.docker import DockerSandbox
from hangar.sandbox.observe import (
    COMPLETE,
    NO_PROGRAM,
    RECORD_MOUNT,
    STARTUP,
    STARTUP_MOUNT,
    Record,
    Settings,
    observe_argv,
    read_record,
)

pytestmark = pytest.mark.docker


@pytest.fixture
def box(docker_client: object, tmp_path: Path) -> Iterator[DockerSandbox]:
    record = tmp_path / "record"
    record.mkdir()
    record.chmod(0o777)
    spec = SandboxSpec(
        image="hangar/base:bookworm",
        user="root",
        home="/root",
        workdir="/app",
        mounts=(
            Mount(source=record, target=RECORD_MOUNT),
            Mount(source=STARTUP, target=STARTUP_MOUNT, read_only=True),
        ),
    )
    with DockerSandbox(spec) as sandbox:
        sandbox.record_dir = record  # type: ignore[attr-defined]
        yield sandbox


def observed(
    box: DockerSandbox,
    script: str,
    changed: tuple[str, ...] = (),
    *,
    timeout: float = 30,
    guards: tuple[int, ...] = (),
    path: str = "/usr/local/bin:/usr/bin:/bin",
    program: str = "bash",
) -> tuple[int, Record | None, str]:
    """`script` run by `program` under the observer: its exit code, its record, its
    output."""
    settings = Settings(
        tests="/tests",
        changed=changed,
        path=path,
        home="/root",
        guards=guards,
        marks=("/_pytest/",),
    )
    res = box.exec(
        observe_argv(timeout, 1, program, "-c", script),
        timeout=timeout + 20,
        stdin=settings.encode(),
        env={"PYTHONPATH": STARTUP_MOUNT},
    )
    made = box.record_dir / settings.record_name  # type: ignore[attr-defined]
    record = read_record(made.read_bytes()) if made.exists() else None
    return res.returncode, record, res.stdout + res.stderr


def events(record: Record | None, kind: str) -> list[tuple[str, ...]]:
    assert record is not None
    return [e.fields for e in record.of(kind)]


def test_the_record_shows_what_ran_and_what_of_the_agents_it_read(box: DockerSandbox) -> None:
    assert box.exec(
        ["bash", "-c", "mkdir -p /opt && echo 'print(41 + 1)' > /opt/a.py && echo data > /opt/data"]
    ).ok
    code, record, out = observed(
        box, "python3 /opt/a.py && cat /opt/data", ("/opt/a.py", "/opt/data")
    )
    assert code == COMPLETE and "42" in out and "data" in out
    assert record is not None and record.complete and record.status == "0"
    ran = [(f[0], f[2]) for f in events(record, "E")]
    assert ran[0] == ("/usr/bin/bash", "/usr/bin/bash")
    assert ("/usr/bin/python3", "/usr/bin/python3.11") in ran
    read = {f[1] for f in events(record, "O") if f[0] == "r"}
    assert read == {"/opt/a.py", "/opt/data"}
    marks = [f[1] for f in events(record, "O") if f[0] == "m"]
    assert f"{STARTUP_MOUNT}/started" in marks  # hangar's sitecustomize told the end of start-up
    assert "/usr/lib/python3.11" in [f[0] for f in events(record, "P")]
    # the Python that read the agent's code is the agent's from then on; cat reading data is not
    assert [f[1] for f in events(record, "T")] == ["/opt/a.py"]


def test_no_traced_process_can_silence_trace_or_escape_the_observer(box: DockerSandbox) -> None:
    probe = r"""
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
def call(number, *args):
    r = libc.syscall(number, *args)
    return "refused" if r == -1 else "allowed"
status = open(f"/proc/{os.getppid()}/status").read()  # the script's shell: its parent
observer = int(status.split("PPid:")[1].split()[0])
out = {}
for name, do in [("kill", lambda: os.kill(observer, signal.SIGKILL)),
                 ("kill-all", lambda: os.kill(-1, 0)),
                 ("group", lambda: os.killpg(os.getpgid(observer), 0))]:
    try:
        do(); out[name] = "allowed"
    except OSError:
        out[name] = "refused"
out["ptrace"] = call(101, 0, 0, 0, 0)            # PTRACE_TRACEME
out["io_uring"] = call(425, 8, ctypes.create_string_buffer(120))
out["seccomp"] = call(317, 1, 0, 0)
out["unshare"] = call(272, 0x10000000)           # CLONE_NEWUSER
for name, path, how in [("observer-stdout", f"/proc/{observer}/fd/1", "w"),
                        ("observer-memory", f"/proc/{observer}/mem", "rb")]:
    try:
        open(path, how).close(); out[name] = "allowed"
    except OSError:
        out[name] = "refused"
print(out)
"""
    code, record, out = observed(box, f"python3 - <<'EOF'\n{probe}\nEOF")
    assert code == COMPLETE and record is not None and record.status == "0", out
    for name in (
        "kill",
        "kill-all",
        "group",
        "ptrace",
        "io_uring",
        "seccomp",
        "unshare",
        "observer-stdout",
        "observer-memory",
    ):
        assert f"'{name}': 'refused'" in out, (name, out)


def test_a_process_that_ran_the_agents_code_is_refused_the_guarded_port(
    box: DockerSandbox,
) -> None:
    server = (
        "import socket; s = socket.create_server(('127.0.0.1', 3128)); "
        "[c.sendall(b'ok') or c.close() for c in iter(lambda: s.accept()[0], None)]"
    )
    box.exec(["bash", "-c", f'nohup python3 -c "{server}" >/dev/null 2>&1 &'])
    box.exec(["bash", "-c", "mkdir -p /opt && echo 'VALUE = 1' > /opt/agentmod.py"])
    dial = (
        "import socket, sys; sys.path.insert(0, '/opt'){extra}\n"
        "try:\n    print('{who}', socket.create_connection(('127.0.0.1', 3128), 5).recv(2))\n"
        "except OSError as e:\n    print('{who}', 'refused', e.errno)\n"
    )
    script = (
        "sleep 1; exec 3<>/dev/tcp/127.0.0.1/3128 && echo shell $(cat <&3)\n"
        f'python3 -c "{dial.format(extra="", who="judge")}"\n'
        f'python3 -c "{dial.format(extra="; import agentmod", who="agent")}"\n'
    )
    code, record, out = observed(box, script, ("/opt/agentmod.py",), guards=(3128,))
    assert code == COMPLETE, out
    assert "shell ok" in out and "judge b'ok'" in out
    assert "agent refused 13" in out  # EACCES
    assert events(record, "N") == [("127.0.0.1:3128",)]


def test_special_files_the_agent_made_are_never_opened(box: DockerSandbox) -> None:
    assert box.exec(
        ["bash", "-c", "mkdir -p /opt && mkfifo /opt/pipe && ln -s /dev/zero /opt/zero"]
    ).ok
    script = "cat /opt/pipe; head -c 1 /opt/zero; head -c 1 /dev/zero | wc -c"
    code, record, out = observed(box, script, ("/opt/pipe", "/opt/zero"), timeout=60)
    assert code == COMPLETE and record is not None and not record.deadline, out
    assert out.count("No such device or address") == 2 and "1" in out.split(), out
    assert sorted(f[0] for f in events(record, "R")) == ["/opt/pipe", "/opt/zero"]


def test_the_deadline_ends_everything_and_says_what_was_waiting(box: DockerSandbox) -> None:
    box.exec(["bash", "-c", "mkfifo /tmp/waits"])
    code, record, _ = observed(box, "sleep 600 & cat /tmp/waits", timeout=2)
    assert code == COMPLETE and record is not None
    assert record.deadline and record.status.startswith("signal-")
    waiting = [f[1] for f in events(record, "B")]
    assert "/tmp/waits" in waiting, waiting
    assert box.exec(["bash", "-c", "pgrep -x sleep || echo none"]).stdout.strip() == "none"


def test_the_images_own_shell_runs_never_one_the_agent_put_first(box: DockerSandbox) -> None:
    fake = "mkdir -p /opt/tools/bin && printf '#!/bin/sh\\necho fake\\n' > /opt/tools/bin/bash"
    box.exec(["bash", "-c", f"{fake} && chmod +x /opt/tools/bin/bash"])
    path = "/opt/tools/bin:/usr/bin:/bin"
    code, record, out = observed(box, "echo real", ("/opt/tools/bin/bash",), path=path)
    assert code == COMPLETE and "real" in out and "fake" not in out
    assert events(record, "E")[0][:3] == ("/usr/bin/bash", "/usr/bin/bash", "/usr/bin/bash")
    every = ("/opt/tools/bin/bash", "/usr/bin/bash")
    code, record, out = observed(box, "echo real", every, path=path)
    assert code == NO_PROGRAM and "real" not in out


def test_threads_and_an_exec_from_a_thread_are_the_processes_own(box: DockerSandbox) -> None:
    box.exec(["bash", "-c", "mkdir -p /opt && for i in 1 2 3; do echo $i > /opt/t$i; done"])
    threads = (
        "import os, threading\n"
        "ts = [threading.Thread(target=lambda i=i: open(f'/opt/t{i}').read()) for i in (1, 2, 3)]\n"
        "[t.start() for t in ts]; [t.join() for t in ts]\n"
        "threading.Thread(target=lambda: os.execv('/usr/bin/cat', ['cat', '/opt/t1'])).start()\n"
        "threading.Event().wait(10)\n"
    )
    code, record, out = observed(
        box, f"python3 - <<'EOF'\n{threads}\nEOF", ("/opt/t1", "/opt/t2", "/opt/t3")
    )
    assert code == COMPLETE and record is not None and record.status == "0", out
    python = next(e.pid for e in record.of("E") if e.fields[2] == "/usr/bin/python3.11")
    read = sorted(e.fields[1] for e in record.of("O") if e.pid == python and e.fields[0] == "r")
    assert read == ["/opt/t1", "/opt/t1", "/opt/t2", "/opt/t3"]  # the last by cat, in its place
    assert any(e.pid == python and e.fields[2] == "/usr/bin/cat" for e in record.of("E"))


def test_the_record_is_written_once_every_process_ended_under_a_name_none_knew(
    box: DockerSandbox,
) -> None:
    forge = (
        f"ls {RECORD_MOUNT}; echo 'X 1 0' > {RECORD_MOUNT}/observed-forged; "
        "(sleep 300 &); echo done"
    )
    code, record, out = observed(box, forge)
    assert code == COMPLETE and record is not None and "done" in out
    listed = out.split("done")[0].split()
    assert listed == []  # nothing of the observer's was there while the script ran
    assert record.status == "0" and record.complete
