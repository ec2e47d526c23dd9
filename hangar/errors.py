"""The one exception hierarchy of hangar.

Every error hangar raises on purpose is a `HangarError`. Errors of the libraries
underneath (docker, kubernetes, botocore, ray) are mapped to one of these where they
enter, with `raise ... from exc`, so callers never have to catch a third-party type.
A problem the user can fix says how in its message; the CLI prints that message
without a traceback and exits non-zero.

    HangarError
    ├── ConfigError                  bad input: a malformed file, an unknown field, a bad value
    │   └── AdmissionError           input that refuses a whole run (a fixture registry's)
    ├── ImageError                   an image cannot be found or built
    │   ├── ImageNotFound            the image a sandbox asks for is not on the engine
    │   └── ImageBuildError          `hangar image build-base` / `build` failed
    ├── SandboxError                 a sandbox operation failed
    │   ├── SandboxUnavailable       the infrastructure broke: no engine, a dead container
    │   ├── SandboxFileNotFound      read of a path that does not exist (also FileNotFoundError)
    │   ├── SandboxIsADirectory      read_file of a directory (also IsADirectoryError)
    │   ├── SandboxFileTooLarge      a read over the read cap
    │   └── MissingPython            the image has no python3 for the model relay's forwarder
    ├── WorkspaceError               a repository or revision cannot be mirrored or checked out
    ├── StoreError                   the results store cannot be opened or written
    ├── EvidenceStoreError           an evidence store cannot be reached, or lacks an object
    ├── RayUnavailable               Ray could not be started or reached
    ├── ClusterError                 `ray start` / `ray stop` failed
    ├── PreflightFailed              a node cannot run the sweep's trials (before any starts)
    └── GrafanaError                 Grafana is unreachable, refuses the token or a request

A non-zero exit code or a timed-out command is *not* an exception: it is an
`ExecResult` with `returncode`, `timed_out` and `oom_killed` set.
"""

from __future__ import annotations


class HangarError(Exception):
    """Base class of every error hangar raises on purpose."""


class ConfigError(HangarError):
    """Bad input the user can fix: the message names the file, the field and the fix."""


class AdmissionError(ConfigError):
    """Input that refuses the whole run rather than one task file (a fixture registry
    with a malformed entry, a duplicate or an unknown case id)."""


class ImageError(HangarError):
    """An image cannot be found or built."""


class ImageNotFound(ImageError):
    """The image a sandbox asks for is not present on the container engine."""


class ImageBuildError(ImageError):
    """Building an image (debootstrap + import, or a Dockerfile) failed."""


class RegistryError(ImageBuildError):
    """The sweep's registry could not be asked (a pull or a push failed): the node's
    problem, not the task's."""


class SandboxError(HangarError):
    """A sandbox operation failed."""


class SandboxUnavailable(SandboxError):
    """The infrastructure broke (no engine, daemon error, container gone).

    A trial that meets this ends `infra_error` and is retried; it is never a `fail`.
    """


class SandboxFileNotFound(SandboxError, FileNotFoundError):
    """A file read from a sandbox does not exist there."""


class SandboxIsADirectory(SandboxError, IsADirectoryError):
    """`read_file` was given a directory; use `copy_out` for folders."""


class SandboxFileTooLarge(SandboxError):
    """A file read from a sandbox is larger than the read cap."""


class TooManyChanges(SandboxError):
    """A sandbox changed more files than are read back (`hangar.sandbox.layers`)."""


class MissingPython(SandboxError):
    """The sandbox image has no python3 to run the model relay's forwarder."""


class WorkspaceError(HangarError):
    """A repository or revision cannot be mirrored or checked out (a fixture problem)."""


class StoreError(HangarError):
    """The results store cannot be opened or written."""


class EvidenceStoreError(HangarError):
    """An evidence store cannot be reached, or lacks what was asked for."""


class RayUnavailable(HangarError):
    """Ray could not be started or reached."""


class ClusterError(HangarError):
    """`ray start` or `ray stop` failed."""


class PreflightFailed(HangarError):
    """A sweep's preflight found nodes that cannot run its trials; names each and the fix."""


class GrafanaError(HangarError):
    """A Grafana cannot be reached, refuses the token, or rejects a request."""
