"""`hangar agents`: the agents a sweep can name, and what each needs."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hangar.cli._app import app
from hangar.console import JsonFlag, console, err_console

agents_app = typer.Typer(help="Agents: every preset and kind, and what each needs.")
app.add_typer(agents_app, name="agents")

#: The API families hangar's own agents speak (through the relay or from the host).
ALL_APIS = ("openai (chat, responses)", "anthropic (messages)", "google (gemini)")


def agent_rows() -> list[dict[str, object]]:
    """Every preset, then every other kind of agent, then the CLIs that cannot run here:
    name, how it is named in an agents file, its version and bundle, what it needs, the
    APIs it speaks."""
    from hangar.agents.presets import UNRUNNABLE, presets
    from hangar.sandbox.bundles import AGENT_CLIS, bundle_id

    rows: list[dict[str, object]] = []
    for name, preset in presets().items():
        cli = AGENT_CLIS.get(name)
        rows.append(
            {
                "name": name,
                "config": f"{{preset: {name}}}",
                "version": cli.version if cli else "",
                "bundle": bundle_id(name) if cli else "",
                "needs": "an x86-64 Linux image with bash and /bin/sh (its bundle brings the rest)"
                if cli
                else "what its command runs (an installed package's preset)",
                "apis": list(preset.apis),
                "options": sorted(preset.options),
            }
        )
    rows += [
        {"name": "command", "config": "{command: ...} or {script: FILE}", "version": "",
         "bundle": "", "needs": "what its command runs", "apis": list(ALL_APIS), "options": []},
        {"name": "chat", "config": "{kind: chat}", "version": "", "bundle": "",
         "needs": "bash in the image (its tools run there; the loop and its model calls "
                  "stay on the host)",
         "apis": list(ALL_APIS), "options": ["tools", "max_turns", "mcp"]},
        {"name": "prompt", "config": "{kind: prompt}", "version": "", "bundle": "",
         "needs": "no sandbox (decision cases, rubric samples)", "apis": list(ALL_APIS),
         "options": ["reasoning_effort"]},
        {"name": "oracle", "config": "{kind: reference, role: oracle}", "version": "",
         "bundle": "", "needs": "a task with a reference solution (a Harbor task's "
         "solution/solve.sh)", "apis": [], "options": []},
        {"name": "nop", "config": "{kind: reference, role: nop}", "version": "", "bundle": "",
         "needs": "nothing: it does nothing (a task it passes is broken)", "apis": [],
         "options": []},
    ]  # fmt: skip
    rows += [
        {"name": name, "config": "(not runnable)", "version": "", "bundle": "", "needs": why,
         "apis": [], "options": []}
        for name, why in UNRUNNABLE.items()
    ]  # fmt: skip
    return rows


@agents_app.command("list")
def agents_list(as_json: JsonFlag = False) -> None:
    """Every agent preset (its version, its bundle, the model APIs it speaks), every other
    kind of agent, and the CLIs people compare that cannot run here, with why."""
    rows = agent_rows()
    if as_json:
        console.print_json(json.dumps({"agents": rows}))
        return
    table = Table(
        "agent", "in an agents file", "version", "bundle", "needs", "APIs", title="agents"
    )
    for r in rows:
        apis = r["apis"] if isinstance(r["apis"], list) else []
        table.add_row(
            escape(str(r["name"])),
            escape(str(r["config"])),
            escape(str(r["version"]) or "-"),
            escape(str(r["bundle"]) or "-"),
            escape(str(r["needs"])),
            escape(", ".join(map(str, apis)) or "-"),
        )
    console.print(table)


@agents_app.command("prune")
def agents_prune(
    dry_run: Annotated[bool, typer.Option(help="Name them, remove nothing.")] = False,
) -> None:
    """Remove this machine's agent bundles that no preset of this hangar version uses
    (each is hundreds of MB; a new version's recipes have new digests)."""
    import shutil

    from hangar.sandbox.bundles import stale_bundles

    freed = 0
    for folder in stale_bundles():
        files = [f.lstat() for f in folder.rglob("*") if f.is_file() and not f.is_symlink()]
        size = sum(f.st_size for f in files if f.st_nlink == 1)  # not what the cache shares
        freed += size
        said = "would remove" if dry_run else "removed"
        console.print(f"{said} {folder} ({size / 2**20:.0f} MiB)", highlight=False)
        if not dry_run:
            shutil.rmtree(folder)
    console.print(f"{freed / 2**20:.0f} MiB {'to free' if dry_run else 'freed'}", highlight=False)


@agents_app.command("bundle")
def agents_bundle(
    names: Annotated[
        list[str] | None, typer.Argument(help="Presets whose bundles to build (default: all).")
    ] = None,
    registry: Annotated[
        str | None,
        typer.Option(
            help="A registry (host:port/namespace) to share the bundles through: each is "
            "pulled from it when this machine has none, else pushed to it (a sweep's "
            "`registry:`, for the nodes of a cluster and for Kubernetes pods)."
        ),
    ] = None,
) -> None:
    """Build agent CLIs' bundles on this machine now (a trial builds its own on first use):
    each from its pinned packages, offline after the first fetch."""
    from hangar.errors import ImageBuildError
    from hangar.sandbox.bundle_images import push_bundle
    from hangar.sandbox.bundles import AGENT_CLIS, built_bundle, ensure_bundle

    failed = False
    for name in names or list(AGENT_CLIS):
        try:
            had = built_bundle(name)
            bundle = ensure_bundle(
                name,
                registry=registry,
                progress=lambda line: err_console.print(f"[dim]{escape(line)}[/]"),
            )
            if registry and had is not None:  # built before: shared now
                push_bundle(registry, name, bundle.digest, bundle.folder)
        except ImageBuildError as exc:
            err_console.print(f"[red]{escape(name)}[/]: {escape(str(exc))}")
            failed = True
            continue
        console.print(f"{name}: {bundle.folder}", highlight=False)
    if failed:
        raise typer.Exit(1)
