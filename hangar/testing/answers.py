"""A tiny HTTP service on loopback that answers fixed paths: the host an example Harbor
task's verifier reaches through its allowlist (`make demo` and the tests serve it)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: What the example dataset's ``count-words`` task asks for, on its allowlisted port.
EXAMPLE_ANSWERS = {"/count": "9"}
EXAMPLE_PORT = 8799


def serve_answers(answers: dict[str, str], port: int = 0) -> ThreadingHTTPServer:
    """Serve `answers` (path -> text) on 127.0.0.1:`port` (0: a free one) in the
    background; every other path is a 404. ``server.server_address[1]`` is the port."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = answers.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write((body or "not found").encode() + b"\n")

        def log_message(self, format: str, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True, name="hangar-answers").start()
    return server
