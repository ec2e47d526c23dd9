"""What keeps an image task off a sandbox backend other than docker, feature by feature.

An image task's trial leans on the docker engine in named places: a shared verifier
starts from a snapshot of the agent's container (``docker commit``), as every step of a
multi-step task does; compose services join a network of the trial's own; the task
image is built by the node's engine; the agent and its verifier usually run as root
(Harbor's default), while a Kubernetes pod runs as the non-root sandbox user; and the
hand-over reads a stopped container's files back. On another backend each such feature
the task uses is a reason of its own, and the trial is blocked_setup before anything
runs, so that a sweep says which tasks could move and what holds each back.
"""

from __future__ import annotations

from hangar.kinds.execution.images.task import ImageTask

#: Root, as a task names it.
_ROOT = ("root", "0")


def backend_problems(task: ImageTask, backend: str) -> list[str]:
    """Why `task` cannot run on `backend` ([] on docker)."""
    if backend == "docker":
        return []
    where = f"on the {backend} backend"
    found = []
    if task.verifier.mode == "shared" and task.grading is None:
        found.append(
            f"the shared verifier starts from a snapshot of the agent's sandbox (docker "
            f"commit), which has no equivalent {where}"
        )
    if task.steps:
        found.append(f"multi-step tasks keep their environment through snapshots: none {where}")
    if task.services:
        found.append(f"compose services need the docker backend's per-trial network, not {where}")
    if task.image.context is not None and task.registry is None:
        found.append(
            "the task image is built by the node's docker engine: give the sweep a `registry` "
            "its pods can pull from"
        )
    users = {"the agent": task.agent_user, "the verifier": task.verifier.user}
    for who, user in users.items():
        if user in _ROOT:
            found.append(f"{who} runs as root; {where} every command runs as the sandbox user")
    if task.grading is None:
        found.append(
            f"the verifier's tests run under hangar's observer (the helper that watches what "
            f"the judge's processes use of the agent's changes), which pods {where} lack"
        )
    found.append(
        f"the hand-over to the verifier (a stopped sandbox's files read back, a new "
        f"verifier sandbox) is implemented on the docker backend only, not {where}"
    )
    return found
