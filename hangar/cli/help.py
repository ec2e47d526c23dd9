"""Help as people read it: ``Usage: hangar run [OPTIONS] SWEEP``, ``--repeat N``,
``--store TEXT``, flags with no metavar, at any terminal width.

Typer shows types as ``<str>``, ``<bool>``, ``<list[Path]>`` and required arguments as
``{sweep_file}``. `conventional` walks the command tree once, before it runs, and gives
every parameter without a metavar of its own the one the Unix convention uses: the
argument's name in capitals (``SWEEP``), ``PATH``, ``N``, ``NUMBER``, ``TEXT`` or the
choices. The help is Click's plain layout (`hangar.cli._app` turns Rich's panels off):
it wraps to the terminal, never cutting an option's name.
"""

from __future__ import annotations

import re
from typing import Any

#: Argument names that read better as another word.
ARGUMENT_NAMES = {"sweep_file": "SWEEP", "from_sweep": "SWEEP", "paths": "PATH..."}

_TYPES = {
    "str": "TEXT",
    "path": "PATH",
    "file": "PATH",
    "directory": "PATH",
    "int": "N",
    "int range": "N",
    "float": "NUMBER",
    "float range": "NUMBER",
}


def conventional(command: Any) -> Any:
    """`command` and every subcommand with conventional metavars and plain help text
    (see the module docstring); returns `command`."""
    for attr in ("help", "short_help"):
        if getattr(command, attr, None):
            setattr(command, attr, plain(getattr(command, attr)))
    for param in getattr(command, "params", []):
        if getattr(param, "help", None):
            param.help = plain(param.help)
        _name(param)
    for sub in getattr(command, "commands", {}).values():
        conventional(sub)
    return command


def plain(text: str) -> str:
    """Help text without Markdown's backticks: a quoted command reads as one in a
    terminal ('hangar cluster start'), a code word as a word."""
    return re.sub(
        r"`+([^`]+)`+", lambda m: f"'{m.group(1)}'" if " " in m.group(1) else m.group(1), text
    )


def _name(param: Any) -> None:
    """Give `param` a conventional metavar unless it has one."""
    is_argument = not hasattr(param, "is_flag")
    if is_argument:
        if param.metavar is None:
            name = ARGUMENT_NAMES.get(param.name, param.name.upper())
            param.metavar = name if param.nargs == 1 or name.endswith("...") else f"{name}..."
        # the name is the metavar: no type beside it, no braces around it in the usage
        param.display_type_rich = lambda ctx: None
        param._usage_display_name = lambda: (
            param.metavar if param.required else f"[{param.metavar}]"
        )
        return
    if param.is_flag or param.metavar is not None:
        return
    shown = _type_word(param)
    if shown:
        param.metavar = shown


def _type_word(param: Any) -> str | None:
    """The word for an option's value type: TEXT, PATH, N, NUMBER or a|b."""
    try:
        label = str(param.display_type(None)).strip("<>")
    except Exception:
        return None
    inner = re.fullmatch(r"list\[(.*)\]", label)
    if inner:
        label = inner.group(1)
    if "|" in label:
        return label
    return _TYPES.get(label.lower(), label.upper())
