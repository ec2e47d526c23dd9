"""hangar's logs: plain text for people, or JSON lines for log shippers.

`configure("json")` makes every log record one JSON object per line on stderr
(``ts``, ``level``, ``logger``, ``msg``, and the record's ``event`` fields when it has
any), so Loki, Fluent Bit or Vector can take them as they are. `event` logs a structured
event: a sentence for the text format, its fields for JSON. Whatever a field holds
(agent output in a reason included) is JSON-escaped, so a line is always one record.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any


class LogFormat(StrEnum):
    """How logs are written."""

    text = "text"
    json = "json"


_TEXT = "%(levelname)s %(name)s: %(message)s"


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        data.update(getattr(record, "event", None) or {})
        if record.exc_info:
            data["exc"] = self.formatException(record.exc_info)
        return json.dumps(data, default=str, ensure_ascii=False)


def configure(fmt: LogFormat = LogFormat.text, level: int = logging.WARNING) -> None:
    """Send hangar's (and Ray's Python) logs to stderr in `fmt`; replaces earlier handlers."""
    handler = logging.StreamHandler(sys.stderr)
    json_lines = fmt == LogFormat.json
    handler.setFormatter(JsonFormatter() if json_lines else logging.Formatter(_TEXT))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    if json_lines:
        # Events (a trial finished, a sweep started) are what a shipper wants to count.
        logging.getLogger("hangar").setLevel(logging.INFO)


def event(logger: logging.Logger, message: str, **fields: Any) -> None:
    """Log `message` at INFO with structured `fields` (JSON keys; ignored as text)."""
    logger.info(message, extra={"event": fields})
