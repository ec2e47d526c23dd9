"""The `hangar` command line (Typer): one module per command group (`hangar/cli/<group>.py`,
and each kind's own group in its package, `hangar/kinds/<kind>/cli.py`).

``hangar <command>`` imports the module of its command alone (`COMMANDS`), and Typer
builds only what it registered; help, a kind's own group and any other name load every
module (`load_all`), as ``from hangar.cli import app`` does.
"""

import gc

# A command's objects are mostly long-lived (imported modules, a sweep's specs, a report's
# rows): the default threshold (700) runs a collection every few hundred allocations, 1.2 s
# of a 2,000-prompt run's 12 s of driver CPU; 20,000 (and a freeze once a run starts)
# makes it 0.2 s.
gc.set_threshold(20_000, 20, 20)

import importlib  # noqa: E402 (the threshold first: imports are allocations)
import sys  # noqa: E402
from typing import Any  # noqa: E402

#: The module (under `hangar.cli`) of each top-level command and group. Loading one
#: alone saves each ``hangar run`` (and ``status``) a tenth of a second of CPU: the other
#: modules, every kind's group, and Typer's walk over their signatures.
COMMANDS = {
    "agents": "agents",
    "baseline": "baseline",
    "cluster": "cluster",
    "compare": "report",
    "dashboards": "dashboards",
    "evidence": "evidence",
    "export": "report",
    "gc": "run",
    "image": "image",
    "model": "model",
    "report": "report",
    "run": "run",
    "sandbox": "sandbox",
    "sessions": "sessions",
    "status": "run",
    "store": "store",
    "suite": "suite",
    "sweep": "sweep",
    "sweeps": "store",
    "trial": "trial",
    "version": "_app",
    "view": "view",
}

_loaded = False


def load_all() -> None:
    """Every command module and every kind's group."""
    global _loaded
    if _loaded:
        return
    for module in sorted(set(COMMANDS.values())):
        importlib.import_module(f"hangar.cli.{module}")
    importlib.import_module("hangar.cli._app").add_kind_groups()
    _loaded = True


def load(argv: list[str]) -> None:
    """The module of the command `argv` names (every module, for any other)."""
    named = next((arg for arg in argv if not arg.startswith("-")), None)
    module = COMMANDS.get(named or "")
    if module is None:
        load_all()
    else:
        importlib.import_module(f"hangar.cli.{module}")


def main() -> None:
    """Entry point of the `hangar` console script."""
    load(sys.argv[1:])
    importlib.import_module("hangar.cli._app").main()


def __getattr__(name: str) -> Any:
    """`app` with every command; a command module by its name."""
    if name == "app":
        load_all()
        return importlib.import_module("hangar.cli._app").app
    if name in COMMANDS.values():
        return importlib.import_module(f"hangar.cli.{name}")
    raise AttributeError(f"module 'hangar.cli' has no attribute {name!r}")


__all__ = ["COMMANDS", "app", "load", "load_all", "main"]
