"""Archives made to escape: known exploits, hand-written variants and generated ones.

The property every test checks is the one `extract_untrusted` promises: whatever an
archive holds, nothing outside the target folder is created or changed, and every link
left inside the target resolves inside it.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import sys
import tarfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hangar.errors import SandboxError, SandboxFileTooLarge
from hangar.sandbox.archive import MAX_NAME, extract_untrusted

Entry = tuple[str, str, str]  # (kind, name, link text or data)


def _archive(entries: list[Entry], prefix: str = "") -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for kind, name, extra in entries:
            info = tarfile.TarInfo(prefix + name)
            data = b""
            if kind == "file":
                data = extra.encode()
                info.size, info.mode = len(data), 0o6777
            elif kind == "dir":
                info.type = tarfile.DIRTYPE
            elif kind == "sym":
                info.type, info.linkname = tarfile.SYMTYPE, extra
            elif kind == "hard":
                info.type, info.linkname = tarfile.LNKTYPE, prefix + extra
            elif kind == "fifo":
                info.type = tarfile.FIFOTYPE
            elif kind == "dev":
                info.type, info.devmajor, info.devminor = tarfile.CHRTYPE, 1, 3
            tar.addfile(info, io.BytesIO(data) if data else None)
    buf.seek(0)
    return buf


def _cve_2025_4517(prefix: str = "") -> list[Entry]:
    """The symlink chain past PATH_MAX that walks tarfile's data filter out of its folder:
    links whose real path is too long for a non-strict realpath, which then resolves the
    rest as text, while the kernel follows every link."""
    comp, steps = "d" * 247, "abcdefghijklmnop"
    entries: list[Entry] = []
    path = ""
    for step in steps:
        entries += [("dir", f"{path}{comp}", ""), ("sym", f"{path}{step}", comp)]
        path += comp + "/"
    chain = "/".join(steps) + "/" + "l" * 254
    entries += [
        ("sym", chain, "/".join([".."] * len(steps))),
        ("sym", "escape", chain + "/.."),
        ("file", "escape/owned", "created outside"),
        ("sym", "hardescape", chain + "/../sentinel"),
        ("hard", "hardlink", "hardescape"),
        ("file", "hardlink", "overwritten"),
    ]
    return entries


def _snapshot(folder: Path, *leave_out: Path) -> dict[str, str]:
    """Every entry under `folder` but those in `leave_out`: its type and content."""
    seen: dict[str, str] = {}
    for dirpath, dirs, files in os.walk(folder):
        here = Path(dirpath)
        if any(here == out or out in here.parents for out in leave_out):
            continue
        for name in dirs + files:
            path = here / name
            if path in leave_out:
                continue
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                seen[str(path)] = "link " + os.readlink(path)
            elif stat.S_ISREG(info.st_mode):
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                seen[str(path)] = f"file {digest} {info.st_mode:o} {info.st_nlink}"
            else:
                seen[str(path)] = f"other {info.st_mode:o}"
    return seen


def _check_inside(target: Path) -> None:
    """Every link under `target` resolves inside it; no special file, no set-uid bit."""
    real = target.resolve()
    for dirpath, dirs, files in os.walk(target):
        for name in dirs + files:
            path = Path(dirpath) / name
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                resolved = Path(os.path.realpath(path))
                assert resolved == real or real in resolved.parents, f"{path} -> {resolved}"
            else:
                assert stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode), path
                assert not info.st_mode & 0o7022, f"{path} is {info.st_mode:o}"


@pytest.fixture
def arena(tmp_path: Path) -> Path:
    """A folder whose neighbours an escape would change: a sentinel beside the target
    and files named like the archives' own entries above it."""
    (tmp_path / "sentinel").write_text("before")
    for name in ("a", "b", "owned", "x"):
        (tmp_path / name).write_text(f"outside {name}")
    (tmp_path / "target").mkdir()
    return tmp_path


@pytest.mark.parametrize("strip", [0, 1])
def test_the_symlink_chain_past_path_max_writes_nothing_outside(arena: Path, strip: int) -> None:
    before = _snapshot(arena, arena / "target")
    entries = _cve_2025_4517()
    archive = lambda: _archive(entries, prefix="top/" if strip else "")  # noqa: E731
    with pytest.raises(SandboxError, match="unsafe entry"):
        extract_untrusted(archive(), arena / "target", strip=strip, limit=1 << 20)
    skipped: list[str] = []
    extract_untrusted(archive(), arena / "target", strip=strip, limit=1 << 20, skipped=skipped)
    assert _snapshot(arena, arena / "target") == before
    assert (arena / "sentinel").read_text() == "before"
    assert any(s.startswith("escape/owned: ") for s in skipped), skipped
    _check_inside(arena / "target")


@pytest.mark.skipif(sys.version_info >= (3, 12), reason="the backported filter is read on 3.11")
def test_the_same_chain_walks_out_of_the_data_filter(arena: Path) -> None:
    """What the test above guards against is real: the data filter lets it out."""
    from backports import tarfile as backported

    with backported.open(fileobj=_archive(_cve_2025_4517())) as tar:
        tar.extractall(arena / "target", filter="data")
    assert (arena / "owned").read_text() == "created outside"


@pytest.mark.parametrize(
    "entries",
    [
        # links made of links: each alone stays inside as text, together they climb out
        [("sym", "l1", "."), ("sym", "l2", "l1/.."), ("file", "l2/x", "out")],
        [
            ("dir", "d", ""),
            ("sym", "d/up", ".."),
            ("sym", "e", "d/up/d/up/.."),
            ("file", "e/x", ""),
        ],
        [("sym", "p", "q"), ("sym", "q", "p"), ("file", "p/x", "loop")],
        # a file or a hard link written through a link
        [("sym", "link", ".."), ("file", "link/x", "out")],
        [("sym", "link", ".."), ("hard", "h", "link/sentinel")],
        [("hard", "h", "../sentinel")],
        [("sym", "s", "../sentinel"), ("hard", "h", "s")],
        # a link that replaces a folder already filled, and one that points at it
        [("dir", "d", ""), ("file", "d/f", "in"), ("sym", "d", "..")],
        # a file whose name is taken by a link out, then by the file
        [("sym", "x", "../x"), ("file", "x", "inside")],
        # specials and a name past PATH_MAX
        [("fifo", "pipe", ""), ("dev", "null", "")],
        [("file", "/".join(["n" * 200] * 25), "deep")],
    ],
)
def test_hand_written_escapes_change_nothing_outside(arena: Path, entries: list[Entry]) -> None:
    before = _snapshot(arena, arena / "target")
    skipped: list[str] = []
    extract_untrusted(_archive(entries), arena / "target", strip=0, limit=1 << 20, skipped=skipped)
    assert _snapshot(arena, arena / "target") == before
    _check_inside(arena / "target")


def test_what_is_refused_is_named_and_the_rest_extracts(arena: Path) -> None:
    entries: list[Entry] = [
        ("file", "ok", "fine"),
        ("sym", "l1", "."),
        ("sym", "l2", "l1/.."),
        ("hard", "h", "ok"),
        ("file", "/".join(["n" * 200] * 25), "deep"),
        ("sym", "inner", "ok"),
    ]
    skipped: list[str] = []
    extract_untrusted(_archive(entries), arena / "target", strip=0, limit=1 << 20, skipped=skipped)
    target = arena / "target"
    assert (target / "ok").read_text() == "fine" and (target / "inner").read_text() == "fine"
    assert (target / "h").stat().st_ino == (target / "ok").stat().st_ino
    assert not (target / "l2").is_symlink()
    names = [s.split(": ")[0] for s in skipped]
    assert names[0] == "/".join(["n" * 200] * 25) and names[1] == "l2", skipped
    assert f"longer than {MAX_NAME} bytes" in skipped[0]


def test_hard_links_count_once_and_sizes_stop_at_the_cap(arena: Path) -> None:
    entries: list[Entry] = [("file", "a", "x" * 600), ("hard", "b", "a"), ("hard", "c", "a")]
    extract_untrusted(_archive(entries), arena / "target", strip=0, limit=1000)
    with pytest.raises(SandboxFileTooLarge):
        extract_untrusted(
            _archive([("file", "a", "x" * 600), ("file", "b", "y" * 600)]),
            arena / "other",
            strip=0,
            limit=1000,
        )


# -- generated archives ---------------------------------------------------------------------

_PART = st.sampled_from(["a", "b", "x", "owned", "sentinel", "..", ".", ""])
_PATH = st.lists(_PART, min_size=1, max_size=5).map("/".join)
_LINK = st.tuples(st.booleans(), _PATH).map(lambda t: ("/" if t[0] else "") + t[1])
_ENTRY = st.one_of(
    st.tuples(st.just("file"), _PATH, st.sampled_from(["data", "more data"])),
    st.tuples(st.just("dir"), _PATH, st.just("")),
    st.tuples(st.just("sym"), _PATH, _LINK),
    st.tuples(st.just("hard"), _PATH, _PATH),
    st.tuples(st.sampled_from(["fifo", "dev"]), _PATH, st.just("")),
)


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,  # the same 400 archives every run: a failure reproduces
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(entries=st.lists(_ENTRY, min_size=1, max_size=12), strip=st.sampled_from([0, 1]))
def test_generated_archives_never_reach_outside(
    tmp_path_factory: pytest.TempPathFactory, entries: list[Entry], strip: int
) -> None:
    arena = tmp_path_factory.mktemp("arena")
    (arena / "sentinel").write_text("before")
    for name in ("a", "b", "owned", "x"):
        (arena / name).write_text(f"outside {name}")
    target = arena / "inner" / "target"
    target.mkdir(parents=True)
    again = arena / "inner" / "again"
    before = _snapshot(arena, target, again)
    prefix = "top/" if strip else ""
    skipped: list[str] = []
    archive = _archive(entries, prefix)
    extract_untrusted(archive, target, strip=strip, limit=1 << 20, skipped=skipped)
    assert _snapshot(arena, target, again) == before
    _check_inside(target)
    try:  # without `skipped` the same archive either extracts or is refused as a whole
        extract_untrusted(_archive(entries, prefix), again, strip=strip, limit=1 << 20)
    except SandboxError as exc:
        assert "unsafe entry" in str(exc) and skipped
    assert _snapshot(arena, target, again) == before
    _check_inside(again)
