"""`hangar dataset`: the field's datasets validated before a paid trial."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from hangar.console import console, err_console
from hangar.errors import ConfigError
from hangar.trials.batch import runner_from, services_of

app = dataset_app = typer.Typer(help="Validate datasets of image tasks (Harbor task directories).")


@dataset_app.command("validate")
def dataset_validate(
    ctx: typer.Context,
    dataset: Annotated[
        Path, typer.Argument(help="A sweep file (its image tasks), or a folder of task folders.")
    ],
    repeats: Annotated[
        int, typer.Option(min=1, help="Oracle and nop trials per task (flaky: some oracle fail).")
    ] = 1,
    image_map: Annotated[
        list[str] | None,
        typer.Option("--image-map", help="FROM=TO for a folder (a sweep file has its own)."),
    ] = None,
    store: Annotated[str | None, typer.Option(help="Results store URL.")] = None,
    address: Annotated[str | None, typer.Option(help="Ray cluster to attach to.")] = None,
) -> None:
    """Run the oracle (the task's solution) and the nop agent on every task, as a
    resumable sweep, and record each task version as valid or broken (with the reason).
    Sweeps leave broken and unvalidated tasks out unless run with --include-unvalidated.

    Exit status: 0 every task valid; 1 some broken or not loading; 3 some not validated
    yet.
    """
    from hangar.kinds.execution.harbor.cli import parse_pairs
    from hangar.kinds.execution.images.task import ImageTask
    from hangar.kinds.execution.images.validate import validate_dataset
    from hangar.kinds.execution.settings import execution_settings
    from hangar.store import ResultsStore

    settings = execution_settings(image_map=parse_pairs(image_map, "--image-map"))
    found_tasks = services_of(ctx.obj).sweep_tasks(dataset, settings)
    name, tasks, unloadable = found_tasks.name, found_tasks.tasks, found_tasks.unloadable
    store, evidence = store or found_tasks.store, found_tasks.evidence
    images = [t for t in tasks if isinstance(t, ImageTask)]
    if not images and not unloadable:
        raise ConfigError(f"{dataset}: no image tasks (Harbor task folders) to validate")
    found = (
        validate_dataset(
            name,
            images,
            runner_from(ctx.obj, address),
            repeats=repeats,
            store=store,
            evidence=evidence,
        )
        if images
        else []
    )
    table = Table("task", "validation", "why", title=f"dataset {escape(name)}")
    colour = {"valid": "green", "broken": "red", "unvalidated": "yellow"}
    for v in found:
        table.add_row(escape(v.task_id), f"[{colour[v.status]}]{v.status}[/]", escape(v.reason))
    for task_id, error in unloadable:
        table.add_row(escape(task_id), "[red]does not load[/]", escape(error))
    console.print(table)
    counts = {s: sum(v.status == s for v in found) for s in colour}
    err_console.print(
        f"{counts['valid']} valid, {counts['broken']} broken, {counts['unvalidated']} not "
        f"validated yet, {len(unloadable)} not loading (store: {ResultsStore(store).safe_url})",
        highlight=False,
    )
    broken = counts["broken"] or unloadable
    raise typer.Exit(3 if counts["unvalidated"] else 1 if broken else 0)


import_app = typer.Typer(help="Import the field's datasets as task folders.")
dataset_app.add_typer(import_app, name="import")


@import_app.command("swebench")
def import_swebench(
    file: Annotated[
        Path, typer.Argument(help="SWE-bench instances (JSONL, the datasets' fields).")
    ],
    out: Annotated[Path, typer.Option(help="Folder to write one task folder per instance into.")],
    repository: Annotated[
        list[str] | None,
        typer.Option(help="OWNER/NAME=URL-or-path: where a repository is (default: GitHub)."),
    ] = None,
    image: Annotated[
        list[str] | None,
        typer.Option(
            help="OWNER/NAME[@VERSION]=IMAGE: a user image (default: the instance's own)."
        ),
    ] = None,
    namespace: Annotated[
        str, typer.Option(help="Registry namespace of SWE-bench's images ('' for local names).")
    ] = "swebench",
    tag: Annotated[str, typer.Option(help="Tag of SWE-bench's images.")] = "latest",
    hints: Annotated[bool, typer.Option(help="Add hints_text to the task text.")] = False,
    test_cmd: Annotated[
        str, typer.Option(help="Test command run on the test files (an instance's test_cmd wins).")
    ] = "pytest -rA",
    log_parser: Annotated[
        str | None, typer.Option(help="A swebench log parser by name (default: the repository's).")
    ] = None,
) -> None:
    """Write each SWE-bench instance as a task folder: the repository at base_commit as the
    workspace in /testbed, the instance's image, test_patch and the tests after the agent,
    graded with swebench's own parser; the gold patch is the `gold` (oracle) agent."""
    from hangar.kinds.execution.harbor.cli import parse_pairs
    from hangar.kinds.execution.swebench.instances import ImportOptions, import_instances

    options = ImportOptions(
        repositories=parse_pairs(repository, "--repository"),
        images=parse_pairs(image, "--image"),
        namespace=namespace or None,
        tag=tag,
        hints=hints,
        test_cmd=test_cmd,
        log_parser=log_parser,
    )
    folders = import_instances(file, out, options)
    console.print(f"wrote {len(folders)} task folder(s) under {escape(str(out))}", highlight=False)


@dataset_app.command("export-predictions")
def export_predictions(
    ctx: typer.Context,
    sweep: Annotated[str, typer.Argument(help="Sweep file, or a sweep id in --store.")],
    out: Annotated[Path, typer.Option(help="The predictions file (JSONL) to write.")],
    agent: Annotated[str | None, typer.Option(help="Only this agent's trials.")] = None,
    model: Annotated[str | None, typer.Option(help="Only this model's trials.")] = None,
    repeat: Annotated[int, typer.Option(help="Which repeat of each trial.")] = 0,
    store: Annotated[str | None, typer.Option(help="Results store URL.")] = None,
) -> None:
    """Write SWE-bench's predictions format (instance_id, model_name_or_path, model_patch)
    from the diffs of a sweep's trials, so its runs can be rechecked by SWE-bench's own
    harness. One (agent, model) per file: name them when the sweep has several."""
    from hangar.evidence.archive import read_member
    from hangar.kinds.execution.swebench.instances import predictions

    sweep_id, results = services_of(ctx.obj).resolve_sweep(sweep, store)
    rows = [
        r
        for r in results.results(sweep_id)
        if r.kind == "execution"
        and r.repeat == repeat
        and (agent is None or r.agent == agent)
        and (model is None or r.model == model)
        and r.evidence_uri is not None
    ]
    groups = sorted({(r.agent, r.model) for r in rows})
    if not groups:
        raise ConfigError(f"sweep {sweep_id!r} has no execution trials with evidence to export")
    if len(groups) > 1:
        named = ", ".join(f"--agent {a} --model {m}" for a, m in groups)
        raise ConfigError(f"sweep {sweep_id!r} has several agents or models: choose one ({named})")
    found = predictions(
        (
            r.scenario_id,
            f"{r.agent}/{r.model}",
            read_member(r.evidence_uri, "diff.patch", r.evidence_sha256),
        )
        for r in rows
        if r.evidence_uri is not None
    )
    out.write_text("".join(json.dumps(p) + "\n" for p in found))
    console.print(f"wrote {len(found)} prediction(s) to {escape(str(out))}", highlight=False)


@dataset_app.command("pull")
def dataset_pull(
    ref: Annotated[str, typer.Argument(help="The dataset and its version: NAME@VERSION.")],
    registry: Annotated[
        str,
        typer.Option(
            help="Harbor's registry.json: a folder holding it, the file, or a git repository."
        ),
    ],
) -> None:
    """Fetch a registry dataset's tasks at their commits into the cache and pin them in a
    lock (each task's commit and content digest, as Harbor computes it). A sweep runs it
    as `scenarios: [registry:NAME@VERSION]`; a task changed since the pull is refused
    until it is pulled again."""
    from hangar.kinds.execution.harbor.registry import dataset_folder, parse_ref, pull

    lock, changed = pull(ref, registry)
    folder = dataset_folder(*parse_ref(ref))
    console.print(
        f"pulled {lock.ref}: {len(lock.tasks)} task(s) into {escape(str(folder / 'tasks'))}, "
        f"locked in {escape(str(folder / 'lock.json'))}",
        highlight=False,
    )
    for name in changed:
        console.print(
            f"  {escape(name)} changed since the last pull: a new version of the task "
            "(its trials are new trials)",
            highlight=False,
        )
