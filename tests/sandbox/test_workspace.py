"""Pinned workspaces: mirrored once per node, private, with no future and no origin."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import hangar.sandbox.workspace
from hangar.sandbox.workspace import (
    MirrorCache,
    WorkspaceError,
    diff_against_pin,
    hand_over,
    make_workspace,
    remove_escaping_links,
)

BUNDLE = Path(__file__).resolve().parents[2] / "examples" / "repos" / "statkit.bundle"
PINNED = "1a6dc25e2e61b7f41b02576bc56b0eadd895cbb2"
LATER = "1db31c2ac01c1850acb563dc5e73d3b720e4f3d6"


def git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["git", "-c", "safe.directory=*", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=check,
    )


@pytest.fixture
def plain_repo(tmp_path: Path) -> Path:
    """The example repository cloned as an ordinary (non-bundle) repository."""
    repo = tmp_path / "plain"
    subprocess.run(["git", "clone", "-q", str(BUNDLE), str(repo)], check=True)
    return repo


@pytest.mark.parametrize("kind", ["bundle", "path", "file-url"])
def test_sources_work_offline(kind: str, plain_repo: Path, tmp_path: Path) -> None:
    url = {"bundle": str(BUNDLE), "path": str(plain_repo), "file-url": plain_repo.as_uri()}[kind]
    ws = tmp_path / "ws"
    make_workspace(MirrorCache(tmp_path / "cache"), url, PINNED, ws)
    assert git(ws, "rev-parse", "HEAD").stdout.strip() == PINNED
    assert (ws / "statkit" / "stats.py").is_file()


def test_workspace_holds_no_future_and_no_origin(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    make_workspace(MirrorCache(tmp_path / "cache"), str(BUNDLE), PINNED, ws)
    assert git(ws, "remote").stdout == ""
    assert git(ws, "tag").stdout == ""
    assert git(ws, "log", "--all", "--format=%H").stdout.split() == [PINNED]
    assert git(ws, "cat-file", "-t", LATER, check=False).returncode != 0
    assert not (ws / ".git" / "FETCH_HEAD").exists()
    mirror = MirrorCache(tmp_path / "cache").path_for(str(BUNDLE))
    assert git(mirror, "cat-file", "-t", LATER).stdout.strip() == "commit"  # it was there


def test_mirror_is_fetched_once_and_reused(tmp_path: Path) -> None:
    cache = MirrorCache(tmp_path / "cache")
    make_workspace(cache, str(BUNDLE), PINNED, tmp_path / "a")
    packs = sorted((cache.path_for(str(BUNDLE)) / "objects" / "pack").iterdir())
    stamp = [p.stat().st_mtime_ns for p in packs]
    make_workspace(cache, str(BUNDLE), PINNED, tmp_path / "b")
    assert sorted((cache.path_for(str(BUNDLE)) / "objects" / "pack").iterdir()) == packs
    assert [p.stat().st_mtime_ns for p in packs] == stamp


def test_concurrent_trials_share_one_mirror(tmp_path: Path) -> None:
    cache = MirrorCache(tmp_path / "cache")
    with ThreadPoolExecutor(6) as pool:
        list(
            pool.map(
                lambda i: make_workspace(cache, str(BUNDLE), PINNED, tmp_path / f"ws{i}"), range(6)
            )
        )
    for i in range(6):
        assert git(tmp_path / f"ws{i}", "rev-parse", "HEAD").stdout.strip() == PINNED
    assert [p.name for p in (tmp_path / "cache").glob("*.git")] == [
        cache.path_for(str(BUNDLE)).name
    ]


def test_new_revision_is_fetched_into_an_existing_mirror(plain_repo: Path, tmp_path: Path) -> None:
    cache = MirrorCache(tmp_path / "cache")
    make_workspace(cache, str(plain_repo), PINNED, tmp_path / "a")
    (plain_repo / "NEW").write_text("new\n")
    git(plain_repo, "add", "NEW")
    git(plain_repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "new")
    new = git(plain_repo, "rev-parse", "HEAD").stdout.strip()
    make_workspace(cache, str(plain_repo), new, tmp_path / "b")
    assert (tmp_path / "b" / "NEW").read_text() == "new\n"


def test_missing_revision_and_repository(tmp_path: Path) -> None:
    cache = MirrorCache(tmp_path / "cache")
    with pytest.raises(WorkspaceError, match=f"revision {'e' * 40} is not in repository"):
        make_workspace(cache, str(BUNDLE), "e" * 40, tmp_path / "ws")
    with pytest.raises(WorkspaceError, match="does not exist"):
        make_workspace(cache, str(tmp_path / "nope.bundle"), PINNED, tmp_path / "ws2")


def test_hand_over_gives_files_to_the_sandbox_user(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    make_workspace(MirrorCache(tmp_path / "cache"), str(BUNDLE), PINNED, ws)
    hand_over(ws, 1000)
    owners = {p.stat().st_uid for p in [ws, *ws.rglob("*")]}
    assert owners == {1000} or all(p.stat().st_mode & 0o002 for p in ws.rglob("*") if p.is_file())


def test_remove_escaping_links(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "file.txt").write_text("x")
    (root / "ok").symlink_to("file.txt")
    (root / "sub" / "ok-up").symlink_to("../file.txt")
    (root / "abs").symlink_to("/etc/passwd")
    (root / "sub" / "escape").symlink_to("../../outside")
    (root / "dirlink").symlink_to("/")
    removed = remove_escaping_links(root)
    assert sorted(r["path"] for r in removed) == ["abs", "dirlink", "sub/escape"]
    assert (root / "ok").is_symlink() and (root / "sub" / "ok-up").is_symlink()
    assert not (root / "abs").exists() and not (root / "abs").is_symlink()


def test_the_revision_is_packed_once_and_each_workspace_gets_a_copy(tmp_path: Path) -> None:
    cache = MirrorCache(tmp_path / "cache")
    make_workspace(cache, str(BUNDLE), PINNED, tmp_path / "a")
    pack = cache.pack(str(BUNDLE), PINNED)
    made = pack.stat().st_mtime_ns
    make_workspace(cache, str(BUNDLE), PINNED, tmp_path / "b")
    assert cache.pack(str(BUNDLE), PINNED) == pack and pack.stat().st_mtime_ns == made
    for ws in ("a", "b"):
        copy = tmp_path / ws / ".git" / "objects" / "pack" / pack.name
        assert copy.read_bytes() == pack.read_bytes()
        assert copy.stat().st_ino != pack.stat().st_ino  # a copy, never a link to the cache
    listed = git(tmp_path / "a", "verify-pack", "-v", str(copy.with_suffix(".idx"))).stdout
    assert LATER not in listed and PINNED in listed


def test_diff_against_pin_names_each_change_and_cuts_a_long_patch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = MirrorCache(tmp_path / "cache")
    ws = tmp_path / "ws"
    make_workspace(cache, str(BUNDLE), PINNED, ws)
    (ws / "statkit" / "stats.py").write_text("x = 1\n" * 4000)
    (ws / "a\tb c").write_text("tab and space\n")
    (ws / "README.md").unlink()
    args = (cache, str(BUNDLE), PINNED, ws, tmp_path / "scratch", tmp_path / "diff.patch")
    whole = diff_against_pin(*args)
    assert whole.changes.splitlines() == ["D\tREADME.md", 'A\t"a\\tb c"', "M\tstatkit/stats.py"]
    assert not whole.diff_truncated
    patch = (tmp_path / "diff.patch").read_bytes()
    assert patch.startswith(b"diff --git ") and b"+x = 1\n" in patch
    monkeypatch.setattr(hangar.sandbox.workspace, "DIFF_LIMIT", 1000)
    cut = diff_against_pin(*args)
    assert cut.diff_truncated and cut.changes == whole.changes
    assert (tmp_path / "diff.patch").read_bytes() == patch[:1000]
    assert sorted(p.name for p in (tmp_path / "scratch").iterdir()) == []  # nothing left
