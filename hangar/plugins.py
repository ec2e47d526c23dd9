"""Installed packages that extend hangar: entry points of four groups.

A package adds to hangar by declaring entry points (``[project.entry-points."hangar.sandboxes"]``
in its ``pyproject.toml``), found whenever it is installed beside hangar:

- ``hangar.kinds``: name -> a package or module whose ``KIND`` is a `Kind`;
- ``hangar.sandboxes``: name -> ``module:Class``, a `Sandbox` backend;
- ``hangar.agent_presets``: name -> ``module:PRESET``, a `Preset`;
- ``hangar.task_sources``: name -> ``module:SOURCE``, a task source of the execution kind.

hangar's own entries win: a package cannot replace ``docker`` or ``codex``; one that
tries is ignored, with a warning naming it.
"""

from __future__ import annotations

import importlib
import logging
from importlib.metadata import entry_points
from typing import Any

log = logging.getLogger(__name__)

#: The clashing entry points already warned of.
_WARNED: set[tuple[str, str, str]] = set()


def plugin_targets(group: str, builtin: dict[str, Any] | None = None) -> dict[str, str]:
    """Name -> entry point value of the installed packages' entry points in `group`
    (a name of `builtin` is hangar's own: a package's entry of that name is ignored)."""
    found: dict[str, str] = {}
    for ep in entry_points(group=group):
        if builtin is not None and ep.name in builtin:
            if (group, ep.name, ep.value) not in _WARNED:  # once per process, not per lookup
                _WARNED.add((group, ep.name, ep.value))
                log.warning(
                    "ignoring entry point %s = %s of %s: %r is hangar's own",
                    ep.name,
                    ep.value,
                    group,
                    ep.name,
                )
            continue
        found.setdefault(ep.name, ep.value)
    return found


def load_target(value: str, default_attr: str | None = None) -> Any:
    """The object an entry point's value names (``module:attr``; a bare module with
    `default_attr` is that attribute of it)."""
    module, _, attr = value.partition(":")
    loaded = importlib.import_module(module)
    name = attr or default_attr
    return getattr(loaded, name) if name else loaded
