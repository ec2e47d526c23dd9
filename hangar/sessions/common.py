"""What every session format shares: capped texts with their digest, the files a shell
command reads and writes, the skill a path belongs to."""

from __future__ import annotations

import hashlib
import re
import shlex
from pathlib import PurePosixPath
from typing import Any, NamedTuple

from hangar.sessions import TEXT_CAP, SessionEvent

#: Commands that print files they are given (what they print is what was read).
READERS = {"cat", "head", "tail", "less", "more", "nl", "sed", "awk", "bat", "view"}
#: Commands that write the files they are given last.
WRITERS = {"tee", "cp", "mv", "touch", "install"}


def digest(text: str) -> str:
    """sha256 of a text as UTF-8."""
    return hashlib.sha256(text.encode("utf-8", errors="replace")).hexdigest()


def capped(text: Any) -> str:
    """A value as text, cut to `TEXT_CAP` characters."""
    value = text if isinstance(text, str) else "" if text is None else str(text)
    return value[:TEXT_CAP]


def as_text(content: Any) -> str:
    """The text of a message's content (a string, or blocks with ``text``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = [
            as_text(c.get("text", c.get("content", ""))) for c in content if isinstance(c, dict)
        ]
        return "\n".join(p for p in parts if p)
    return ""


def skill_of(path: str) -> str:
    """The skill a file belongs to: the folder holding its ``SKILL.md``, else ''."""
    p = PurePosixPath(path)
    return p.parent.name if p.name == "SKILL.md" and p.parent.name else ""


def _words(command: str) -> list[list[str]]:
    """The simple commands of a shell line (split on pipes and separators)."""
    try:
        tokens = shlex.split(command, posix=True)
    except ValueError:
        tokens = command.split()
    parts: list[list[str]] = [[]]
    skip = False
    for token in tokens:
        if skip:  # a redirection's target: not an argument
            skip = False
        elif token in ("|", "||", "&&", ";", "&"):
            parts.append([])
        elif re.fullmatch(r"[0-9&]?(<|>|>>)", token):
            skip = True
        elif not re.match(r"[0-9&]?(<|>)", token):  # `>out`, `2>err`: said by the regex
            parts[-1].append(token)
    return [p for p in parts if p]


def shell_files(command: str) -> tuple[list[str], list[str]]:
    """(files read, files written) by a shell command, as far as its words say: the
    arguments of a reader (``cat``, ``sed -n``, ``head``...), redirections (``>``,
    ``>>``), ``tee``/``cp``/``mv`` targets and ``sed -i`` edits. A guess, not a trace:
    the audit says so."""
    reads: list[str] = []
    writes: list[str] = []
    for match in re.finditer(r"(?<![0-9&])>>?\s*([^\s;|&<>]+)", command):
        target = match.group(1)
        if target not in ("/dev/null",) and not target.startswith("&"):
            writes.append(target)
    for words in _words(command):
        name = PurePosixPath(words[0]).name
        options = [w for w in words[1:] if w.startswith("-")]
        args = [w for w in words[1:] if not w.startswith("-")]
        if name in ("sed", "awk") and args and not {"-e", "-f"} & set(options):
            args = args[1:]  # the script
        elif name in ("head", "tail") and args and re.fullmatch(r"[0-9]+", args[0]):
            args = args[1:]  # the count of -n N
        args = [a for a in args if ">" not in a and "<" not in a]
        if name == "sed" and any(w.startswith("-i") for w in options):
            writes += args
        elif name in READERS:
            reads += args
        elif name in WRITERS and args:
            writes.append(args[-1])
    return list(dict.fromkeys(reads)), list(dict.fromkeys(writes))


def read_events(base: dict[str, Any], path: str, text: str) -> list[SessionEvent]:
    """A file read that returned `text`, and the skill it loaded if it is a ``SKILL.md``
    (both carrying the digest of what was read)."""
    sha = digest(text)
    events = [SessionEvent(**base, type="file_read", path=path, sha256=sha)]
    if skill := skill_of(path):
        events.append(
            SessionEvent(
                **base, type="skill", skill=skill, path=path, sha256=sha, text=capped(text)
            )
        )
    return events


def shell_events(
    base: dict[str, Any], command: str, output: str, ok: bool | None = None
) -> list[SessionEvent]:
    """The file events a shell command implies (each read carrying the digest of the
    command's output, what the agent saw); a command known to have failed (`ok` False)
    read nothing (a ``cat`` of a missing skill loaded no skill)."""
    reads, writes = shell_files(command)
    events = []
    for path in reads if ok is not False else ():
        events += read_events(base, path, output)
    events += [SessionEvent(**base, type="file_write", path=path) for path in writes]
    return events


def assistant_blocks(
    base: dict[str, Any],
    blocks: Any,
    model: str,
    calls: dict[str, tuple[str, dict[str, Any]]],
    *,
    call: str,
    arguments: str,
) -> list[SessionEvent]:
    """An assistant message's content blocks: its texts, and its tool calls (blocks of type
    `call`, their arguments under `arguments`), each remembered in `calls` for its result."""
    events = []
    for block in blocks if isinstance(blocks, list) else []:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            events.append(
                SessionEvent(**base, type="assistant", model=model, text=capped(block.get("text")))
            )
        elif block.get("type") == call:
            call_id, name = str(block.get("id", "")), str(block.get("name", ""))
            given = block.get(arguments)
            args: dict[str, Any] = given if isinstance(given, dict) else {}
            calls[call_id] = (name, args)
            events.append(
                SessionEvent(**base, type="tool_call", tool=name, call_id=call_id, arguments=args)
            )
    return events


class ToolNames(NamedTuple):
    """How one agent names its tools: which run a shell, read, write or load a skill."""

    shells: frozenset[str]
    read: frozenset[str]
    write: frozenset[str]
    skill: frozenset[str] = frozenset()
    paths: tuple[str, ...] = ("file_path", "path")
    """The arguments that name a file, first found wins."""
    skill_argument: str = "name"
    """The argument that names a skill."""


def call_effects(
    base: dict[str, Any],
    tools: ToolNames,
    name: str,
    call_id: str,
    arguments: dict[str, Any],
    text: str,
    ok: bool,
    *,
    exit_code: int | None = None,
    shell_output: str | None = None,
) -> list[SessionEvent]:
    """What a finished tool call did, by its tool's kind: the shell command it ran (with
    the files its words read and wrote; `shell_output`: what the command printed, when it
    is not the result's `text`), the file it read or wrote, the skill it loaded."""
    path = next((str(arguments[k]) for k in tools.paths if arguments.get(k)), "")
    if name in tools.shells:
        command = str(arguments.get("command", ""))
        shell = SessionEvent(
            **base, type="shell", call_id=call_id, command=command, exit_code=exit_code, ok=ok
        )
        printed = text if shell_output is None else shell_output
        return [shell, *shell_events(base, command, printed, ok)]
    if name in tools.read and path and ok:
        return read_events(base, path, text)
    if name in tools.write and path and ok:
        return [SessionEvent(**base, type="file_write", path=path)]
    if name in tools.skill and ok and arguments.get(tools.skill_argument):
        return [SessionEvent(**base, type="skill", skill=str(arguments[tools.skill_argument]))]
    return []
