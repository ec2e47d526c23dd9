"""Before a sweep's first trial: each model checked once, all at once; the pools' SDKs
loaded ahead of their first call."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from hangar.models import ModelSpec
from hangar.models.exists import start_checks


class _Together(BaseHTTPRequestHandler):
    """Answers a chat call only once `server.barrier` has as many calls waiting as it
    has parties: calls asked one after another never answer (a 400 saying so)."""

    server: Any

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.asked.append(body["model"])
        try:
            self.server.barrier.wait()
        except threading.BrokenBarrierError:
            self._send(400, {"error": {"message": "asked one at a time", "type": "test"}})
            return
        self._send(
            200,
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 0,
                "model": body["model"],
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "OK"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6},
            },
        )

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def together(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    monkeypatch.setenv("HANGAR_CHECK_KEY", "sk-test")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Together)
    server.daemon_threads = True
    server.asked = []
    server.barrier = threading.Barrier(3, timeout=20)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()


def _model(server: Any, model_id: str, **more: Any) -> ModelSpec:
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    return ModelSpec(id=model_id, base_url=url, api_key_env="HANGAR_CHECK_KEY", **more)


def test_each_model_is_asked_once_and_all_at_once(together: Any) -> None:
    # Three models (one named twice, one of no provider): the server answers only when
    # all three calls wait on it together.
    a, b, c = (_model(together, m) for m in ("model-a", "model-b", "model-c"))
    asked = start_checks([a, b, ModelSpec(id="offline", provider="none"), a, c])
    checks = asked()
    assert [c.model for c in checks] == ["model-a", "model-b", "model-c"]  # the sweep's order
    assert all(c.ok and c.error is None and not c.note for c in checks), checks
    assert sorted(together.asked) == ["model-a", "model-b", "model-c"]
    assert all(c.usage.input_tokens == 5 for c in checks)


def test_a_sweep_of_no_provider_asks_nothing() -> None:
    assert start_checks([ModelSpec(id="offline", provider="none")])() == []


WARM = """
import sys
from hangar.models import ModelSpec
from hangar.models.complete import warm_up
from hangar.models.policy import _process_transport
models = [ModelSpec(id="claude-sonnet-4-5", provider="anthropic")]
models.append(ModelSpec(id="x", provider="none"))
warm_up(models)
print(sorted(m for m in ("anthropic", "openai", "google.genai") if m in sys.modules))
print(_process_transport.cache_info().currsize)
"""


def test_a_pool_loads_the_sdk_of_each_api_its_models_speak_before_a_call() -> None:
    # In a process of its own: what the test run imported must not count.
    out = subprocess.run([sys.executable, "-c", WARM], capture_output=True, text=True, check=True)
    assert out.stdout.split("\n")[:2] == ["['anthropic']", "1"], out.stdout + out.stderr


def test_a_missing_sdk_is_left_to_the_first_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # A pool whose model's SDK is not installed still starts: its trials say what is
    # missing, each in its result (the constructor's failure would lose them all).
    import hangar.models.complete as complete

    tried: list[str] = []

    def missing(name: str) -> Any:
        tried.append(name)
        raise ImportError(f"No module named {name!r}")

    monkeypatch.setattr(complete.importlib, "import_module", missing)
    complete.warm_up([ModelSpec(id="gemini-2.5-pro", provider="google")])
    assert tried == ["google.genai"]


def test_a_thread_that_keeps_its_own_transport_uses_it_and_others_share_one() -> None:
    """The driver's pool threads each keep a connection pool (`keep_own_transports`);
    any other thread (a rubric's judge calls, a model check) shares the process's, so
    a short-lived thread still finds a connection kept alive."""
    import os
    import threading

    from hangar.models.policy import keep_own_transports, shared_transport

    seen: dict[str, list[object]] = {}

    def calls(name: str, own: bool) -> None:
        if own:
            keep_own_transports()
        seen[name] = [shared_transport("httpx2", os.getpid()) for _ in range(2)]

    threads = [
        threading.Thread(target=calls, args=(name, own))
        for name, own in (
            ("own-1", True),
            ("own-2", True),
            ("shared-1", False),
            ("shared-2", False),
        )
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    process = shared_transport("httpx2", os.getpid())
    assert all(a is b for a, b in seen.values())  # the same one at each call
    assert seen["shared-1"][0] is seen["shared-2"][0] is process
    assert seen["own-1"][0] is not seen["own-2"][0]
    assert process not in (seen["own-1"][0], seen["own-2"][0])
