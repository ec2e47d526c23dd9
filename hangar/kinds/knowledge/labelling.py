"""Labelling in the viewer: the rater's flow of ``hangar knowledge label``, as pages.

``/knowledge/<suite>/label`` asks the rater's name once (it travels in the page's links
after that), then lists the arms with answers and how many of them this rater labelled;
with an arm chosen it shows the next answer this rater has not labelled: the question, the
answer, each citation with the content it cites (read by hangar from the repository at the
cited commit), and beside them the answer key (the answer, the required facts, the valid
sources: the sealed key is shown in this flow only, never its canary). The rater says
whether every required fact is present and which citations do not support the claim; the
label is appended to ``labels/<arm>.jsonl`` in the format the terminal flow writes
(`custody.add_label`). No rater sees another's labels here: the page shows only this
rater's progress. Everything shown that an arm wrote is escaped by the templates.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from hangar.errors import ConfigError
from hangar.kinds.knowledge.custody import add_label, load_arm, sealed_suite
from hangar.kinds.knowledge.formats import Label
from hangar.kinds.knowledge.questions import repositories
from hangar.paths import cache_dir
from hangar.sandbox.workspace import MirrorCache, blob_at

#: The most of a cited file the page shows.
CITED_CHARS = 20_000
_RATER = re.compile(r"^[\w][\w .@'-]{0,79}$")
_URI = re.compile(r"^repo://(?P<repo>[^@/]+)@(?P<commit>[0-9a-f]{40})/(?P<path>.+)$")


def _folder(name: str, suites: list[Path]) -> Path:
    folder = next((s for s in suites if s.name == name), None)
    if folder is None:
        raise LookupError(f"no knowledge suite {name!r} given (hangar view --knowledge DIR)")
    return folder


def check_rater(rater: str) -> str:
    """A rater's name as the labels record it (letters, digits, spaces, . @ ' - _)."""
    name = rater.strip()
    if not _RATER.match(name):
        raise ConfigError(
            f"a rater's name is up to 80 letters, digits, spaces and . @ ' - _, got {rater!r}"
        )
    return name


def _arms(folder: Path) -> list[str]:
    return sorted(p.name.removesuffix(".jsonl") for p in (folder / "answers").glob("*.jsonl"))


def link(name: str, **query: str) -> str:
    """A path of the labelling flow."""
    given = {k: v for k, v in query.items() if v}
    return f"/knowledge/{name}/label" + (f"?{urlencode(given)}" if given else "")


def cited(folder: Path, uri: str, repos: dict[str, str]) -> str | None:
    """The text a citation points at (None when it names no repository file)."""
    match = _URI.match(uri)
    if not match or match["repo"] not in repos:
        return None
    blob = blob_at(MirrorCache(cache_dir() / "mirrors"), repos[match["repo"]],
                   match["commit"], match["path"])  # fmt: skip
    if blob is None:
        return None
    text = blob.decode("utf-8", errors="replace")
    return text[:CITED_CHARS] + ("\n(cut)" if len(text) > CITED_CHARS else "")


def label_page(params: dict[str, str], query: dict[str, str], suites: list[Path]) -> dict[str, Any]:
    """The context of the labelling page (see the module docstring)."""
    name = params["name"]
    folder = _folder(name, suites)
    suite = sealed_suite(folder)
    rater = query.get("rater", "").strip()
    base: dict[str, Any] = {"name": name, "rater": rater, "link": link}
    if not rater:
        return {**base, "step": "rater"}
    rater = check_rater(rater)
    base["rater"] = rater
    progress = []
    for arm_name in _arms(folder):
        arm = load_arm(suite, arm_name)
        mine = {x.id for x in arm.labels if x.rater == rater}
        progress.append(
            {"arm": arm_name, "answers": len(arm.answers), "labelled": len(mine & set(arm.answers))}
        )
    chosen = query.get("arm", "")
    if not chosen:
        return {**base, "step": "arms", "progress": progress}
    if chosen not in _arms(folder):
        raise LookupError(f"no answers of arm {chosen!r} in {name}")
    arm = load_arm(suite, chosen)
    mine = {x.id for x in arm.labels if x.rater == rater}
    order = [q.id for q in suite.questions if q.id in arm.answers and q.id not in mine]
    after = query.get("after", "")
    later = order[order.index(after) + 1 :] if after in order else order
    todo = later or order
    if not todo:
        return {**base, "step": "done", "arm": chosen, "progress": progress}
    qid = todo[0]
    question = next(q for q in suite.questions if q.id == qid)
    answer, key = arm.answers[qid], suite.keys[qid]
    repos = repositories(suite, {})
    citations = [
        {"n": i, "uri": c.uri, "sha256": c.sha256 or "", "text": cited(folder, c.uri, repos)}
        for i, c in enumerate(answer.citations, start=1)
    ]
    return {
        **base,
        "step": "label",
        "arm": chosen,
        "question": question,
        "answer": answer.answer,
        "citations": citations,
        "key": {
            "answer": key.answer_key,
            "facts": key.required_facts,
            "sources": [{"uri": s.uri, "sha256": s.sha256 or ""} for s in key.valid_sources],
        },
        "left": len(order),
        "done": len(mine & set(arm.answers)),
        "total": len(arm.answers),
        "skip": link(name, rater=rater, arm=chosen, after=qid),
    }


def save_label(params: dict[str, str], form: dict[str, list[str]], suites: list[Path]) -> str:
    """Append the posted label to ``labels/<arm>.jsonl``; where the rater goes next."""
    name = params["name"]
    folder = _folder(name, suites)
    suite = sealed_suite(folder)

    def one(field: str) -> str:
        values = form.get(field) or [""]
        return values[0]

    rater, arm_name, qid = check_rater(one("rater")), one("arm"), one("question")
    if arm_name not in _arms(folder):
        raise ConfigError(f"no answers of arm {arm_name!r} in {name}")
    arm = load_arm(suite, arm_name)
    answer = arm.answers.get(qid)
    if answer is None:
        raise ConfigError(f"arm {arm_name} has no answer to {qid!r}")
    verdict = one("correct")
    if verdict not in ("yes", "no"):
        raise ConfigError("say whether every required fact is present (yes or no)")
    cited_uris = {c.uri for c in answer.citations}
    unsupported = [u for u in form.get("unsupported", []) if u in cited_uris]
    label = Label(id=qid, rater=rater, correct=verdict == "yes", unsupported=unsupported)
    add_label(suite, arm_name, label)
    return link(name, rater=rater, arm=arm_name)
