"""The trace of a trial: timestamped JSONL events, written on the host as they happen.

The sandbox never sees the trace file, so an agent cannot edit it; what an agent prints
is recorded as text inside events, never parsed as events. The trace is capped in size
(an agent printing without end cannot fill the disk) and always ends with a
``trace_end`` event that says whether the run completed.
"""

from __future__ import annotations

import codecs
import hashlib
import io
import json
import threading
import time
from pathlib import Path
from typing import Any, TextIO

from hangar.sandbox.base import MiB, Stream

DEFAULT_TRACE_LIMIT = 100 * MiB


class TraceWriter:
    """Appends events to a JSONL file; `close()` seals it and returns its sha256. Without
    a path the events are kept in memory, in `data` once sealed (a trial whose evidence
    never touches a disk)."""

    def __init__(self, path: Path | None, limit: int = DEFAULT_TRACE_LIMIT) -> None:
        self.path = path
        self.limit = limit
        self._file: TextIO = path.open("w", encoding="utf-8") if path else io.StringIO()
        self.data: bytes | None = None
        """The sealed trace's bytes, when kept in memory."""
        # The agent's output and the model relay's calls arrive on different threads.
        self._lock = threading.RLock()
        self._seq = 0
        self._size = 0
        self._dropped = 0
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")("replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")("replace"),
        }
        self.sha256: str | None = None

    @property
    def closed(self) -> bool:
        """Whether `close()` has sealed the trace."""
        return self.sha256 is not None

    def event(self, kind: str, **fields: Any) -> None:
        """Record one event (`ts` is Unix time in seconds, `seq` counts from 0)."""
        with self._lock:
            self._event(kind, fields)

    def _event(self, kind: str, fields: dict[str, Any]) -> None:
        if self.closed:
            raise ValueError("the trace is closed")
        line = json.dumps(
            {"ts": round(time.time(), 6), "seq": self._seq, "kind": kind, **fields},
            ensure_ascii=False,
        )
        if self._size + len(line) > self.limit and kind not in ("trace_end", "truncated"):
            if not self._dropped:
                self._write(
                    json.dumps(
                        {
                            "ts": time.time(),
                            "seq": self._seq,
                            "kind": "truncated",
                            "limit": self.limit,
                        }
                    )
                )
            self._dropped += 1
            return
        self._write(line)

    def _write(self, line: str) -> None:
        self._file.write(line + "\n")
        if self.path is not None:
            self._file.flush()
        self._size += len(line) + 1
        self._seq += 1

    def output(self, stream: Stream, chunk: bytes) -> None:
        """Record a chunk of a command's output (an `OutputCallback`)."""
        with self._lock:
            text = self._decoders[stream].decode(chunk)
            if text:
                self._event(stream, {"text": text})

    def close(self, *, completed: bool, reason: str = "") -> str:
        """Write ``trace_end``, close the file and return its sha256 (idempotent)."""
        with self._lock:
            return self._close(completed, reason)

    def _close(self, completed: bool, reason: str) -> str:
        if self.sha256 is not None:
            return self.sha256
        for stream, decoder in self._decoders.items():
            rest = decoder.decode(b"", final=True)
            if rest:
                self.event(stream, text=rest)
        self.event("trace_end", completed=completed, reason=reason, dropped_events=self._dropped)
        if isinstance(self._file, io.StringIO):
            self.data = self._file.getvalue().encode()
        self._file.close()
        sealed = self.data if self.path is None else self.path.read_bytes()
        assert sealed is not None
        self.sha256 = hashlib.sha256(sealed).hexdigest()
        return self.sha256


def find_canaries(path: Path, canaries: tuple[str, ...]) -> list[str]:
    """The canary strings that appear in the trace file (as written or JSON-escaped)."""
    if not canaries or not path.exists():
        return []
    text = path.read_text(encoding="utf-8", errors="replace")
    hits = []
    for canary in canaries:
        escaped = json.dumps(canary, ensure_ascii=False)[1:-1]
        if canary in text or escaped in text:
            hits.append(canary)
    return hits
