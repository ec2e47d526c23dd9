"""`make demo`: the example scenario run by two agents, end to end, in real sandboxes.

`gold` applies the known fix and must pass; `noop` changes nothing and must fail. Each
trial clones the pinned revision, runs the agent in a docker sandbox with the network
off, runs the hidden tests in a fresh sandbox, judges with the pinned host verifier,
and stores an evidence bundle. Exits non-zero if either verdict is not the expected one.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hangar.agents import load_agents
from hangar.cli import console, print_result
from hangar.scenario import load_scenario
from hangar.scheduler.keys import Arm
from hangar.trial import run_trial, single_trial

HERE = Path(__file__).resolve().parent
EXPECTED = {"gold": "pass", "noop": "fail"}


def main() -> int:
    """Run gold and noop on the example scenario; 0 when both verdicts are as expected."""
    loaded = load_scenario(HERE / "median" / "scenario.yaml")
    agents = load_agents(HERE / "agents.yaml")
    console.print(f"scenario {loaded.scenario.id} (sha256:{loaded.digest[:16]}...)\n")
    summary = []
    for name, want in EXPECTED.items():
        result = run_trial(single_trial(loaded, agents[name], Arm(name="control")))
        print_result(result)
        summary.append((name, result.verdict.value, want))
    console.print()
    for name, got, want in summary:
        mark = "[green]as expected[/]" if got == want else f"[red]expected {want}[/]"
        console.print(f"{name} -> {got}  {mark}")
    console.print("check a bundle with: hangar evidence verify URI")
    return 0 if all(got == want for _, got, want in summary) else 1


if __name__ == "__main__":
    sys.exit(main())
