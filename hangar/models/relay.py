"""The model relay: how an agent with no network reaches its model.

Inside the sandbox, the agent sees ordinary base URLs on its own loopback
(``OPENAI_BASE_URL=http://127.0.0.1:PORT/v1``, ``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT``)
and a per-trial token as its API key. A small forwarder (`forwarder.py`, stdlib only)
listens there and tunnels each connection over its own exec stream to the host
(`tunnel.py`), which joins it to a unix socket on the host. On that socket,
`ModelRelay` serves HTTP:

- it checks the trial's token from the request's head and the body's length against
  the model's ``max_request_bytes`` before reading any of the body (401, 413; a chunked
  body gets 411); it refuses everything the trial's
  `RelayPolicy` does not allow (403: another model, another endpoint or method,
  provider-hosted tools, the account's files and stored state, URLs for the provider to
  fetch), and logs each refusal in the trace as ``model_refused``; a refused request
  never reaches the provider; the models list is answered here;
- it adds the real key (from the host environment) and forwards the request to the
  model's endpoint, and nowhere else (``store`` forced off on Responses);
- it streams the response back as it arrives (SSE included), and meters the call's
  usage from the provider's own response; each call is a ``model_call`` trace event;
- an upstream that is slow, fails or drops the stream gets the agent a clear error
  (502/504, or the upstream's own status), never a hang past the relay's timeout; the
  relay remembers provider failures no later call recovered from, and a refused key
  (`provider_error`), so the trial can tell them from the agent's own failure.

The sandbox never sees the real key: not in its environment, its files, or the socket.
"""

from __future__ import annotations

import hmac
import itertools
import json
import secrets
import socketserver
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode

import httpx

from hangar.errors import HangarError
from hangar.models import ModelSpec
from hangar.models.dialects import Upstream, throttle_wait, upstream
from hangar.models.errors import classify
from hangar.models.policy import RelayPolicy
from hangar.models.pricing import cost_of
from hangar.models.usage import add, from_body
from hangar.results import ProviderError, Usage
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
    "x-goog-api-client",
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

    # Every other method is refused by the policy, and logged like any refusal.
    do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = do_POST


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
        self.policy = RelayPolicy(model)
        self._calls_ok = 0  # index of the last call that succeeded
        self._unavailable: tuple[int, ProviderError] | None = None  # (call index, error)
        self._auth: ProviderError | None = None
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
        threading.Thread(
            target=server.serve_forever, args=(0.05,), daemon=True, name="hangar-relay"
        ).start()  # a short poll: stop() returns at once
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
            "GOOGLE_GEMINI_BASE_URL": base,
            "GEMINI_API_KEY": self.token,
            "GOOGLE_API_KEY": self.token,
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

    def _authorised(self, h: _Handler, query: dict[str, str]) -> bool:
        offered = h.headers.get("x-api-key") or h.headers.get("x-goog-api-key") or ""
        offered = offered or query.get("key", "")
        bearer = h.headers.get("Authorization") or ""
        if bearer.lower().startswith("bearer "):
            offered = offered or bearer[7:].strip()
        return hmac.compare_digest(offered.encode(), self.token.encode())

    def _api_path(self, path: str) -> str:
        """The request path relative to the provider's endpoint (the agent's base URL for
        OpenAI-compatible models ends in ``/v1``; Anthropic's is the host itself)."""
        if self.model.family in ("anthropic", "google") or not path.startswith("/v1/"):
            return path
        return path[len("/v1") :]

    def _refused(self, h: _Handler, status: int, path: str, reason: str, **fields: Any) -> None:
        with self._lock:
            self.refused += 1
        self._event("model_refused", path=path, method=h.command, reason=reason, **fields)
        self._reply(h, status, f"hangar relay: {reason}")

    def _body(self, h: _Handler, path: str) -> bytes | None:
        """The request's body, read only once its length is known and within the cap
        (None: refused, and answered)."""
        if h.headers.get("Transfer-Encoding"):
            self._refused(h, 411, path, "send the body with a Content-Length (not chunked)")
            return None
        given = h.headers.get("Content-Length") or "0"
        if not given.isascii() or not given.isdigit():
            self._refused(h, 400, path, f"Content-Length {given[:40]!r} is not a number")
            return None
        if int(given) > self.model.max_request_bytes:
            self._refused(
                h, 413, path, f"the request body is {given} bytes, over the relay's cap of "
                f"{self.model.max_request_bytes} (the model's max_request_bytes)",
            )  # fmt: skip
            return None
        return h.rfile.read(int(given))

    def handle(self, h: _Handler) -> None:
        """Serve one request (see the module docstring). The token is checked from the
        request's head, and the body's length against the cap, before any of the body
        is read."""
        path, _, raw_query = h.path.partition("?")
        query = dict(parse_qsl(raw_query, keep_blank_values=True))
        if not self._authorised(h, query):
            self._refused(h, 401, path, "missing or wrong trial token")
            return
        if (body := self._body(h, path)) is None:
            return
        payload: Any = None
        if body:
            try:
                payload = json.loads(body)
            except ValueError:
                self._refused(h, 400, path, "the request body is not JSON")
                return
        api_path = self._api_path(path)
        decision = self.policy.decide(h.command, api_path, query, payload)
        if decision.local is not None:
            self._event("model_local", path=path, answer="models list")
            self._json(h, 200, decision.local)
            return
        if not decision.allowed or decision.body is None:
            requested = payload.get("model") if isinstance(payload, dict) else None
            self._refused(h, 403, path, decision.reason, requested=requested)
            return
        payload = decision.body
        stream = bool(payload.get("stream")) or ":streamGenerateContent" in api_path
        # the trial token never goes upstream, not even as a query parameter
        raw_query = urlencode([(k, v) for k, v in parse_qsl(raw_query, True) if k != "key"])
        if stream and api_path == "/chat/completions":
            # Meter streamed chat calls from the provider's own usage chunk.
            payload["stream_options"] = {
                **(payload.get("stream_options") or {}),
                "include_usage": True,
            }

        def call() -> Upstream:  # made again for each try: a signature is of its time
            return upstream(self.model, self._key, api_path, raw_query, payload)

        try:
            call()
        except (HangarError, ValueError) as exc:  # the node's credentials, or a route
            with self._lock:
                self.calls += 1
                self.errors.append(str(exc))
            self._event("model_call", model=self.model.id, path=path, status=502, error=str(exc))
            self._reply(h, 502, f"hangar relay: {exc}")
            return
        self._forward(h, path, api_path, call, stream)

    def provider_error(self) -> ProviderError | None:
        """The provider's failure that is not the agent's: a refused key, or a failure
        (5xx, 429, timeout, dropped stream) no later call of the trial recovered from."""
        with self._lock:
            if self._auth is not None:
                return self._auth
            if self._unavailable is not None and self._unavailable[0] > self._calls_ok:
                return self._unavailable[1]
        return None

    def _json(self, h: _Handler, status: int, data: dict[str, Any]) -> None:
        raw = json.dumps(data).encode()
        h.send_response(status)
        h.send_header("Content-Type", "application/json")
        h.send_header("Content-Length", str(len(raw)))
        h.end_headers()
        h.wfile.write(raw)

    def _forward(
        self, h: _Handler, path: str, api_path: str, call: Callable[[], Upstream], stream: bool
    ) -> None:
        method = h.command
        started = time.monotonic()
        seen = bytearray()
        sent: list[int] = []  # the status, once it went back to the agent
        error, agent_gone = "", False
        try:
            self._stream_back(h, call, seen, sent)
        except httpx.TimeoutException as exc:
            error = f"upstream timed out after {self.timeout_s:g} s ({type(exc).__name__})"
            if not sent:
                self._reply(h, 504, f"hangar relay: {error}")
        except httpx.HTTPError as exc:
            error = f"upstream failed: {type(exc).__name__}: {exc}"
            if not sent:
                self._reply(h, 502, f"hangar relay: {error}")
        except OSError as exc:  # the agent went away
            error = f"agent connection lost: {exc}"
            self._event("agent_disconnected", path=path, error=str(exc))
            agent_gone = True
        status = sent[0] if sent else 0
        usage = self._meter(path, api_path, status, error, bytes(seen), stream)
        with self._lock:
            self.calls += 1
            if usage is not None:
                self.usage = add(self.usage, usage)
            if error or status >= 400:
                self.errors.append(error or f"HTTP {status}")
            if not agent_gone:
                self._classify(status, error, bytes(seen[:2000]), generates=method == "POST")
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

    def _stream_back(
        self, h: _Handler, call: Callable[[], Upstream], seen: bytearray, sent: list[int]
    ) -> None:
        """Send the call upstream with the real key (`call`: the dialect's URL, key and
        body) and stream the answer back to the agent as it comes (the first 10 MiB kept
        in `seen` for metering); its status goes into `sent` as soon as it is sent back
        (after that, no error reply can be). A cloud's throttling answer is not sent back:
        the call goes again after the provider's back-off (`throttle_wait`), while the
        relay's timeout allows."""
        waited = 0.0
        for retries in itertools.count():
            made = call()
            own = {k.lower() for k in made.headers}  # the dialect's (signed) headers win
            headers = {
                k: v for k, v in h.headers.items() if k.lower() in _FORWARD and k.lower() not in own
            }
            headers["Accept-Encoding"] = "identity"
            headers.update(made.headers)
            answer = self._client.stream(h.command, made.url, content=made.content, headers=headers)
            with answer as up:
                wait = throttle_wait(self.model, up.status_code, up.headers, retries)
                if wait is not None and waited + wait < self.timeout_s:
                    up.read()
                    self._event("model_throttled", status=up.status_code, wait_s=round(wait, 3))
                    waited += wait
                    time.sleep(wait)
                    continue
                self._send_back(h, up, made, seen, sent)
                return

    def _send_back(
        self, h: _Handler, up: httpx.Response, made: Upstream, seen: bytearray, sent: list[int]
    ) -> None:
        sent.append(up.status_code)
        framed = made.reframe() if made.reframe and up.status_code == 200 else None
        h.send_response(up.status_code)
        for name in _BACK:
            if name in up.headers and not (framed and name == "content-type"):
                h.send_header(name, up.headers[name])
        if framed is not None:  # the provider's answer, in the caller's API
            h.send_header("content-type", framed.content_type)
        h.send_header("Connection", "close")
        h.end_headers()
        h.close_connection = True
        for raw in itertools.chain(up.iter_raw(), [None]):  # None: the answer's end
            if framed is not None:
                chunk = framed.close() if raw is None else framed.feed(raw)
            else:
                chunk = raw or b""
            if not chunk:
                continue
            h.wfile.write(chunk)
            h.wfile.flush()
            if len(seen) < 10 * MiB:
                seen += chunk

    def _meter(
        self, path: str, api_path: str, status: int, error: str, seen: bytes, stream: bool
    ) -> Usage | None:
        """The call's usage and cost (None for a failed call); a response the trial may
        continue later is noted by the policy."""
        content_type = "text/event-stream" if stream else "application/json"
        usage = from_body(path, seen, content_type) if status == 200 else None
        if status == 200 and not error:
            self.policy.note_response(api_path, content_type, seen)
        if usage is None:
            return None
        provider = self.model.price_table
        return cost_of(usage, self.model.id, provider, self.model.price)

    def _classify(self, status: int, error: str, head: bytes, *, generates: bool) -> None:
        """Remember what a finished call says about the provider (the lock is held). Only
        a call that asks the model (a POST) can say the model does not exist: a CLI's probe
        of a route the provider lacks (a GET) says nothing of it."""
        words = error or head.decode(errors="replace")[:300]
        failure = classify(
            status or None, words, self.model.id, self.model.key_env, transient=bool(error)
        )
        if failure is not None and failure.kind == "not_found" and not generates:
            failure = None
        if failure is not None and failure.stops_model:
            self._auth = failure
        elif failure is not None:
            self._unavailable = (self.calls, failure)
        elif status < 400:
            self._calls_ok = self.calls
