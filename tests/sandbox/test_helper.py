"""hangar's helper: the one program hangar runs inside a sandbox.

On the host: it is static, its ``timeout`` behaves as coreutils' does, its keeper lives
as long as its lease, its forwarder speaks the relay's frames and refuses an oversized
one. On docker: an agent running as root that replaces the image's shell tools and
python3, and kills every process it can, neither stops its sandbox nor its tunnel, and
hangar's commands still keep their time limits.
"""

from __future__ import annotations

import io
import os
import socket
import struct
import subprocess
import time
from pathlib import Path

import pytest

from hangar.models.forwarder import DATA, EOF, HEADER, MAX_FRAME, OPEN, READY
from hangar.sandbox.helper import HELPER_UID, helper_binary

HELPER = str(helper_binary())


def test_the_helper_is_static() -> None:
    data = Path(HELPER).read_bytes()
    phoff = int.from_bytes(data[32:40], "little")
    size, count = int.from_bytes(data[54:56], "little"), int.from_bytes(data[56:58], "little")
    kinds = [
        int.from_bytes(data[phoff + i * size : phoff + i * size + 4], "little")
        for i in range(count)
    ]
    assert 3 not in kinds  # no PT_INTERP: no dynamic loader, no LD_PRELOAD, no ld.so.preload
    out = subprocess.run([HELPER, "ids"], capture_output=True, text=True, check=True).stdout
    assert out.split() == [str(os.getuid()), str(os.getgid())]


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["-k", "1s", "0.3s", "sh", "-c", "sleep 5 & sleep 5"], 124),
        (["-k", "0.3s", "0.3s", "sh", "-c", "trap '' TERM; sleep 5"], 137),
        (["5", "sh", "-c", "exit 7"], 7),
        (["5", "no-such-program-anywhere"], 127),
        (["5", "sh", "-c", "kill -9 $$"], 137),
    ],
)
def test_timeout_answers_as_coreutils_does(argv: list[str], code: int) -> None:
    for program in ([HELPER, "timeout"], ["timeout"]):
        started = time.monotonic()
        proc = subprocess.run([*program, *argv], capture_output=True, start_new_session=True)
        # killed by a signal: as a shell (and docker) reports it
        status = 128 - proc.returncode if proc.returncode < 0 else proc.returncode
        assert status == code, (program, proc)
        assert time.monotonic() - started < 4


def test_timeout_finds_commands_only_where_it_is_told(tmp_path: Path) -> None:
    """The PATH of its own environment is never read: only `-p`, else the system's folders."""
    planted = tmp_path / "sh"
    planted.write_text(f"#!/bin/sh\ntouch {tmp_path}/ran\nexit 9\n")
    planted.chmod(0o755)
    (tmp_path / "locked").write_text("#!/bin/sh\n")
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
    run = lambda *argv: subprocess.run([HELPER, "timeout", *argv], env=env).returncode  # noqa: E731
    assert run("5", "sh", "-c", "exit 7") == 7 and not (tmp_path / "ran").exists()
    assert run("-p", f"/nowhere::{tmp_path}", "5", "sh") == 9 and (tmp_path / "ran").exists()
    assert run("-p", str(tmp_path), "5", "locked") == 126  # there, but not executable
    assert run("-p", str(tmp_path), "5", "cat", "/dev/null") == 127  # not in the folders given
    assert run("-k", "1s", "-p", "/usr/bin:/bin", "5", "sh", "-c", "exit 3") == 3


def test_timeout_kills_the_whole_group(tmp_path: Path) -> None:
    marker = tmp_path / "survived"
    subprocess.run(
        [
            HELPER,
            "timeout",
            "-k",
            "0.2s",
            "0.3s",
            "sh",
            "-c",
            f"(sleep 1; touch {marker}) & sleep 5",
        ],
        start_new_session=True,
    )
    time.sleep(1.5)
    assert not marker.exists()


def test_the_keeper_lives_while_its_lease_is_fresh(tmp_path: Path) -> None:
    lease = tmp_path / "lease"
    lease.touch()
    keeper = subprocess.Popen([HELPER, "keeper", str(lease), "3", "1"])
    time.sleep(1.5)
    assert keeper.poll() is None
    os.utime(lease, (time.time() - 10, time.time() - 10))
    assert keeper.wait(timeout=5) == 0
    assert (
        subprocess.run([HELPER, "keeper", str(tmp_path / "none"), "3", "1"], timeout=5).returncode
        == 0
    )


def test_files(tmp_path: Path) -> None:
    deep = tmp_path / "a" / "b" / "c"
    assert subprocess.run([HELPER, "mkdir", str(deep), str(deep)]).returncode == 0
    assert deep.is_dir()
    (deep / "f").write_text("hi")
    (tmp_path / "keep").write_text("kept")
    (deep / "link").symlink_to(tmp_path / "keep")
    cat = subprocess.run([HELPER, "cat", str(deep / "f")], capture_output=True)
    assert cat.stdout == b"hi"
    os.mkfifo(tmp_path / "fifo")  # never opened to wait on, nor read from a device
    for special in (tmp_path / "fifo", Path("/dev/zero")):
        cat = subprocess.run([HELPER, "cat", str(special)], capture_output=True, timeout=10)
        assert cat.returncode == 1 and b"not a regular file" in cat.stderr
    (tmp_path / "big").write_bytes(b"x" * (3 << 20))
    cat = subprocess.run([HELPER, "cat", str(tmp_path / "big")], capture_output=True)
    assert len(cat.stdout) == 1 << 20
    assert (
        subprocess.run([HELPER, "remove", str(tmp_path / "a"), str(tmp_path / "none")]).returncode
        == 0
    )
    assert not (tmp_path / "a").exists() and (tmp_path / "keep").read_text() == "kept"


def _frames(proc: subprocess.Popen[bytes], n: int) -> list[tuple[int, int, bytes]]:
    assert proc.stdout is not None
    out = []
    for _ in range(n):
        kind, channel, size = HEADER.unpack(proc.stdout.read(HEADER.size))
        out.append((kind, channel, proc.stdout.read(size)))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_forwarder_speaks_the_relays_frames_and_refuses_an_oversized_one() -> None:
    port = _free_port()
    proc = subprocess.Popen(
        [HELPER, "forward", str(port)], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    assert proc.stdin is not None
    try:
        assert _frames(proc, 1) == [(READY, 0, b"")]
        client = socket.create_connection(("127.0.0.1", port))
        client.sendall(b"hello")
        client.shutdown(socket.SHUT_WR)
        assert _frames(proc, 3) == [(OPEN, 1, b""), (DATA, 1, b"hello"), (EOF, 1, b"")]
        proc.stdin.write(HEADER.pack(DATA, 1, 5) + b"world" + HEADER.pack(EOF, 1, 0))
        proc.stdin.flush()
        assert client.recv(100) == b"world" and client.recv(100) == b""
        proc.stdin.write(struct.pack(">BII", DATA, 1, MAX_FRAME + 1))
        proc.stdin.flush()
        assert proc.wait(timeout=5) == 3
    finally:
        proc.kill()


@pytest.mark.docker
def test_a_root_agent_cannot_end_its_sandbox_its_tunnel_or_hangars_timeouts(
    docker_client: object, tmp_path: Path
) -> None:
    """The agent, as root, replaces the image's sleep, stat, timeout and python3 with
    programs that fail, and kills every process it may signal: the keeper and the
    forwarder (hangar's helper, as a user of its own) live on, and a command hangar runs
    with a time limit is still cut at it."""
    import socketserver
    import threading

    from hangar.models.tunnel import RelayTunnel
    from hangar.sandbox import SandboxSpec
    from hangar.sandbox.docker import DockerSandbox
    from hangar.sandbox.lease import CHECK_S

    class Echo(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            self.request.sendall(b"relay:" + self.request.recv(100))

    path = tmp_path / "relay.sock"
    server = socketserver.ThreadingUnixStreamServer(str(path), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    spec = SandboxSpec(image="hangar/base:bookworm-stock", user="root", home="/root", workdir="/")
    try:
        with DockerSandbox(spec) as box:
            tunnel = RelayTunnel.open(box, 4000, path)
            ps = box.exec(["ps", "-eo", "uid,args"]).stdout
            assert f"{HELPER_UID} /run/hangar/helper forward 4000" in ps
            assert f"{HELPER_UID} /run/hangar/helper keeper" in ps
            broken = "printf '#!/bin/sh\\nexit 1\\n' > /tmp/x && chmod +x /tmp/x && " + " && ".join(
                f"cp /tmp/x $(readlink -f $(command -v {tool}))"
                for tool in ("sleep", "stat", "timeout", "date", "python3")
            )
            assert box.exec(["bash", "-c", broken]).ok
            box.exec(["bash", "-c", "kill -9 -1"])
            time.sleep(CHECK_S + 1)
            res = box.exec(["bash", "-c", "echo alive; exec 3<>/dev/tcp/127.0.0.1/4000; "
                            "echo ping >&3; head -c 11 <&3"])  # fmt: skip
            assert res.stdout == "alive\nrelay:ping\n", res
            started = time.monotonic()
            res = box.exec(["bash", "-c", "while :; do :; done"], timeout=1)
            assert res.timed_out and time.monotonic() - started < 10
            tunnel.close()
    finally:
        server.shutdown()
        server.server_close()


def test_tar_writes_a_folder_without_following_a_link(tmp_path: Path) -> None:
    """What the Kubernetes backend copies out with: every file, long names, links as
    links (never followed, even to a folder), no FIFO waited on; extracted back the same."""
    import tarfile

    from hangar.sandbox.archive import extract_untrusted

    root = tmp_path / "root"
    deep = root / ("d" * 120) / "sub"
    deep.mkdir(parents=True)
    (deep / ("f" * 150)).write_bytes(b"long name")
    (root / "a.txt").write_text("alpha")
    (root / "exec.sh").write_text("#!/bin/sh\n")
    (root / "exec.sh").chmod(0o755)
    (root / "big.bin").write_bytes(os.urandom(200_000))
    (root / "link").symlink_to("a.txt")
    (root / "out").symlink_to("/etc")  # a link to a folder outside: written, not followed
    (root / "far").symlink_to("../" + "x" * 120)
    os.mkfifo(root / "pipe")
    proc = subprocess.run([HELPER, "tar", str(root)], capture_output=True, timeout=30)
    assert proc.returncode == 1 and b"pipe: a FIFO" in proc.stderr  # named, left out
    with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["./out"].issym() and members["./out"].linkname == "/etc"
    assert members["./far"].linkname == "../" + "x" * 120
    assert not any(name.startswith("./out/") for name in members)
    assert members["./exec.sh"].mode & 0o777 == 0o755
    assert "./pipe" not in members
    copy = tmp_path / "copy"
    skipped: list[str] = []
    extract_untrusted(io.BytesIO(proc.stdout), copy, strip=1, limit=1 << 30, skipped=skipped)
    assert (copy / "big.bin").read_bytes() == (root / "big.bin").read_bytes()
    assert (copy / ("d" * 120) / "sub" / ("f" * 150)).read_bytes() == b"long name"
    assert (copy / "link").read_text() == "alpha"
    assert sorted(s.split(":")[0] for s in skipped) == ["far", "out"]  # links out: left out
    missing = subprocess.run([HELPER, "tar", str(root / "a.txt")], capture_output=True)
    assert missing.returncode == 3 and missing.stdout == b""
