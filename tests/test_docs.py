"""The documentation users read: a short README, and no labels that mean nothing to them
(the design's seed documents, tracker issues, files outside the repository) in it, in the
site's pages or in the command line's help."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What user-facing text must not say: "seed 001", "the seed's", "issue 12", paths or
#: tools outside the repository, the design file the repository was built from.
INTERNAL = re.compile(
    r"\bseeds?\s+0*\d+|\bseeds?'s?\b(?! *=)|\bissues? \d+|\.\./shared|fresh-machine|DESIGN\.md",
    re.IGNORECASE,
)


def _gen_docs():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen-docs.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_the_readme_is_short() -> None:
    assert (ROOT / "README.md").stat().st_size <= 10 * 1024


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pages_use_no_internal_labels(page: Path) -> None:
    hits = [m.group(0) for m in INTERNAL.finditer(page.read_text(encoding="utf-8"))]
    assert not hits, f"{page.relative_to(ROOT)}: {hits}"


def test_the_command_line_help_uses_no_internal_labels() -> None:
    text = _gen_docs().cli_reference()
    assert "hangar scenario check" in text and "hangar decision" in text  # kinds' groups too
    assert not INTERNAL.findall(text)


def test_the_schemas_follow_the_models() -> None:
    text = _gen_docs().schemas()
    from hangar.kinds.execution.scenarios.scenario import Scenario

    for field in Scenario.model_fields:
        assert f"| `{field}` |" in text
    assert not INTERNAL.findall(text)


def test_the_site_has_every_page_in_its_nav() -> None:
    import yaml

    nav = yaml.safe_load((ROOT / "mkdocs.yml").read_text())["nav"]
    listed: set[str] = set()

    def walk(node: object) -> None:
        if isinstance(node, str):
            listed.add(node)
        elif isinstance(node, list):
            for item in node:
                walk(item)
        elif isinstance(node, dict):
            for value in node.values():
                walk(value)

    walk(nav)
    written = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*.md")}
    generated = {
        "reference/cli.md",
        "reference/schemas.md",
        "reference/phases.md",
        "reference/api.md",
        "tutorial.md",
    }
    assert written - generated <= listed
    assert generated <= listed
