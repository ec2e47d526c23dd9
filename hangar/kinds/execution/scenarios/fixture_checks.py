"""Admission of an execution scenario (phase 1): every reason it cannot run.

A pinned script whose bytes do not match its sha256, a missing file, an arm selecting a
plugin the scenario lacks, a revision that is not in the repository, an image the engine
lacks. Any reason makes the trial `blocked_setup` before a container starts or a model
is called.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from hangar.errors import WorkspaceError
from hangar.kinds.execution.scenarios.scenario import LoadedScenario
from hangar.sandbox.workspace import MirrorCache
from hangar.verifiers.admission import pinned_script_problem
from hangar.verifiers.spec import PinnedFile

if TYPE_CHECKING:
    from hangar.trials.kind import Matrix


def _script(loaded: LoadedScenario, role: str, pinned: PinnedFile) -> str:
    return pinned_script_problem(loaded.local(pinned.file), pinned, role) or ""


def static_fixture_problems(loaded: LoadedScenario, plugins: tuple[str, ...]) -> list[str]:
    """Every problem found without touching git or the container engine."""
    scenario = loaded.scenario
    problems: list[str] = []
    if scenario.prepare is not None:
        problems.append(_script(loaded, "prepare", scenario.prepare))
    if isinstance(scenario.verifier.host, PinnedFile):
        problems.append(_script(loaded, "verifier", scenario.verifier.host))
    for hidden in scenario.verifier.files:
        if not loaded.local(hidden.source).exists():
            problems.append(f"verifier file {hidden.source} is missing")
    names = {p.name for p in scenario.plugins}
    for name in plugins:
        if name not in names:
            known = ", ".join(sorted(names)) or "none"
            problems.append(f"the arm selects plugin {name!r}, which the scenario lacks ({known})")
        elif not loaded.local(scenario.plugin(name).source).exists():
            problems.append(f"plugin {name!r} source {scenario.plugin(name).source} is missing")
    return [p for p in problems if p]


def fixture_problems(
    loaded: LoadedScenario,
    plugins: tuple[str, ...],
    *,
    mirrors: MirrorCache,
    image_problem: Callable[[str], str | None],
) -> list[str]:
    """Every reason the scenario cannot run (phase 1); empty when it is admitted."""
    problems = static_fixture_problems(loaded, plugins)
    if (image := image_problem(loaded.scenario.image)) is not None:
        problems.append(image)
    url, revision = loaded.repository_url(), loaded.scenario.revision
    try:
        if not mirrors.has_revision(url, revision):
            where = loaded.repository_name()
            copy = f" (shipped to this node as {url})" if where != url else ""
            problems.append(f"revision {revision} is not in repository {where}{copy}")
    except WorkspaceError as exc:
        problems.append(f"repository: {exc}")
    return problems


def matrix_problems(loaded: LoadedScenario, matrix: Matrix, *, deep: bool) -> list[str]:
    """The scenario's admission in each arm of `matrix`, each problem naming it (`deep`:
    also the revision and the image, through git and the sandbox backend)."""
    from hangar.paths import cache_dir
    from hangar.sandbox import sandbox_class

    mirrors = MirrorCache(cache_dir() / "mirrors")
    image_problem = sandbox_class(matrix.backend.kind).image_problem
    found = []
    for arm in matrix.arms:
        problems = (
            fixture_problems(loaded, arm.plugins, mirrors=mirrors, image_problem=image_problem)
            if deep
            else static_fixture_problems(loaded, arm.plugins)
        )
        found += [f"{loaded.id} (arm {arm.name}): {p}" for p in problems]
    return found
