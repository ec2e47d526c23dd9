"""The in-sandbox end of the model relay: TCP on loopback <-> the host's unix socket.

Run inside the sandbox as ``python3 forwarder.py PORT SOCKET``. It binds 127.0.0.1:PORT,
then daemonises, so when the command returns the port is already listening. Every
connection is copied byte for byte to a new connection on SOCKET (the host's relay does
all the HTTP). If the relay cannot be reached, the agent gets an HTTP 502 saying so,
never a network route. Standard library only: it runs on any image with python3.
"""

import contextlib
import os
import socket
import sys
import threading

_BODY = b'{"error": {"type": "hangar_relay", "message": "hangar relay: the relay is not running"}}'
UNAVAILABLE = (
    b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: application/json\r\nConnection: close\r\n"
    b"Content-Length: " + str(len(_BODY)).encode() + b"\r\n\r\n" + _BODY
)


def pipe(src: socket.socket, dst: socket.socket) -> None:
    """Copy src to dst until src ends, then half-close dst."""
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)


def serve(client: socket.socket, path: str) -> None:
    """Join one agent connection to a new relay connection."""
    relay = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        relay.connect(path)
    except OSError:
        try:
            client.sendall(UNAVAILABLE)
        finally:
            client.close()
        return
    back = threading.Thread(target=pipe, args=(relay, client), daemon=True)
    back.start()
    pipe(client, relay)
    back.join()
    client.close()
    relay.close()


def main() -> None:
    port, path = int(sys.argv[1]), sys.argv[2]
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)
    if os.fork():  # the parent returns once the port listens
        os._exit(0)
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    while True:
        client, _ = listener.accept()
        threading.Thread(target=serve, args=(client, path), daemon=True).start()


if __name__ == "__main__":
    main()
