"""The model relay: how an agent with no network reaches its model.

Inside the sandbox, the agent sees ordinary base URLs on its own loopback
(``OPENAI_BASE_URL=http://127.0.0.1:PORT/v1``, ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT``)
and a per-trial token as its API key. A small forwarder (`forwarder.py`, stdlib only)
listens there and tunnels each connection over its own exec stream to the host
(`tunnel.py`), which joins it to a unix socket on the host. On that socket,
`ModelRelay` serves HTTP:

- it refuses a request without the trial's token (401), or for a model the trial does
  not allow (403), and logs the refusal in the trace;
- it adds the real key (from the host environment) and forwards the request to the
  model's endpoint, and nowhere else;
- it streams the response back as it arrives (SSE included), and meters the call's
  usage from the provider's own response; each call is a ``model_call`` trace event;
- an upstream that is slow, fails or drops the stream gets the agent a clear error
  (502/504, or the upstream's own status), never a hang past the relay's timeout.

The sandbox never sees the real key: not in its environment, its files, or the socket.
"""

from __future__ import annotations

import hmac
import json
import secrets
import socketserver
import threading
import time
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import httpx

from hangar.models import ModelSpec
from hangar.models.pricing import cost_of
from hangar.models.usage import add, from_body
from hangar.results import Usage
from hangar.sandbox.base import MiB
from hangar.trace import TraceWriter

#: Request headers passed upstream (everything else, auth above all, is dropped).
_FORWARD = (
    "content-type",
    "accept",
    "anthropic-version",
    "anthropic-beta",
    "openai-beta",
    "user-agent",
    "x-stainless-lang",
    "x-stainless-package-version",
)
#: Response headers passed back.
_BACK = ("content-type", "request-id", "x-request-id", "retry-after", "openai-processing-ms")


class _Server(socketserver.ThreadingUnixStreamServer):
    daemon_threads = True
    relay: ModelRelay


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # the trace is the log
        pass

    def do_GET(self) -> None:
        self.server.relay.handle(self)

    def do_POST(self) -> None:
        self.server.relay.handle(self)


class ModelRelay:
    """The host end of one trial's relay (see the module docstring)."""

    def __init__(
        self,
        socket_path: Path,
        model: ModelSpec,
        trace: TraceWriter | None = None,
        *,
        timeout_s: float = 600.0,
    ) -> None:
        self.socket_path = socket_path
        self.model = model
        self.trace = trace
        self.token = "hangar-" + secrets.token_urlsafe(24)
        self.timeout_s = timeout_s
        self.usage = Usage()
        self.calls = 0
        self.refused = 0
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._key = model.api_key()  # fails now, before any container, if it is missing
        self._server: _Server | None = None
        self._client = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=15.0), follow_redirects=False
        )

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> ModelRelay:
        """Listen on the socket (mode 0666: the trial token is what authenticates)."""
        self.socket_path.unlink(missing_ok=True)
        server = _Server(str(self.socket_path), _Handler)
        server.relay = self
        self.socket_path.chmod(0o666)
        self._server = server
        threading.Thread(target=server.serve_forever, daemon=True, name="hangar-relay").start()
        return self

    def stop(self) -> None:
        """Stop listening (idempotent); calls in progress are cut off."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        self._client.close()
        self.socket_path.unlink(missing_ok=True)

    def agent_env(self, port: int) -> dict[str, str]:
        """What the agent's environment gets: loopback base URLs and the trial token."""
        base = f"http://127.0.0.1:{port}"
        return {
            "OPENAI_BASE_URL": f"{base}/v1",
            "OPENAI_API_KEY": self.token,
            "ANTHROPIC_BASE_URL": base,
            "ANTHROPIC_API_KEY": self.token,
        }

    # -- one request ----------------------------------------------------------------------

    def _event(self, kind: str, **fields: Any) -> None:
        if self.trace is not None:
            self.trace.event(kind, **fields)

    def _reply(self, h: _Handler, status: int, message: str) -> None:
        data = json.dumps({"error": {"type": "hangar_relay", "message": message}}).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(data)))
        h.send_header("Connection", "close")
        h.end_headers()
        h.wfile.write(data)
        h.close_connection = True

    def _authorised(self, h: _Handler) -> bool:
        offered = h.headers.get("x-api-key") or ""
        bearer = h.headers.get("Authorization") or ""
        if bearer.lower().startswith("bearer "):
            offered = offered or bearer[7:].strip()
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def _upstream(self, path: str) -> str | None:
        """The upstream URL for a request path, or None if the model's API has no such path."""
        messages = path.startswith("/v1/messages")
        if self.model.provider == "anthropic":
            return f"{self.model.endpoint}{path}" if messages else None
        if messages or not path.startswith("/v1/"):
            return None
        return f"{self.model.endpoint}{path[len('/v1') :]}"

    def handle(self, h: _Handler) -> None:
        """Serve one request (see the module docstring)."""
        path = h.path.split("?")[0]
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        if not self._authorised(h):
            with self._lock:
                self.refused += 1
            self._event("model_refused", path=path, reason="missing or wrong trial token")
            self._reply(h, 401, "hangar relay: missing or wrong trial token")
            return
        payload: dict[str, Any] = {}
        if body:
            try:
                payload = json.loads(body)
            except ValueError:
                self._reply(h, 400, "hangar relay: the request body is not JSON")
                return
        requested = str(payload.get("model", "")) if h.command == "POST" else self.model.id
        url = self._upstream(path)
        if requested != self.model.id or url is None:
            with self._lock:
                self.refused += 1
            why = (
                f"model {requested!r} is not allowed in this trial (only {self.model.id!r})"
                if requested != self.model.id
                else f"{path} is not an endpoint of {self.model.provider} model {self.model.id!r}"
            )
            self._event("model_refused", path=path, requested=requested, reason=why)
            self._reply(h, 403, f"hangar relay: {why}")
            return
        stream = bool(payload.get("stream"))
        if stream and path.endswith("/chat/completions"):
            # Meter streamed chat calls from the provider's own usage chunk.
            payload["stream_options"] = {
                **(payload.get("stream_options") or {}),
                "include_usage": True,
            }
            body = json.dumps(payload).encode()
        self._forward(h, h.command, path, url, body, stream)

    def _forward(
        self, h: _Handler, method: str, path: str, url: str, body: bytes, stream: bool
    ) -> None:
        headers = {k: v for k, v in h.headers.items() if k.lower() in _FORWARD}
        headers["Accept-Encoding"] = "identity"
        if self.model.provider == "anthropic":
            headers["x-api-key"] = self._key
        else:
            headers["Authorization"] = f"Bearer {self._key}"
        started = time.monotonic()
        seen = bytearray()
        status, error = 0, ""
        try:
            with self._client.stream(method, url, content=body, headers=headers) as up:
                status = up.status_code
                h.send_response(status)
                for name in _BACK:
                    if name in up.headers:
                        h.send_header(name, up.headers[name])
                h.send_header("Connection", "close")
                h.end_headers()
                h.close_connection = True
                for chunk in up.iter_raw():
                    h.wfile.write(chunk)
                    h.wfile.flush()
                    if len(seen) < 10 * MiB:
                        seen += chunk
        except httpx.TimeoutException as exc:
            error = f"upstream timed out after {self.timeout_s:g} s ({type(exc).__name__})"
            if not status:
                self._reply(h, 504, f"hangar relay: {error}")
        except httpx.HTTPError as exc:
            error = f"upstream failed: {type(exc).__name__}: {exc}"
            if not status:
                self._reply(h, 502, f"hangar relay: {error}")
        except OSError as exc:  # the agent went away
            error = f"agent connection lost: {exc}"
        content_type = "text/event-stream" if stream else "application/json"
        usage = from_body(path, bytes(seen), content_type) if status == 200 else None
        if usage is not None:
            usage = cost_of(
                usage,
                self.model.id,
                self.model.price_provider or self.model.provider,
                self.model.price,
            )
        with self._lock:
            self.calls += 1
            if usage is not None:
                self.usage = add(self.usage, usage)
            if error or status >= 400:
                self.errors.append(error or f"HTTP {status}")
        self._event(
            "model_call",
            model=self.model.id,
            path=path,
            status=status,
            stream=stream,
            duration_s=round(time.monotonic() - started, 3),
            error=error or None,
            usage=usage.model_dump() if usage is not None else None,
        )
