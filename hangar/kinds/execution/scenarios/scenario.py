"""Scenarios (also called fixtures): one task, pinned to a repository revision.

A scenario is a YAML file. Relative paths in it are relative to the file's folder.
Its **digest** is sha256 over the canonical scenario, the bytes of every file it
references (prepare script, host verifier, hidden verifier files, plugins) and of the
code that judges it (`judging_digest`): change one byte and it is a new scenario
version, never an edit of the old one. The repository is
pinned by its exact commit, so the digest covers the repository reference and revision,
not the bytes of a bundle (two bundles of the same commit are the same fixture).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Self

import yaml
from pydantic import (
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)

from hangar import verifiers
from hangar.errors import ConfigError
from hangar.files import file_sha256, read_yaml, tree_digest
from hangar.kinds.execution.task import ExecutionTask
from hangar.trials.limits import ScenarioLimits
from hangar.validation import CaseId, Name, Strict, validation_message

if TYPE_CHECKING:
    from hangar.kinds.execution.settings import ExecutionSettings
    from hangar.trials.boundary import TrialRun
    from hangar.trials.kind import Matrix
    from hangar.trials.spec import TrialSpec
from hangar.verifiers.spec import (
    BuiltinVerifier,
    PinnedFile,
    VerifierSpec,
)

#: An exact commit.
REVISION = re.compile(r"^[0-9a-f]{40}$")


def pinned_revision(value: object) -> str:
    """`value` when it is an exact commit (a scenario's or a fixture's ``revision``)."""
    if not isinstance(value, str):
        raise ValueError(
            f"expected the exact commit as 40 lowercase hex characters, got {value!r}: "
            "quote it in YAML so it stays a string"
        )
    if not REVISION.match(value):
        raise ValueError(
            f"expected the exact commit as 40 lowercase hex characters, got {value!r} "
            "(a branch, tag or short hash is not a pin: use `git rev-parse`)"
        )
    return value


def task_text(value: str) -> str:
    """`value` when it is a task text (a scenario's or a fixture's ``context``)."""
    if not value.strip():
        raise ValueError("the task text must not be empty")
    return value


class Plugin(Strict):
    """A file or folder an arm may install into the sandbox (a skill, a config)."""

    name: Name
    """Name arms select it by."""
    source: str
    """File or folder, relative to the scenario file."""
    target: str
    """Where it goes in the sandbox; relative paths are under the workspace."""
    install: str | None = None
    """Optional command run in the sandbox after copying (its output is recorded)."""


class Scenario(Strict):
    """One task: a repository at a pinned revision, the task text, and how to judge it."""

    id: CaseId
    """Unique id within a sweep (a fixture registry's case id binds it)."""
    repository: str
    """Git repository or bundle: a path (relative to the scenario file), file:// or URL."""
    revision: str
    """The exact commit (40 lowercase hex characters)."""
    image: str = "hangar/base:bookworm"
    """Sandbox image reference."""
    context: str
    """The task text the agent gets (never the expected answer)."""
    plugins: tuple[Plugin, ...] = ()
    """What arms may install."""
    prepare: PinnedFile | None = None
    """Host script run on the fresh workspace before the agent."""
    verifier: VerifierSpec
    """How the trial is judged."""
    limits: ScenarioLimits = Field(default_factory=ScenarioLimits)
    """Time and resources."""
    network: Literal["none"] = "none"
    """Network of the sandbox; ``none`` is the only mode until an allow-list exists."""
    writable_root: bool = False
    """Keep the image's root file system writable (for an image whose sandbox user writes
    outside HOME, /tmp, /var/tmp and the workspace, e.g. a venv it owns). Verification
    then runs in a fresh sandbox rather than in the agent's, wiped."""
    canaries: tuple[str, ...] = ()
    """Strings that must never appear in a trace; one that does voids the trial."""
    sources_outside: bool = False
    """Let plugin sources and verifier files (what is copied into the sandbox) lie outside
    the scenario's folder (a skill a suite's scenarios share: ``../skills/review``). Off,
    each is a relative path that stays inside it, symlinks resolved, as every target stays
    in the workspace. The host scripts (``prepare``, ``verifier.host``) are pinned by their
    sha256 and may lie anywhere, an absolute path included, without it."""

    _revision = field_validator("revision", mode="before")(pinned_revision)
    _context = field_validator("context")(task_text)

    def plugin(self, name: str) -> Plugin:
        """The plugin called `name`."""
        for p in self.plugins:
            if p.name == name:
                return p
        raise KeyError(name)


class LoadedScenario(ExecutionTask):
    """A scenario with where it came from and its digest: the execution kind's task."""

    model_config = ConfigDict(frozen=True)
    key_field: ClassVar[str] = "scenario"

    path: Path
    """The YAML file."""
    scenario: Scenario
    """Its content."""
    digest: str
    """sha256 of the scenario and the bytes of every file it references."""
    suite: str = ""
    """The suite it belongs to in a sweep (its sealed suite's or suite folder's name)."""
    kind: Literal["execution"] = "execution"
    """The kind of trial a scenario is."""
    origin: str = ""
    """The repository as the driver knew it, on a worker whose copy is a shipped bundle
    ('' elsewhere): the one messages name."""

    @property
    def id(self) -> str:
        """The scenario's id."""
        return self.scenario.id

    @property
    def folder(self) -> Path:
        """The folder relative paths are resolved against."""
        return self.path.parent

    def local(self, relative: str) -> Path:
        """A path of the scenario resolved on the host."""
        return (self.folder / relative).resolve()

    def repository_url(self) -> str:
        """The repository as git understands it (relative paths made absolute)."""
        repo = self.scenario.repository
        return repo if "://" in repo or repo.startswith("git@") else str(self.local(repo))

    def repository_name(self) -> str:
        """The repository as its user named it (never a worker's shipped copy)."""
        return self.origin or self.repository_url()

    # -- what the execution kind asks of its tasks (`hangar.kinds.execution.task`) -----

    def plugin_source(self, name: str) -> Path | None:
        """The folder of the scenario's plugin `name`."""
        try:
            return self.local(self.scenario.plugin(name).source)
        except KeyError:
            return None

    def for_sweep(self, settings: ExecutionSettings, registry: str | None) -> Self:
        """The scenario as it is: a sweep's execution settings are for image tasks."""
        return self

    def fixed_image(self) -> str | None:
        """The scenario's image."""
        return self.scenario.image

    def problems(self, matrix: Matrix, *, deep: bool) -> list[str]:
        """The scenario's admission in each arm (`fixture_checks`)."""
        from hangar.kinds.execution.scenarios.fixture_checks import matrix_problems

        return matrix_problems(self, matrix, deep=deep)

    def trial(self, spec: TrialSpec) -> TrialRun:
        """`ExecutionTrial`."""
        from hangar.kinds.execution.scenarios.trial import ExecutionTrial

        return ExecutionTrial(spec)

    def package(self) -> bytes:
        """The scenario file and every file it references (`shipping.pack_scenario`)."""
        from hangar.kinds.execution.scenarios.shipping import pack_scenario

        return pack_scenario(self)

    def repository_to_ship(self) -> Path | None:
        """Its repository when that is a local path."""
        from hangar.kinds.execution.scenarios.shipping import local_repository

        return local_repository(self)

    def unpacked(self, folder: Path, repository: Path | None) -> Self:
        """The scenario read from `folder`, its repository the shipped bundle."""
        from hangar.kinds.execution.scenarios.shipping import WHERE

        update: dict[str, object] = {"path": folder / (folder / WHERE).read_text()}
        if repository is not None:
            update["scenario"] = self.scenario.model_copy(update={"repository": str(repository)})
            update["origin"] = self.repository_name()
        return self.model_copy(update=update)


def parse_scenario(path: Path, data: Any) -> Scenario:
    """Validate parsed YAML as a scenario; errors name the file and each field."""
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a scenario must be a YAML mapping, got {type(data).__name__}")
    try:
        return Scenario.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(
            validation_message(str(path), "scenario", exc, _text(path), model=Scenario)
        ) from None


def _text(path: Path) -> str:
    """The file's text, for line numbers in messages ('' when it cannot be read)."""
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def load_scenario(path: Path, data: Any = None) -> LoadedScenario:
    """Load, validate and digest one scenario file (`data`: its content as read and bound
    to its fixture, `hangar.kinds.execution.scenarios.fixtures`; default: the file as it is)."""
    path = path.resolve()
    scenario = parse_scenario(path, read_yaml(path) if data is None else data)
    if not scenario.sources_outside:
        _check_sources(path, scenario)
    return LoadedScenario(path=path, scenario=scenario, digest=scenario_digest(path, scenario))


#: Scripts run on the host and pinned by their sha256 (the operator's, as a fixture
#: registry pins its verifiers by absolute path and digest): they may lie anywhere.
_HOST_PINNED = ("prepare", "verifier.host")


def _check_sources(path: Path, scenario: Scenario) -> None:
    """Every file the scenario copies into the sandbox stays inside its folder (see
    `sources_outside`); pinned host scripts may lie anywhere."""
    folder = path.parent
    for role, rel in referenced_files(scenario):
        if role in _HOST_PINNED:
            continue
        pure = PurePosixPath(rel)
        inside = (folder / rel).resolve().is_relative_to(folder)
        if pure.is_absolute() or ".." in pure.parts or not inside:
            raise ConfigError(
                f"{path}: {role}: {rel!r} leaves the scenario's folder {folder}: give a path "
                "inside it, or set `sources_outside: true` to allow files from elsewhere"
            )


def load_registry(paths: list[Path]) -> dict[str, LoadedScenario]:
    """Load several scenarios keyed by id; a repeated id is an error naming both files."""
    registry: dict[str, LoadedScenario] = {}
    for path in paths:
        loaded = load_scenario(path)
        sid = loaded.scenario.id
        if sid in registry:
            raise ConfigError(
                f"duplicate scenario id {sid!r}: {registry[sid].path} and {loaded.path}"
            )
        registry[sid] = loaded
    return registry


def referenced_files(scenario: Scenario) -> list[tuple[str, str]]:
    """(role, relative path) of every file or folder the scenario references."""
    refs: list[tuple[str, str]] = []
    if scenario.prepare is not None:
        refs.append(("prepare", scenario.prepare.file))
    if isinstance(scenario.verifier.host, PinnedFile):
        refs.append(("verifier.host", scenario.verifier.host.file))
    refs += [("verifier.files", f.source) for f in scenario.verifier.files]
    refs += [(f"plugin:{p.name}", p.source) for p in scenario.plugins]
    return refs


#: The code that judges every execution trial (the harness as pinned, tampering signs),
#: and the builtin verifier's: results judged by other code are another version.
_JUDGING_CODE = ("ecosystems.py", "harness.py", "tampering.py", "guard.py", "admission.py")
_BUILTIN_CODE = {"junit": ("junit.py",)}


def judging_digest(scenario: Scenario) -> str:
    """sha256 of the code that judges `scenario`'s trials (in the scenario's digest, as a
    benchmark's scoring code is in its samples')."""
    here = Path(verifiers.__file__).parent
    host = scenario.verifier.host
    names = _JUDGING_CODE + (
        _BUILTIN_CODE[host.builtin] if isinstance(host, BuiltinVerifier) else ()
    )
    h = hashlib.sha256()
    for name in names:
        h.update(name.encode() + b"\0" + (here / name).read_bytes())
    return h.hexdigest()


def scenario_digest(path: Path, scenario: Scenario) -> str:
    """The scenario's digest (see the module docstring)."""
    folder = path.resolve().parent
    dumped = scenario.model_dump(mode="json")
    if not dumped["sources_outside"]:  # added later: at its default, digests stay as they were
        del dumped["sources_outside"]
    payload = {
        "scenario": dumped,
        "judging": judging_digest(scenario),
        "files": [
            [role, rel, tree_digest(folder / rel)] for role, rel in referenced_files(scenario)
        ],
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def repin(path: Path) -> list[tuple[str, str, str]]:
    """Rewrite the scenario's script pins to the scripts' current sha256, in place, and
    write the pins that are missing (a ``prepare`` or ``verifier.host`` with a ``file``
    and no ``sha256``).

    Only the ``sha256:`` strings change or are added, so comments and layout stay.
    Returns (script, old pin or '', new pin) for each pin written.
    """
    text, added = _missing_pins(path, path.read_text(encoding="utf-8"))
    if added:
        path.write_text(text, encoding="utf-8")
    scenario = parse_scenario(path, read_yaml(path))
    pins = [p for p in (scenario.prepare, scenario.verifier.host) if isinstance(p, PinnedFile)]
    changed = []
    for pinned in pins:
        actual = file_sha256(path.parent / pinned.file)
        if actual != pinned.sha256:
            text = text.replace(pinned.sha256, actual)
            changed.append((pinned.file, pinned.sha256, actual))
    if changed:
        path.write_text(text, encoding="utf-8")
    return added + changed


def _missing_pins(path: Path, text: str) -> tuple[str, list[tuple[str, str, str]]]:
    """`text` with a ``sha256`` written into each script mapping that names a ``file``
    without one (flow or block style kept), and (script, '', pin) for each."""
    try:
        root = yaml.compose(text)
    except yaml.YAMLError:
        return text, []  # parse_scenario says what is wrong
    spots = []
    for node in _script_nodes(root):
        keys = {k.value: v for k, v in node.value}
        file = keys.get("file")
        if file is None or "sha256" in keys or not isinstance(file, yaml.ScalarNode):
            continue
        script = path.parent / file.value
        if not script.is_file():
            raise ConfigError(
                f"{path}: cannot pin {file.value}: no such file (looked for {script})"
            )
        spots.append((node, file, file_sha256(script)))
    added = []
    for node, file, pin in sorted(spots, key=lambda s: -s[0].end_mark.index):
        if node.flow_style:
            at = node.end_mark.index - 1  # before the closing brace
            text = f'{text[:at].rstrip()}, sha256: "{pin}"{text[at:]}'
        else:
            at = (
                text.index("\n", file.end_mark.index) + 1
                if "\n" in text[file.end_mark.index :]
                else len(text)
            )
            indent = " " * node.start_mark.column
            text = f'{text[:at]}{indent}sha256: "{pin}"\n{text[at:]}'
        added.append((file.value, "", pin))
    return text, added


def _script_nodes(root: Any) -> list[Any]:
    """The YAML mappings of ``prepare`` and ``verifier.host``."""
    if not isinstance(root, yaml.MappingNode):
        return []
    top = {k.value: v for k, v in root.value}
    found = [top.get("prepare")]
    verifier = top.get("verifier")
    if isinstance(verifier, yaml.MappingNode):
        found.append({k.value: v for k, v in verifier.value}.get("host"))
    return [n for n in found if isinstance(n, yaml.MappingNode)]
