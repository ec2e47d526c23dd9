"""The public API (`hangar.api`) stays: its names, where a plugin finds them, its page."""

from __future__ import annotations

import ast

import hangar.api as api

#: The names packages that extend hangar build on. Removing or renaming one breaks them:
#: a change here is a breaking release, said so in the changelog.
PUBLIC = {
    "About", "AgentSpec", "Arm", "CheckOutcome", "ConfigError", "ExecResult", "ExecutionTask",
    "Failure", "HangarError", "ImageTask", "Kind", "KindSettings", "LoadedScenario",
    "LocalSandbox", "Matrix", "ModelSpec", "Mount", "Outcome", "Preset", "ReportSection",
    "Sandbox", "SandboxError", "SandboxLimits", "SandboxSpec", "SandboxedTrial", "Score",
    "SweepSettings", "Task", "TaskSource", "TrialOutcome", "TrialResult", "TrialRun",
    "TrialSpec", "Usage", "Verdict", "ViewSettings", "load_scenario", "new_spec",
}  # fmt: skip


def test_the_public_names_stay_and_each_says_what_it_is() -> None:
    assert set(api.__all__) == PUBLIC, (
        f"removed: {sorted(PUBLIC - set(api.__all__))}; "
        f"added without a line here: {sorted(set(api.__all__) - PUBLIC)}"
    )
    for name in api.__all__:
        obj = getattr(api, name)
        described = api.ABOUT.get(name) or (
            obj.__doc__ if getattr(obj, "__module__", "").startswith("hangar") else None
        )
        assert described and described.strip(), f"{name} has no docstring of its own"


def test_the_test_plugin_package_uses_only_the_public_api() -> None:
    from tests.plugin_package import MODULE

    imported = [
        node
        for node in ast.walk(ast.parse(MODULE))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hangar")
    ]
    assert imported and {node.module for node in imported} == {"hangar.api"}


def test_the_reference_page_lists_every_public_name() -> None:
    from tests.test_docs import _gen_docs

    page = _gen_docs().api_reference()
    missing = [name for name in api.__all__ if f"| `{name}` |" not in page]
    assert not missing, f"{missing} are not on the page"
