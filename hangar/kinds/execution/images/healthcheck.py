"""An image task's healthcheck, waited for in the agent's sandbox before the agent starts.

Docker's HEALTHCHECK semantics, as Harbor's ``[environment.healthcheck]`` gives them: the
command is run (as root, with its own timeout) until it exits 0; in the start period a
failure does not count and attempts are ``start_interval_s`` apart, after it they are
``interval_s`` apart and ``retries`` consecutive failures make the environment unhealthy.
An unhealthy environment is the task's or the machine's problem, never the agent's: the
trial is blocked_setup, with the command's last output in the evidence.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from hangar.kinds.execution.images.task import Healthcheck
from hangar.results import Verdict
from hangar.sandbox import Sandbox
from hangar.trials.boundary import Outcome


def wait_healthy(
    sandbox: Sandbox,
    check: Healthcheck,
    record: Callable[[dict[str, Any]], object],
    sleep: Callable[[float], None] = time.sleep,
    *,
    user: str | None = "root",
    unhealthy: Verdict = Verdict.BLOCKED_SETUP,
) -> None:
    """Return once `check` passes in `sandbox`; raise `unhealthy` when it cannot.
    `record` gets what happened (attempts, the last exit code and output). In an
    environment the agent has had, the check runs as its user (`user` None: nothing the
    agent left runs as root) and a failure is the agent's (`unhealthy` fail)."""
    started = time.monotonic()
    attempts: list[dict[str, Any]] = []
    failures = 0
    while True:
        res = sandbox.exec(["sh", "-c", check.command], timeout=check.timeout_s, user=user)
        at = round(time.monotonic() - started, 3)
        tail = (res.stdout + res.stderr)[-2000:]
        attempts.append({"at_s": at, "exit": res.returncode, "timed_out": res.timed_out})
        if res.returncode == 0:
            record({"command": check.command, "healthy": True, "attempts": attempts})
            return
        grace = at < check.start_period_s
        failures = 0 if grace else failures + 1
        if failures >= check.retries:
            record({"command": check.command, "healthy": False, "attempts": attempts, "tail": tail})
            how = "timed out" if res.timed_out else f"exit {res.returncode}"
            raise Outcome(
                unhealthy,
                f"the environment never became healthy: its healthcheck `{check.command}` "
                f"failed {failures} time(s) in a row ({how}: {tail.strip()[-300:] or 'no output'})",
            )
        sleep(check.start_interval_s if grace else check.interval_s)
