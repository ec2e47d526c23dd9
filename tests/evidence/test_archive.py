"""Evidence archives: deterministic archives whose every byte is checked on verify."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from hangar.cli import app
from hangar.errors import EvidenceStoreError
from hangar.evidence.archive import _archive, archive_bytes, build_archive, verify_archive
from hangar.evidence.stores import FileEvidenceStore, archive_key


@pytest.fixture
def artifacts(tmp_path: Path) -> Path:
    art = tmp_path / "artifacts"
    (art / "verifier").mkdir(parents=True)
    (art / "trace.jsonl").write_text('{"kind": "agent_start"}\n')
    (art / "verifier" / "out.txt").write_bytes(bytes(range(256)))
    (art / "ünï.txt").write_text("unicode name")
    return art


def test_bundle_roundtrip_and_determinism(artifacts: Path, tmp_path: Path) -> None:
    first, second = tmp_path / "a.tar.gz", tmp_path / "b.tar.gz"
    sha = build_archive(artifacts, first)
    assert build_archive(artifacts, second) == sha
    check = verify_archive(first, sha)
    assert check.ok and check.files == 3 and check.problems == []


def test_a_bundle_of_files_in_memory_is_the_folders_archive(
    artifacts: Path, tmp_path: Path
) -> None:
    """A trial with no folder (its evidence in memory) stores the very archive the same
    files in a folder make, byte for byte, in a file store as `put` would."""
    files = {
        p.relative_to(artifacts).as_posix(): p.read_bytes()
        for p in artifacts.rglob("*")
        if p.is_file()
    }
    sha = build_archive(artifacts, tmp_path / "folder.tar.gz")
    data, memory_sha = archive_bytes(files)
    assert memory_sha == sha and data == (tmp_path / "folder.tar.gz").read_bytes()
    store = FileEvidenceStore(tmp_path / "store")
    uri = store.put_bytes("sw/k/1/n-1/bundle.tar.gz", data)
    assert verify_archive(Path(uri.removeprefix("file://")), sha).ok
    assert not [p for p in (tmp_path / "store").rglob(".partial-*")]


def _tarfile_archive(contents: list[tuple[str, bytes]]) -> bytes:
    """The archive `tarfile` itself writes for `contents`, as bundles are described."""
    out = io.BytesIO()
    with (
        gzip.GzipFile(filename="", fileobj=out, mode="wb", mtime=0, compresslevel=6) as gz,
        tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for rel, data in contents:
            info = tarfile.TarInfo(rel)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize(
    "names",
    [
        ["manifest.json", "a.txt", "verifier/out.txt"],
        ["x" * 99, "y" * 100, "z" * 101, "d/" * 60 + "f"],  # at, past the ustar name field
        ["ünï.txt", "日本/語.txt", "sp ace", "back\\slash"],  # a PAX record each
        [],
    ],
)
def test_the_archive_is_tarfiles_byte_for_byte(names: list[str]) -> None:
    """Headers are `tarfile`'s with the size put in: the same bytes as `TarFile.addfile`
    for every size around the block and record boundaries, long and non-ASCII names."""
    sizes = [0, 1, 511, 512, 513, 10240 - 1536, 10240, 70001]
    for shift in range(len(sizes)):
        contents = [
            (name, bytes([i % 251]) * sizes[(i + shift) % len(sizes)])
            for i, name in enumerate(names)
        ]
        out = io.BytesIO()
        _archive(out, iter(contents))
        assert out.getvalue() == _tarfile_archive(contents), (names, shift)


def test_symlinks_are_listed_not_followed(artifacts: Path, tmp_path: Path) -> None:
    (artifacts / "leak").symlink_to("/etc/passwd")
    out = tmp_path / "b.tar.gz"
    build_archive(artifacts, out)
    with tarfile.open(out) as tar:
        names = tar.getnames()
    assert "leak" not in names
    assert '"leak"' in (artifacts / "manifest.json").read_text()


def test_a_modified_byte_in_the_archive_is_detected(artifacts: Path, tmp_path: Path) -> None:
    out = tmp_path / "b.tar.gz"
    sha = build_archive(artifacts, out)
    data = bytearray(out.read_bytes())
    data[len(data) // 2] ^= 0x01
    out.write_bytes(bytes(data))
    check = verify_archive(out, sha)
    assert not check.ok and any("archive sha256" in p for p in check.problems)
    assert verify_archive(out).ok is False  # even without the recorded sha256


def _repack(src: Path, dest: Path, edit: str) -> None:
    with tarfile.open(src) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar]  # type: ignore[union-attr]
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb") as gz, tarfile.open(fileobj=gz, mode="w") as out:
        for member, data in members:
            if member.name == edit:
                data = data[:-1] + bytes([data[-1] ^ 0x01])
            member.size = len(data)
            out.addfile(member, io.BytesIO(data))
    dest.write_bytes(buf.getvalue())


def test_a_modified_file_inside_is_named(artifacts: Path, tmp_path: Path) -> None:
    out, forged = tmp_path / "b.tar.gz", tmp_path / "forged.tar.gz"
    build_archive(artifacts, out)
    _repack(out, forged, "verifier/out.txt")
    check = verify_archive(forged)
    assert not check.ok
    assert check.problems == [
        next(p for p in check.problems if p.startswith("verifier/out.txt: sha256"))
    ]


def test_evidence_verify_cli(artifacts: Path, tmp_path: Path) -> None:
    store = FileEvidenceStore(tmp_path / "store")
    archive = tmp_path / "b.tar.gz"
    sha = build_archive(artifacts, archive)
    uri = store.put(archive_key("sw", "k" * 64, 1), archive)
    runner = CliRunner()
    ok = runner.invoke(app, ["evidence", "verify", uri, "--sha256", sha])
    assert ok.exit_code == 0 and "3 files match" in ok.output
    path = tmp_path / "store" / "sw" / ("k" * 64) / "1" / "bundle.tar.gz"
    _repack(archive, path, "trace.jsonl")
    bad = runner.invoke(app, ["evidence", "verify", uri])
    assert bad.exit_code == 1 and "trace.jsonl: sha256" in bad.output


def test_store_refuses_escaping_keys(tmp_path: Path) -> None:
    store = FileEvidenceStore(tmp_path)
    with pytest.raises(EvidenceStoreError):
        store.exists("../outside")
    assert not store.exists("sw/k/1/bundle.tar.gz")
    with pytest.raises(EvidenceStoreError, match="nothing stored"):
        store.get("sw/k/1/bundle.tar.gz", tmp_path / "x")


def test_an_attempt_run_twice_never_writes_over_the_other_bundle(
    artifacts: Path, tmp_path: Path
) -> None:
    """A node that froze, thawed and finished a trial already run elsewhere under the same
    attempt stores its bundle apart (named by its node), and each result's URI is the
    bundle it hashed."""
    from types import SimpleNamespace

    from hangar.evidence.stores import key_in, split_uri
    from hangar.trials.boundary import store_bundle

    def spec(node: str) -> Any:
        return SimpleNamespace(
            sweep="sw", trial_key="k" * 64, attempt=1, node=node,
            evidence_url=(tmp_path / "store").as_uri(),
        )  # fmt: skip

    first_uri, first_sha = store_bundle(spec("node-a"), artifacts, tmp_path / "a.tar.gz")
    (artifacts / "trace.jsonl").write_text('{"late": true}\n')  # the thawed node's own run
    late_uri, late_sha = store_bundle(spec("node-b"), artifacts, tmp_path / "b.tar.gz")
    assert first_uri != late_uri and first_sha != late_sha
    assert "/sw/" + "k" * 64 + "/1/node-a-" in first_uri and "/1/node-b-" in late_uri
    for uri, sha in ((first_uri, first_sha), (late_uri, late_sha)):
        store, key = split_uri(uri)
        store.get(key, tmp_path / "fetched.tar.gz")
        assert verify_archive(tmp_path / "fetched.tar.gz", sha).ok
    assert key_in(first_uri, "sw").startswith("sw/" + "k" * 64 + "/1/node-a-")
