"""The in-sandbox end of the model relay: loopback TCP, tunnelled over the command's stdio.

It binds 127.0.0.1:PORT in the sandbox, says READY, and carries every connection an agent
opens there as a channel of frames on its stdout and stdin; the host end
(`hangar.models.tunnel`) joins each channel to the relay (or the egress proxy), which does
all the HTTP. There is no network route: the sandbox has no interface but loopback, and
bytes leave only through the exec stream of `Sandbox.open_stream` (a docker exec, a
Kubernetes exec over the API server, a local pipe).

Where a backend mounts hangar's static helper (docker), the helper's ``forward`` command is
this end (`hangar.sandbox.helper`: the same frames), so nothing of the image runs in it.
Elsewhere (Kubernetes, whose pods run hangar's base image with a read-only root; the local
backend) this module is run as ``python3 -c SOURCE PORT``: standard library only, any
python3 can run it. The host imports the framing from here, so both ends share one
definition.

A frame is ``kind (1 byte) | channel (4) | length (4) | payload``: READY once, OPEN for a
new connection, DATA both ways, EOF when one side will send no more on a channel. A payload
is at most `MAX_FRAME` bytes; a longer frame ends the stream. When stdin ends (the host
closed the stream) the forwarder exits."""

from __future__ import annotations  # annotations stay text: any python3 can run this

import contextlib
import os
import socket
import struct
import sys
import threading
from collections.abc import Callable, Iterator

HEADER = struct.Struct(">BII")
READY, OPEN, DATA, EOF = 0, 1, 2, 3
CHUNK = 65536
#: The longest payload either end accepts (each end sends at most `CHUNK`): a longer
#: frame ends the stream instead of being buffered until it arrives.
MAX_FRAME = CHUNK + 1024


class FrameError(Exception):
    """The other end broke the framing (a frame longer than `MAX_FRAME`)."""


def frame(kind: int, channel: int, payload: bytes = b"") -> bytes:
    """One frame, ready to write."""
    return HEADER.pack(kind, channel, len(payload)) + payload


def frames(recv: Callable[[], bytes]) -> Iterator[tuple[int, int, bytes]]:
    """The frames in a byte stream read chunk by chunk with `recv` (b"" at its end).
    Raises `FrameError` at a frame longer than `MAX_FRAME`."""
    pending = bytearray()
    while True:
        chunk = recv()
        if not chunk:
            return
        pending += chunk
        at = 0
        while len(pending) - at >= HEADER.size:
            kind, channel, size = HEADER.unpack_from(pending, at)
            if size > MAX_FRAME:
                raise FrameError(f"a frame of {size} bytes (at most {MAX_FRAME})")
            if len(pending) - at < HEADER.size + size:
                break
            yield kind, channel, bytes(pending[at + HEADER.size : at + HEADER.size + size])
            at += HEADER.size + size
        del pending[:at]


class Channels:
    """Connections by channel number; a connection closes once both sides sent EOF."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.socks: dict[int, socket.socket] = {}
        self.ended: dict[int, int] = {}

    def add(self, channel: int, sock: socket.socket) -> None:
        with self.lock:
            self.socks[channel] = sock
            self.ended[channel] = 0

    def get(self, channel: int) -> socket.socket | None:
        with self.lock:
            return self.socks.get(channel)

    def end(self, channel: int) -> None:
        """One side of `channel` is done; close the connection when both are."""
        with self.lock:
            if channel not in self.socks:
                return
            self.ended[channel] += 1
            if self.ended[channel] < 2:
                return
            sock = self.socks.pop(channel)
            del self.ended[channel]
        with contextlib.suppress(OSError):
            sock.close()

    def close_all(self) -> None:
        with self.lock:
            socks, self.socks = list(self.socks.values()), {}
        for sock in socks:
            with contextlib.suppress(OSError):
                sock.close()


def pump(sock: socket.socket, channel: int, send: Callable[[bytes], None], done: Channels) -> None:
    """Copy what arrives on `sock` into DATA frames of `channel`, then an EOF frame."""
    try:
        while True:
            data = sock.recv(CHUNK)
            if not data:
                break
            send(frame(DATA, channel, data))
    except OSError:
        pass
    with contextlib.suppress(OSError):
        send(frame(EOF, channel))
    done.end(channel)


def deliver(kind: int, channel: int, payload: bytes, channels: Channels) -> None:
    """Apply a DATA or EOF frame from the other end to its connection."""
    sock = channels.get(channel)
    if sock is None:
        return
    if kind == DATA:
        with contextlib.suppress(OSError):
            sock.sendall(payload)
    elif kind == EOF:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)
        channels.end(channel)


def main() -> None:
    port = int(sys.argv[-1])
    out = sys.stdout.buffer
    lock = threading.Lock()

    def send(data: bytes) -> None:
        with lock:
            out.write(data)
            out.flush()

    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    channels = Channels()

    def accept() -> None:
        number = 0
        while True:
            client, _ = listener.accept()
            number += 1
            channels.add(number, client)
            send(frame(OPEN, number))
            args = (client, number, send, channels)
            threading.Thread(target=pump, args=args, daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    send(frame(READY, 0))
    with contextlib.suppress(FrameError):  # the host never sends one: end, as at EOF
        for kind, channel, payload in frames(lambda: os.read(0, CHUNK)):
            deliver(kind, channel, payload, channels)
    channels.close_all()  # the host is gone: so is every agent connection
    os._exit(0)


if __name__ == "__main__":
    main()
