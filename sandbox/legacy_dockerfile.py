"""BuildKit's Dockerfile syntax rewritten for the engine's legacy builder.

hangar builds task images through the Docker API (the docker SDK), which drives the
engine's legacy builder: it knows no heredocs and no ``RUN --mount``. Terminal-Bench's
tasks use both, and BuildKit's own frontend for heredocs (dockerfile 1.4) is an image that
an offline node cannot pull. So, before the build, `for_legacy_builder` rewrites what has
a faithful equivalent:

- ``RUN <<EOF`` ... ``EOF``: the script runs in the instruction's shell (``eval`` of its
  bytes, carried base64-encoded in the line), or, when it starts with ``#!``, is written
  to a file and executed, as BuildKit does;
- ``RUN cmd <<EOF`` ... ``EOF`` (a heredoc the command reads): the whole shell text,
  heredoc included, is ``eval``-ed, so the shell reads the heredoc itself (``<<-``
  strips tabs, a quoted delimiter expands nothing);
- ``COPY <<EOF /path`` ... ``EOF``: the file written with its bytes (its folder made);
- ``RUN --mount=type=cache,...`` and ``COPY --link``: the flag dropped (they change what
  a rebuild reuses, not what the image holds, but for the cache folder's files).

What has none (another ``--mount`` type, ``COPY --chmod`` or ``--parents``, ``ADD
--checksum``, several heredocs in one instruction) is refused before the build with an
`ImageBuildError` naming the feature and its line, instead of the legacy builder's
"unknown instruction". The rewrite needs ``sh`` and ``base64`` in the image (Debian,
Ubuntu, Alpine and the language images have both).
"""

from __future__ import annotations

import base64
import re
import shlex
from dataclasses import dataclass

from hangar.errors import ImageBuildError

_HEREDOC = re.compile(r"<<(-?)([\"']?)([A-Za-z_][A-Za-z0-9_]*)\2")
_INSTRUCTION = re.compile(r"^(\s*)(RUN|COPY|ADD)\b(.*)$", re.IGNORECASE)
_FLAG = re.compile(r"--([a-z-]+)(?:=(\S+))?")
_DROPPED = {("RUN", "mount", "cache"), ("COPY", "link", ""), ("ADD", "link", "")}
_UNSUPPORTED = {
    ("RUN", "mount"): "RUN --mount={value}",
    ("RUN", "network"): "RUN --network",
    ("RUN", "security"): "RUN --security",
    ("COPY", "chmod"): "COPY --chmod",
    ("ADD", "chmod"): "ADD --chmod",
    ("COPY", "parents"): "COPY --parents",
    ("COPY", "exclude"): "COPY --exclude",
    ("ADD", "checksum"): "ADD --checksum",
    ("ADD", "keep-git-dir"): "ADD --keep-git-dir",
}


@dataclass
class _Line:
    number: int
    indent: str
    verb: str
    rest: str


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def _refuse(feature: str, number: int) -> ImageBuildError:
    return ImageBuildError(
        f"the Dockerfile uses BuildKit's {feature} (line {number}), which the engine's "
        "legacy builder (the one the Docker API builds with) cannot build and hangar has no "
        "faithful rewrite for: write it without it, or build the image with BuildKit and "
        "name it as the task's `docker_image`"
    )


def _flags(line: _Line) -> str:
    """The instruction's arguments without the flags dropped; refuses the unsupported."""
    kept = []
    words = line.rest.split(" ")
    i = 0
    while i < len(words) and (not words[i] or words[i].startswith("--")):
        match = _FLAG.fullmatch(words[i]) if words[i] else None
        if match is not None:
            name, value = match.group(1), match.group(2) or ""
            kind = dict(p.split("=", 1) for p in value.split(",") if "=" in p).get("type", "")
            if name == "mount" and value and "type=" not in value:
                kind = "bind"
            if (line.verb, name, kind if name == "mount" else "") in _DROPPED:
                i += 1
                continue
            if (line.verb, name) in _UNSUPPORTED:
                feature = _UNSUPPORTED[(line.verb, name)].format(value=f"type={kind or 'bind'}")
                raise _refuse(feature, line.number)
            kept.append(words[i])
        i += 1
    return " ".join([*kept, *words[i:]]).strip()


def _run(args: str, body: str, delimiter: str, dash: str, quote: str, number: int) -> str:
    """A RUN whose heredoc `body` is now in the line."""
    marker = f"<<{dash}{quote}{delimiter}{quote}"
    command = args.replace(marker, "", 1).strip()
    if not command:  # the heredoc is the script
        if body.startswith("#!"):
            script = "/tmp/.hangar-heredoc"
            return (
                f"RUN printf %s '{_b64(body)}' | base64 -d > {script} && chmod +x {script} "
                f"&& {script}; s=$?; rm -f {script}; exit $s"
            )
        return f"RUN eval \"$(printf %s '{_b64(body)}' | base64 -d)\""
    if args.lstrip().startswith("["):
        raise _refuse("heredoc in an exec-form RUN", number)
    text = f"{args}\n{body}{delimiter}\n"
    return f"RUN eval \"$(printf %s '{_b64(text)}' | base64 -d)\""


def _copy(args: str, body: str, delimiter: str, dash: str, quote: str, number: int) -> str:
    """A COPY of a heredoc as the file it names."""
    marker = f"<<{dash}{quote}{delimiter}{quote}"
    words = args.replace(marker, "", 1).split()
    if len(words) != 1:
        raise _refuse("COPY of a heredoc with several sources", number)
    dest = words[0] + delimiter if words[0].endswith("/") else words[0]
    if dash:
        body = "".join(line.lstrip("\t") for line in body.splitlines(keepends=True))
    path = shlex.quote(dest)
    return f"RUN mkdir -p \"$(dirname {path})\" && printf %s '{_b64(body)}' | base64 -d > {path}"


def for_legacy_builder(text: str) -> str:
    """`text` with BuildKit's heredocs and droppable flags rewritten (see the module
    docstring); unchanged when it uses neither."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        match = _INSTRUCTION.match(lines[i])
        if match is None:
            out.append(lines[i])
            i += 1
            continue
        line = _Line(i + 1, match.group(1), match.group(2).upper(), match.group(3).strip())
        args = _flags(line)
        docs = list(_HEREDOC.finditer(args))
        if not docs:
            out.append(f"{line.indent}{match.group(2)} {args}".rstrip())
            i += 1
            continue
        if len(docs) > 1:
            raise _refuse("several heredocs in one instruction", line.number)
        dash, quote, delimiter = docs[0].groups()
        body, end = [], i + 1
        while end < len(lines) and (lines[end].lstrip("\t") if dash else lines[end]) != delimiter:
            body.append(lines[end] + "\n")
            end += 1
        if end == len(lines):  # no terminator: not a heredoc (``echo 'a <<B'``)
            out.append(f"{line.indent}{match.group(2)} {args}".rstrip())
            i += 1
            continue
        if line.verb == "ADD":
            raise _refuse("ADD of a heredoc", line.number)
        make = _run if line.verb == "RUN" else _copy
        out.append(line.indent + make(args, "".join(body), delimiter, dash, quote, line.number))
        i = end + 1
    return "\n".join(out) + "\n"
