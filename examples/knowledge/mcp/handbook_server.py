"""A retrieval MCP server over a pinned snapshot of the knowledge example's handbook.

The example of a retrieval tool a harness pins (knowledge gold sets, the arm
``retrieval:handbook``): it serves ``data/snapshot.json`` (made by ``make-snapshot.py``
from ``repos/handbook.bundle`` at one commit), on the MCP Python SDK, over stdio.

- tool ``search(query, limit)``: the documents that best match the query's words, each
  with its uri (``repo://handbook@<commit>/<path>``), its sha256 and the lines that match;
- tool ``read(uri)``: a document's text;
- resource ``knowledge://manifest``: what the snapshot is (the repository, the commit, how
  many documents): hangar records it as the arm's ``knowledge_snapshot``.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from pathlib import Path

from mcp.server.mcpserver import MCPServer

SNAPSHOT = json.loads((Path(__file__).parent / "data" / "snapshot.json").read_text())
DOCUMENTS = {d["uri"]: d for d in SNAPSHOT["documents"]}
server = MCPServer("handbook")


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def _score(query: list[str], text: str, df: Counter[str], n: int) -> float:
    counts = Counter(_words(text))
    return sum(counts[w] and (1 + math.log(counts[w])) * math.log(1 + n / df[w]) for w in query)


@server.tool()
def search(query: str, limit: int = 5) -> str:
    """Search the handbook: the documents that best match the query, best first, each with
    its uri, sha256 and matching lines."""
    words = _words(query)
    df: Counter[str] = Counter(w for d in DOCUMENTS.values() for w in set(_words(d["text"])))
    ranked = sorted(DOCUMENTS.values(), key=lambda d: -_score(words, d["text"], df, len(DOCUMENTS)))
    hits = []
    for d in ranked[: max(1, min(limit, 10))]:
        if not _score(words, d["text"], df, len(DOCUMENTS)):
            break
        lines = [ln.strip() for ln in d["text"].splitlines() if set(_words(ln)) & set(words)]
        hits.append({"uri": d["uri"], "sha256": d["sha256"], "lines": lines[:4]})
    return json.dumps(hits, indent=1)


@server.tool()
def read(uri: str) -> str:
    """A document's text, by the uri search gave it."""
    document = DOCUMENTS.get(uri)
    return document["text"] if document else f"no document {uri}"


@server.resource("knowledge://manifest")
def manifest() -> str:
    """What this server's knowledge is: the repository and commit of the snapshot."""
    return json.dumps(SNAPSHOT["manifest"])


if __name__ == "__main__":
    server.run()
