"""Untrusted archives: nothing leaves the target, on every supported Python."""

from __future__ import annotations

import io
import sys
import tarfile
from pathlib import Path

import pytest

from hangar.errors import SandboxError, SandboxFileTooLarge
from hangar.sandbox import archive
from hangar.sandbox.archive import extract_untrusted


def _tar(*members: tuple[tarfile.TarInfo, bytes]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for info, data in members:
            info.size = len(data) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    buf.seek(0)
    return buf


def _member(name: str, kind: bytes = tarfile.REGTYPE, **fields: object) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    for key, value in fields.items():
        setattr(info, key, value)
    return info


def test_headers_are_read_by_the_same_module_on_every_patch_level() -> None:
    # Debian 12's Python 3.11.2 has an older tarfile; hangar reads headers with CPython
    # 3.12's module there (backports.tarfile), so the same parser runs everywhere.
    if sys.version_info < (3, 12):
        assert archive.tarfile.__name__ == "backports.tarfile"
    else:
        assert archive.tarfile is tarfile


def test_regular_files_and_inner_links_extract(tmp_path: Path) -> None:
    buf = _tar(
        (_member("top/a.txt", mode=0o4755), b"hello"),
        (_member("top/dir", tarfile.DIRTYPE, mode=0o755), b""),
        (_member("top/dir/link", tarfile.SYMTYPE, linkname="../a.txt"), b""),
    )
    extract_untrusted(buf, tmp_path / "out", strip=1, limit=1 << 20)
    assert (tmp_path / "out" / "a.txt").read_bytes() == b"hello"
    assert not (tmp_path / "out" / "a.txt").stat().st_mode & 0o4000  # set-uid dropped
    assert (tmp_path / "out" / "dir" / "link").read_bytes() == b"hello"


@pytest.mark.parametrize(
    "member",
    [
        _member("top/../../evil"),
        _member("top/out", tarfile.SYMTYPE, linkname="/etc/passwd"),
        _member("top/up", tarfile.SYMTYPE, linkname="../../etc"),
        _member("top/dev", tarfile.CHRTYPE, devmajor=1, devminor=3),
    ],
    ids=["dotdot", "abs-link", "escaping-link", "device"],
)
def test_unsafe_members_are_refused(tmp_path: Path, member: tarfile.TarInfo) -> None:
    target = tmp_path / "out"
    with pytest.raises(SandboxError, match="unsafe entry"):
        extract_untrusted(_tar((member, b"x")), target, strip=0, limit=1 << 20)
    assert not (tmp_path / "evil").exists() and not (tmp_path.parent / "evil").exists()


def test_size_cap(tmp_path: Path) -> None:
    buf = _tar((_member("a"), b"x" * 600), (_member("b"), b"y" * 600))
    with pytest.raises(SandboxFileTooLarge):
        extract_untrusted(buf, tmp_path, strip=0, limit=1000)


def test_absolute_paths_land_inside_the_target(tmp_path: Path) -> None:
    extract_untrusted(_tar((_member("/tmp/hangar-evil"), b"x")), tmp_path, strip=0, limit=99)
    assert (tmp_path / "tmp" / "hangar-evil").read_bytes() == b"x"
    assert not Path("/tmp/hangar-evil").exists()


def test_refused_members_can_be_skipped_and_named(tmp_path: Path) -> None:
    """An agent's own workspace coming back: what the filter refuses is left out, named."""
    buf = _tar(
        (_member("top/ok.txt"), b"fine"),
        (_member("top/pipe", tarfile.FIFOTYPE), b""),
        (_member("top/out", tarfile.SYMTYPE, linkname="/etc/passwd"), b""),
    )
    skipped: list[str] = []
    extract_untrusted(buf, tmp_path, strip=1, limit=1 << 20, skipped=skipped)
    assert (tmp_path / "ok.txt").read_bytes() == b"fine"
    assert not (tmp_path / "pipe").exists() and not (tmp_path / "out").exists()
    assert [s.split(":")[0] for s in skipped] == ["pipe", "out"]
