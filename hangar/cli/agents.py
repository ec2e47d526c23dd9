"""`hangar agents`: the agents a sweep can name, and what each needs."""

from __future__ import annotations

import json

import typer
from rich.markup import escape
from rich.table import Table

from hangar.cli._app import app
from hangar.console import JsonFlag, console

agents_app = typer.Typer(help="Agents: every preset and kind, and what each needs.")
app.add_typer(agents_app, name="agents")

#: The API families hangar's own agents speak (through the relay or from the host).
ALL_APIS = ("openai (chat, responses)", "anthropic (messages)", "google (gemini)")


def agent_rows() -> list[dict[str, object]]:
    """Every preset, then every other kind of agent: name, how it is named in an agents
    file, its version, what it needs in the sandbox image, the APIs it speaks."""
    from hangar.agents.presets import PRESETS
    from hangar.sandbox.images import AGENT_CLIS, DEFAULT_BASE_TAG

    rows: list[dict[str, object]] = []
    for name, preset in PRESETS.items():
        cli = AGENT_CLIS.get(name)
        version = cli.version if cli else ""
        rows.append(
            {
                "name": name,
                "config": f"{{preset: {name}}}",
                "version": version,
                "needs": f"the `{preset.needs}` command: image {DEFAULT_BASE_TAG}-{name} "
                f"(hangar image build-base --with {name})",
                "apis": list(preset.apis),
                "options": sorted(preset.options),
            }
        )
    rows += [
        {"name": "command", "config": "{command: ...} or {script: FILE}", "version": "",
         "needs": "what its command runs, and python3 (the model relay's forwarder)",
         "apis": list(ALL_APIS), "options": []},
        {"name": "chat", "config": "{kind: chat}", "version": "",
         "needs": "bash in the image (its tools run there; the loop and its model calls "
                  "stay on the host)",
         "apis": list(ALL_APIS), "options": ["tools", "max_turns", "mcp"]},
        {"name": "prompt", "config": "{kind: prompt}", "version": "",
         "needs": "no sandbox (decision cases, rubric samples)", "apis": list(ALL_APIS),
         "options": ["reasoning_effort"]},
        {"name": "oracle", "config": "{kind: reference, role: oracle}", "version": "",
         "needs": "a task with a reference solution (a Harbor task's solution/solve.sh)",
         "apis": [], "options": []},
        {"name": "nop", "config": "{kind: reference, role: nop}", "version": "",
         "needs": "nothing: it does nothing (a task it passes is broken)", "apis": [],
         "options": []},
    ]  # fmt: skip
    return rows


@agents_app.command("list")
def agents_list(as_json: JsonFlag = False) -> None:
    """Every agent preset (its version, the image it needs and how to build it, the model
    APIs it speaks) and every other kind of agent."""
    rows = agent_rows()
    if as_json:
        console.print_json(json.dumps({"agents": rows}))
        return
    table = Table("agent", "in an agents file", "version", "needs", "APIs", title="agents")
    for r in rows:
        apis = r["apis"] if isinstance(r["apis"], list) else []
        table.add_row(
            escape(str(r["name"])),
            escape(str(r["config"])),
            escape(str(r["version"]) or "-"),
            escape(str(r["needs"])),
            escape(", ".join(map(str, apis)) or "-"),
        )
    console.print(table)
