"""Writes data/snapshot.json, the handbook retrieval server's knowledge: every file of
repos/handbook.bundle at one commit (default: the handbook at 1.1), with its uri and
sha256. Run it again and the bytes are the same (the pin in examples/knowledge/agents.yaml
stays right)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
BUNDLE = HERE.parents[1] / "repos" / "handbook.bundle"
COMMIT = "dee254872bb216846ae8eeaa1818a5071ed07e7a"


def main(commit: str = COMMIT) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["git", "clone", "-q", "--bare", str(BUNDLE), tmp], check=True)
        names = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", commit], cwd=tmp, check=True,
            capture_output=True, text=True,
        ).stdout.split()  # fmt: skip
        documents = []
        for name in sorted(names):
            blob = subprocess.run(
                ["git", "show", f"{commit}:{name}"], cwd=tmp, check=True, capture_output=True
            ).stdout
            documents.append(
                {
                    "uri": f"repo://handbook@{commit}/{name}",
                    "sha256": "sha256:" + hashlib.sha256(blob).hexdigest(),
                    "text": blob.decode(),
                }
            )
    manifest = {
        "knowledge_snapshot": f"handbook@{commit}",
        "repository": "handbook",
        "commit": commit,
        "documents": len(documents),
    }
    out = HERE / "data" / "snapshot.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps({"manifest": manifest, "documents": documents}, indent=1) + "\n")
    print(f"wrote {out}: {len(documents)} documents of handbook@{commit[:12]}")


if __name__ == "__main__":
    main(*sys.argv[1:])
