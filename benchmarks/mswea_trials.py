"""N trivial trials through mini-swe-agent's own docker environment (its `DockerEnvironment`:
the docker CLI's ``run -d``, an ``exec`` per command, ``stop`` in the background), the
peer `overhead.py` measures hangar against. Run by the interpreter of a virtualenv that has
mini-swe-agent (hangar is not imported here); each trial is the plain loop's: a private
clone of the pinned revision mounted as the workspace, the same isolation flags, the agent
command, the verifier command, the output kept.

    python mswea_trials.py BUNDLE REVISION IMAGE AGENT VERIFY TRIALS CONCURRENCY
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from minisweagent.environments.docker import DockerEnvironment
from trial_steps import clone_workspace


def trial(
    work: Path, i: int, bundle: str, revision: str, image: str, agent: str, verify: str
) -> None:
    ws = work / f"t{i}" / "workspace"
    ws.parent.mkdir(parents=True)
    clone_workspace(bundle, revision, ws)
    isolation = ["--rm", "--init", "--network", "none", "--user", "agent", "--cap-drop", "ALL",
                 "--security-opt", "no-new-privileges", "--memory", "2g", "--pids-limit", "512",
                 "-v", f"{ws}:/workspace"]  # fmt: skip
    env = DockerEnvironment(image=image, cwd="/workspace", run_args=isolation)
    try:
        done = [env.execute({"command": command}) for command in (agent, verify)]
        (ws.parent / "out.txt").write_text("".join(d["output"] for d in done))
        if done[1]["returncode"] != 0:
            raise SystemExit(f"trial {i}: the verifier command failed: {done[1]}")
    finally:
        env.cleanup()


def containers_left() -> int:
    listed = subprocess.run(
        ["docker", "ps", "-aq", "--filter", "name=minisweagent-"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return len(listed.stdout.split())


def main() -> None:
    logging.getLogger("minisweagent").setLevel(logging.WARNING)
    bundle, revision, image, agent, verify, trials, concurrency = sys.argv[1:8]
    with tempfile.TemporaryDirectory() as tmp:
        with ThreadPoolExecutor(int(concurrency)) as pool:
            args = (bundle, revision, image, agent, verify)
            list(pool.map(lambda i: trial(Path(tmp), i, *args), range(int(trials))))
        deadline = time.monotonic() + 120
        while containers_left() and time.monotonic() < deadline:  # its stops run on after it
            time.sleep(0.2)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
