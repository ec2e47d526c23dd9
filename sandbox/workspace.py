"""Pinned workspaces: a per-node mirror cache and a private clone per trial.

Each repository is mirrored once per node into a bare repository under the cache
folder (keyed by the repository URL), then fetched again only when a revision is
missing. A file lock makes concurrent trials that ask for the same mirror safe.

A trial's workspace is a new repository given a copy of a pack of *only the pinned
revision and its ancestors* (made from the mirror once per node): no ``origin`` remote,
no other branches or tags, and no objects of later commits, so an agent cannot read the
future (the fix) out of the object store. The workspace never shares object files with
the cache (no hardlinks, no alternates), so nothing the agent does inside can corrupt it.
"""

from __future__ import annotations

import fcntl
import fnmatch
import hashlib
import os
import posixpath
import shutil
import stat
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path, PurePosixPath
from typing import IO

from pydantic import BaseModel

from hangar.errors import WorkspaceError

#: Identity for commits made in a workspace (agents commit; a fresh HOME has none).
GIT_IDENTITY = ("hangar-agent", "agent@hangar.invalid")

# A git run by hangar on the host ignores the user's and the system's configuration.
_GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_TERMINAL_PROMPT": "0",
    # the transports a repository may be fetched by: never ext:: (runs a command) or fd::
    "GIT_ALLOW_PROTOCOL": "file:git:http:https:ssh",
    "LANG": "C.UTF-8",
}


def _git(
    *args: str,
    cwd: Path | None = None,
    timeout: float = 600,
    env: dict[str, str] | None = None,
    stdout: IO[bytes] | None = None,
    stdin: bytes | None = None,
) -> str:
    """Run git with hangar's environment (and `env`); its stdout, or into `stdout`."""
    full = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **_GIT_ENV, **(env or {})}
    try:
        proc = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=full,
            input=stdin,
            stdout=stdout or subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise WorkspaceError(f"git {' '.join(args)} took longer than {timeout:g} s") from exc
    if proc.returncode != 0:
        error = proc.stderr.decode(errors="replace").strip()
        raise WorkspaceError(f"git {' '.join(args)} failed: {error}")
    return "" if stdout is not None else proc.stdout.decode(errors="replace")


class MirrorCache:
    """Bare mirrors of repositories on this node, fetched once and reused."""

    def __init__(self, root: Path) -> None:
        self.root = root.resolve()

    def path_for(self, url: str) -> Path:
        """Where the mirror of `url` lives."""
        name = hashlib.sha256(url.encode()).hexdigest()[:24]
        return self.root / f"{name}.git"

    @contextmanager
    def _locked(self, url: str) -> Iterator[Path]:
        self.root.mkdir(parents=True, exist_ok=True)
        mirror = self.path_for(url)
        with (self.root / f"{mirror.name}.lock").open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            yield mirror

    def has_revision(self, url: str, revision: str) -> bool:
        """Whether the mirror of `url` (fetched now if needed) holds `revision`."""
        mirror = self.ensure(url, revision)
        return _has_commit(mirror, revision)

    def ensure(self, url: str, revision: str) -> Path:
        """The mirror of `url`, created or fetched so it holds `revision` if it exists."""
        with self._locked(url) as mirror:
            if not (mirror / "HEAD").exists():
                tmp = mirror.with_suffix(".partial")
                shutil.rmtree(tmp, ignore_errors=True)
                _check_source(url)
                _git("clone", "--quiet", "--mirror", "--", url, str(tmp))
                # Lets a workspace fetch exactly one commit (and its history) by its id.
                _git("config", "uploadpack.allowAnySHA1InWant", "true", cwd=tmp)
                tmp.rename(mirror)
            elif not _has_commit(mirror, revision):
                _check_source(url)
                _git("fetch", "--quiet", "--prune", url, "+refs/*:refs/*", cwd=mirror)
            return mirror

    def resolve(self, url: str, revision: str | None) -> str:
        """The commit `revision` of `url` names (None: its default branch's head)."""
        mirror = self.ensure(url, revision or "HEAD")
        try:
            return _git(
                "rev-parse", "--verify", f"{revision or 'HEAD'}^{{commit}}", cwd=mirror
            ).strip()
        except WorkspaceError:
            raise WorkspaceError(f"revision {revision} is not in repository {url}") from None

    def archive(self, url: str, commit: str, path: str, out: IO[bytes]) -> None:
        """The folder `path` of `url` at `commit`, as a tar stream into `out`."""
        mirror = self.ensure(url, commit)
        if not _has_commit(mirror, commit):
            raise WorkspaceError(f"revision {commit} is not in repository {url}")
        try:
            _git("cat-file", "-e", f"{commit}:{path}", cwd=mirror)
        except WorkspaceError:
            raise WorkspaceError(f"{url} has no {path!r} at {commit[:12]}") from None
        _git("archive", "--format=tar", commit, "--", path, cwd=mirror, stdout=out)

    def pack(self, url: str, revision: str) -> Path:
        """A pack of `revision` and its ancestors alone (and its index beside it), made
        from the mirror once per node: each workspace gets a copy instead of fetching,
        which would negotiate with the mirror and index every object again per trial."""
        mirror = self.ensure(url, revision)
        if not _has_commit(mirror, revision):
            raise WorkspaceError(f"revision {revision} is not in repository {url}")
        folder = mirror.with_suffix(".packs") / revision
        if made := _made_pack(folder):
            return made
        with self._locked(url):
            if made := _made_pack(folder):
                return made
            shutil.rmtree(folder, ignore_errors=True)
            part = folder.with_name(f"{revision}.partial")
            shutil.rmtree(part, ignore_errors=True)
            part.mkdir(parents=True)
            name = _git(
                "pack-objects", "--revs", "--quiet", str(part / "pack"), cwd=mirror,
                stdin=f"{revision}\n".encode(),
            ).strip()  # fmt: skip
            if not (part / f"pack-{name}.pack").is_file():
                raise WorkspaceError(f"git pack-objects made no pack of {revision} of {url}")
            part.rename(folder)
            return folder / f"pack-{name}.pack"


def _check_source(url: str) -> None:
    if url.startswith("-"):
        raise WorkspaceError(f"repository {url} is not a URL or a path (it reads as an option)")
    if "://" not in url and not url.startswith("git@") and not Path(url).exists():
        raise WorkspaceError(f"repository {url} does not exist")


#: (mirror, commit) pairs seen: a commit a mirror holds stays there (fetches only add).
_KNOWN: set[tuple[Path, str]] = set()


def _has_commit(mirror: Path, revision: str) -> bool:
    if (mirror, revision) in _KNOWN:
        return True
    try:
        found = _git("cat-file", "-t", revision, cwd=mirror).strip() == "commit"
    except WorkspaceError:
        return False
    if found:
        _KNOWN.add((mirror, revision))
    return found


def _made_pack(folder: Path) -> Path | None:
    """The pack `MirrorCache.pack` made in `folder` (None: not made yet)."""
    found = list(folder.glob("pack-*.pack")) if folder.is_dir() else []
    return found[0] if found and found[0].with_suffix(".idx").is_file() else None


def make_workspace(cache: MirrorCache, url: str, revision: str, dest: Path) -> None:
    """Check `revision` of `url` out into `dest`, a new or empty folder (see module
    docstring): a new repository given a copy of the revision's pack (`MirrorCache.pack`).

    The files belong to the caller until `hand_over` gives them to the sandbox user.
    """
    pack = cache.pack(url, revision)
    dest.mkdir(parents=True, exist_ok=True)
    if any(dest.iterdir()):
        raise WorkspaceError(f"the workspace folder {dest} is not empty")
    _git("init", "--quiet", cwd=dest)
    packs = dest / ".git" / "objects" / "pack"
    for part in (pack, pack.with_suffix(".idx")):  # copies: nothing is shared with the cache
        shutil.copyfile(part, packs / part.name)
    _git("checkout", "--quiet", "--detach", revision, cwd=dest)
    name, email = GIT_IDENTITY
    with (dest / ".git" / "config").open("a") as config:  # our own new file: no git needed
        config.write(f"[user]\n\tname = {name}\n\temail = {email}\n")


def workspace_state(dest: Path, revision: str) -> dict[str, str]:
    """HEAD (`revision`, which `make_workspace` checked out detached) and ``git status
    --porcelain`` of a workspace nobody but hangar touched yet."""
    status = _git("status", "--porcelain", "--untracked-files=all", cwd=dest)
    return {"head": revision, "status": status}


#: The most of a workspace diff kept (the rest is cut off and the cut recorded).
DIFF_LIMIT = 100 * 1024 * 1024
#: A file larger than this is left out of a diff, unread (a sparse file of a terabyte
#: would keep git hashing zeros until its time ran out).
DIFF_FILE_LIMIT = 256 * 1024 * 1024
#: The most files of a workspace looked at for their size before a diff.
DIFF_FILES = 2_000_000


class WorkspaceChanges(BaseModel):
    """What changed in a workspace since its pinned commit, read by the host's git."""

    changes: str
    """``git diff --name-status`` against the pinned commit."""
    diff_truncated: bool
    """The diff was longer than `DIFF_LIMIT` and was cut there."""
    left_out: list[str] = []
    """Files larger than `DIFF_FILE_LIMIT`, not read (and so not in the diff)."""


def diff_against_pin(
    cache: MirrorCache, url: str, revision: str, workspace: Path, scratch: Path, diff: Path
) -> WorkspaceChanges:
    """Diff `workspace` against its pinned `revision` into the file `diff`, whatever the
    agent did to the workspace's own repository.

    Git runs on the host with a repository of hangar's own (a fresh bare one in
    `scratch`, whose objects fall back to the node's mirror): the workspace's ``.git``
    (deleted, replaced by a ``gitdir:`` file or a link to ``/``, stripped of HEAD, its
    config planted with hooks or filters) is never read, and new objects never reach the
    mirror. Only hangar's configuration applies (none from the system or the user), so
    attributes in the workspace name filters and drivers that do not exist. A failure here
    is the agent's doing (`WorkspaceError`, e.g. unreadable files), except a mirror without
    the pinned commit, which the caller checks first.
    """
    mirror = cache.path_for(url)
    git_dir = scratch / "git"
    _bare_repository(git_dir)
    env = {
        "GIT_DIR": str(git_dir),
        "GIT_OBJECT_DIRECTORY": str(git_dir / "objects"),
        "GIT_ALTERNATE_OBJECT_DIRECTORIES": str(mirror / "objects"),
        "GIT_WORK_TREE": str(workspace),
        "GIT_INDEX_FILE": str(scratch / "index"),
    }
    _git(*_SAFE, "read-tree", revision, cwd=workspace, env=env)
    return _diff_index(revision, workspace, env, git_dir, diff, force=False)


def diff_against_tree(
    initial: Path, workspace: Path, scratch: Path, diff: Path
) -> WorkspaceChanges:
    """Diff `workspace` against the folder `initial` (its content when the trial began)
    into the file `diff`, with a repository of hangar's own in `scratch` as
    `diff_against_pin` does; ignore files count for nothing (every file is compared)."""
    git_dir = scratch / "git"
    _bare_repository(git_dir)
    env = {"GIT_DIR": str(git_dir), "GIT_INDEX_FILE": str(scratch / "index")}
    _git(*_SAFE, "add", "--all", "--force", cwd=initial, env={**env, "GIT_WORK_TREE": str(initial)})
    tree = _git(*_SAFE, "write-tree", cwd=initial, env=env).strip()
    (scratch / "index").unlink(missing_ok=True)
    env["GIT_WORK_TREE"] = str(workspace)
    return _diff_index(tree, workspace, env, git_dir, diff, force=True)


_SAFE = ("-c", "safe.directory=*", "-c", "core.fsmonitor=false", "-c", "core.quotePath=false")


def _bare_repository(git_dir: Path) -> None:
    """A new, empty bare repository at `git_dir` (what ``git init --bare`` makes that git
    needs, without a process for it)."""
    shutil.rmtree(git_dir, ignore_errors=True)
    for folder in ("objects/info", "objects/pack", "refs/heads", "refs/tags"):
        (git_dir / folder).mkdir(parents=True)
    (git_dir / "HEAD").write_text("ref: refs/heads/main\n")
    (git_dir / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = true\n")


def _diff_index(
    base: str, workspace: Path, env: dict[str, str], git_dir: Path, diff: Path, *, force: bool
) -> WorkspaceChanges:
    """Every file of `workspace` into the index of `env`, diffed against `base` (a commit
    or a tree) into `diff` (`force`: ignored files too); the repository and its index
    removed afterwards. Files larger than `DIFF_FILE_LIMIT` are left out unread."""
    big = _too_large(workspace)
    spec: tuple[str, ...] = ()
    if big:
        listed = git_dir.parent / "pathspec"
        listed.write_bytes(b"\0".join([b".", *(b":(exclude,literal)" + p for p in big)]) + b"\0")
        spec = ("--pathspec-from-file", str(listed), "--pathspec-file-nul")
    _git(*_SAFE, "add", "--all", *(("--force",) if force else ()), *spec, cwd=workspace, env=env)
    # One diff: the raw lines (a name and status each), a blank line, then the patch.
    whole = git_dir.parent / "diff-with-raw"
    with whole.open("wb") as out:
        _git(
            *_SAFE,
            "diff",
            "--cached",
            "--patch-with-raw",
            "--binary",
            "--no-ext-diff",
            "--no-textconv",
            base,
            cwd=workspace,
            env=env,
            stdout=out,
        )
    changes, truncated = _split_raw(whole, diff)
    whole.unlink()
    shutil.rmtree(git_dir, ignore_errors=True)
    Path(env["GIT_INDEX_FILE"]).unlink(missing_ok=True)
    left_out = [os.fsdecode(p) for p in big]
    return WorkspaceChanges(changes=changes, diff_truncated=truncated, left_out=left_out)


def _too_large(workspace: Path) -> list[bytes]:
    """The workspace's regular files larger than `DIFF_FILE_LIMIT` (relative paths), read
    by their size alone. More than `DIFF_FILES` files is a `WorkspaceError`."""
    state = tree_state(workspace, DIFF_FILES)
    if state is None:
        raise WorkspaceError(f"the workspace has more than {DIFF_FILES} files: no diff is taken")
    return [
        p
        for p, (_, _, size, mode) in state.items()
        if stat.S_ISREG(mode) and size > DIFF_FILE_LIMIT
    ]


def _split_raw(whole: Path, diff: Path) -> tuple[str, bool]:
    """Split ``git diff --patch-with-raw`` output: the raw lines become ``--name-status``
    lines (what the changes say), the patch goes into `diff`, cut at `DIFF_LIMIT`
    (whether it was cut). A raw line never holds an empty line (git quotes the names)."""
    with whole.open("rb") as read:
        head = bytearray()
        while (at := head.find(b"\n\n")) < 0 and (chunk := read.read(1 << 16)):
            head += chunk
        raw = bytes(head if at < 0 else head[:at]).decode(errors="replace")
        names = "".join(line.split(" ", 4)[4] + "\n" for line in raw.splitlines() if line)
        read.seek(0 if at < 0 else at + 2)
        with diff.open("wb") as out:
            if at >= 0:
                shutil.copyfileobj(_Bounded(read, DIFF_LIMIT), out)
        truncated = at >= 0 and read.read(1) != b""
    return names, truncated


class _Bounded:
    """A reader of at most `left` bytes of `inner` (for `shutil.copyfileobj`)."""

    def __init__(self, inner: IO[bytes], left: int) -> None:
        self.inner, self.left = inner, left

    def read(self, size: int = -1) -> bytes:
        size = self.left if size < 0 else min(size, self.left)
        data = self.inner.read(size) if size else b""
        self.left -= len(data)
        return data


def git_damage(workspace: Path) -> list[str]:
    """What is wrong with the workspace's own repository, in words (empty: nothing)."""
    git = workspace / ".git"
    if git.is_symlink():
        return [f".git is a link to {str(git.readlink())!r}"]
    if not git.exists():
        return [".git is gone"]
    if not git.is_dir():
        return [".git is not a folder (a gitdir: file or another file was put there)"]
    problems = []
    for name in ("HEAD", "objects", "refs"):
        if not (git / name).exists():
            problems.append(f".git/{name} is gone")
    return problems


def remove_escaping_links(root: Path) -> list[dict[str, str]]:
    """Remove every symlink under `root` that points outside it; returns what was removed.

    An agent can leave ``REPORT.md -> /etc/passwd`` in its workspace: harmless inside the
    sandbox, but on the host that link names the *host's* file, and a host verifier that
    reads or copies it would leak it into the evidence. Call this only when no sandbox
    process can still write the folder. Links are never followed, only read.
    """
    removed = []
    for folder, dirs, files in os.walk(root):
        for name in (*dirs, *files):
            path = Path(folder) / name
            if not path.is_symlink():
                continue
            target = str(path.readlink())
            inside = posixpath.normpath(posixpath.join(str(path.parent.relative_to(root)), target))
            if posixpath.isabs(target) or inside == ".." or inside.startswith("../"):
                path.unlink()
                removed.append({"path": path.relative_to(root).as_posix(), "target": target})
    return removed


def hand_over(dest: Path, owner: int) -> None:
    """Give the workspace to uid `owner` so the sandbox user can write it.

    Without root we cannot chown, so the files are made world-writable instead. After
    this, git on the host refuses the folder as of dubious ownership, which is what we
    want: the host never runs git over a folder an agent controls.
    """
    if os.geteuid() == 0:
        for root, dirs, files in os.walk(dest):
            for name in (*dirs, *files):
                os.lchown(Path(root) / name, owner, owner)
        os.chown(dest, owner, owner)
    else:
        subprocess.run(["chmod", "-R", "a+rwX", str(dest)], check=True)


#: The most files of a folder whose states are read (past it, every path under it counts
#: as changed).
WORKSPACE_FILES = 1_000_000
#: A file's state, read without opening it: its inode, change time, size and mode. Any
#: write, chmod, chown, link or rename of a file changes its change time, which no user
#: can set, and a new file has a new inode: a state that is the same is the same file.
FileState = tuple[int, int, int, int]


def tree_state(root: Path, limit: int) -> dict[bytes, FileState] | None:
    """Every entry under `root` (its path relative to `root`, as bytes) and its state,
    read without following a link; None when there are more than `limit`."""
    base = os.fsencode(root)
    found: dict[bytes, FileState] = {}
    folders = [b""]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(base + b"/" + folder if folder else base))
        except OSError:
            continue
        for entry in entries:
            path = folder + b"/" + entry.name if folder else entry.name
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found[path] = (st.st_ino, st.st_ctime_ns, st.st_size, st.st_mode)
            if len(found) > limit:
                return None
            if stat.S_ISDIR(st.st_mode):
                folders.append(path)
    return found


def changed_entries(
    before: dict[bytes, FileState], root: Path, limit: int
) -> dict[bytes, str] | None:
    """What under `root` is not as `before` (`tree_state`): each file, link or special
    file added (``A``) or changed (``C``); folders are not listed. None past `limit`."""
    after = tree_state(root, limit)
    if after is None:
        return None
    return {
        path: "C" if path in before else "A"
        for path, state in after.items()
        if before.get(path) != state and not stat.S_ISDIR(state[3])
    }


def in_scope(path: str, patterns: list[str]) -> bool:
    """Whether a repository path is within `patterns` (none: everything). A pattern is a
    glob (``docs/*.md``, ``*`` crosses folders) or a folder (``docs/``)."""
    if not patterns:
        return True
    return any(
        fnmatch.fnmatchcase(path, p) or path.startswith(p.rstrip("/") + "/") or path == p
        for p in patterns
    )


def export_tree(
    cache: MirrorCache, url: str, revision: str, dest: Path, patterns: list[str]
) -> dict[str, str]:
    """The files of `revision` of `url` within `patterns`, written into `dest` as plain
    files (no ``.git``, no history, no symbolic link, no submodule): path -> sha256 of
    its bytes. What a read-only arm may read at ``as_of``."""
    mirror = cache.ensure(url, revision)
    if not _has_commit(mirror, revision):
        raise WorkspaceError(f"revision {revision} is not in repository {url}")
    listing = _git("ls-tree", "-r", "-z", "--full-tree", revision, cwd=mirror)
    hashes: dict[str, str] = {}
    for entry in filter(None, listing.split("\0")):
        meta, path = entry.split("\t", 1)
        mode, kind, oid = meta.split()
        if kind != "blob" or mode == "120000" or not in_scope(path, patterns):
            continue
        target = dest / path
        if ".." in PurePosixPath(path).parts:
            continue
        blob = subprocess.run(
            ["git", "cat-file", "blob", oid], cwd=mirror, capture_output=True, check=True
        ).stdout
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(blob)
        hashes[path] = "sha256:" + hashlib.sha256(blob).hexdigest()
    return hashes


def blob_at(cache: MirrorCache, url: str, revision: str, path: str) -> bytes | None:
    """The bytes of the file `path` at `revision` of `url` (None when the revision or the
    file is not there)."""
    try:
        mirror = cache.ensure(url, revision)
    except WorkspaceError:
        return None
    if not _has_commit(mirror, revision) or ".." in PurePosixPath(path).parts:
        return None
    proc = subprocess.run(
        ["git", "cat-file", "blob", f"{revision}:{path}"],
        cwd=mirror,
        capture_output=True,
        check=False,
    )
    return proc.stdout if proc.returncode == 0 else None


def file_digest_at(cache: MirrorCache, url: str, revision: str, path: str) -> str | None:
    """``sha256:<hex>`` of the file `path` at `revision` of `url` (None when it is not
    there): how hangar hashes a citation of a commit it did not export."""
    blob = blob_at(cache, url, revision, path)
    return None if blob is None else "sha256:" + hashlib.sha256(blob).hexdigest()
