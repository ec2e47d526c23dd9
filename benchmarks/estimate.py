"""How far `hangar sweep check --estimate` is from what real sweeps then cost.

A decision suite of N cases (two arms each) is run for real with `hangar run` against a
local OpenAI-compatible endpoint whose usage behaves like a provider's: the input tokens
are the request's (o200k_base, plus a provider's few tokens per message), and each answer
is an explanation of a random length (seeded; the skill arm answers at more length than
the control, and every call draws anew). Before each sweep its estimate is taken
(`hangar sweep check --estimate --json`, from the store as it stands), then the sweep
runs, and what it cost is read from the store:

1. a first run, no history: each trial from its prompt's tokens and the model's price;
2. the same suite again (a new sweep): from the first run's trials of the same task, arm
   and model;
3. every case reworded (new versions of the tasks): from the same model's other tasks of
   the kind;
4. the same suite with a longer system prompt (an agent changed): from the same task,
   arm and model, as in 2, though every call now costs more.

For each it prints the estimate with its 95% interval, the actual cost, the error and
whether the actual falls inside the interval.

    python benchmarks/estimate.py [--cases 200] [--seed 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from prompt import MODEL, endpoint, write_suite  # noqa: E402
from prompt import serve as prompt_serve  # noqa: E402

HANGAR = str(Path(sys.executable).parent / "hangar")
#: A provider's tokens per message and for priming the reply, beyond the text's own.
PER_MESSAGE, PRIMING = 4, 3
WORDS = [
    *("test", "fails", "first", "then", "the", "fix", "passes"),
    *("and", "the", "report", "is", "reproduced", "again"),
]


def serve(port: int, seed: int, delay: float) -> None:
    """The endpoint (see the module docstring): usage counted as a provider would."""
    from hangar.models.tokens import count_tokens

    rng = random.Random(seed)

    def reply(body: dict[str, Any]) -> tuple[str, dict[str, int]]:
        messages = body.get("messages", [])
        prompt = sum(count_tokens(str(m.get("content", ""))) + PER_MESSAGE for m in messages)
        text = "\n".join(str(m.get("content", "")) for m in messages)
        verbose = "name: tdd" in text  # the skill's text is in the prompt: the skill arm
        words = max(3, int(rng.lognormvariate(4.2 if verbose else 3.4, 0.6)))
        explanation = " ".join(rng.choice(WORDS) for _ in range(words))
        answer = json.dumps({"selected": ["B"], "explanation": explanation})
        usage = {"prompt_tokens": prompt + PRIMING, "completion_tokens": count_tokens(answer)}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        return answer, usage

    prompt_serve(port, delay, reply)


def write_sweep(folder: Path, sweep_id: str, base_url: str, system: str = "") -> Path:
    agent: dict[str, object] = {"kind": "prompt"}
    if system:
        agent["system_prompt"] = system
    sweep = {
        "id": sweep_id,
        "scenarios": ["suite.yaml"],
        "agents": {"prompt": agent},
        "models": [
            {
                "id": MODEL,
                "base_url": base_url,
                "api": "chat",
                "api_key_env": "BENCH_KEY",
                "price": {"input": 2.5, "output": 10.0},
            }
        ],
        "concurrency": {"max_in_flight": 32},
        "store": f"sqlite:///{folder}/runs/hangar.db",
        "evidence": (folder / "runs" / "evidence").as_uri(),
    }
    path = folder / f"{sweep_id}.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def hangar(*args: str) -> str:
    env = {**os.environ, "BENCH_KEY": "bench", "HANGAR_WARM_HEAD": "0"}
    out = subprocess.run([HANGAR, *args], capture_output=True, text=True, env=env, check=False)
    if out.returncode not in (0, 1):
        raise SystemExit(f"hangar {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    return out.stdout


def actual_cost(folder: Path, sweep_id: str) -> float:
    from hangar.store import ResultsStore

    return ResultsStore(f"sqlite:///{folder}/runs/hangar.db").cost(sweep_id)


def measure(folder: Path, name: str, sweep: Path, sweep_id: str) -> dict[str, object]:
    guess = json.loads(hangar("sweep", "check", str(sweep), "--estimate", "--json"))["estimate"]
    hangar("run", str(sweep), "--json", "--yes", "--address", "embedded")
    cost = actual_cost(folder, sweep_id)
    error = (guess["cost_usd"] - cost) / cost
    inside = guess["low_usd"] <= cost <= guess["high_usd"]
    basis = ", ".join(f"{b['what']} x{b['trials']}" for b in guess["basis"])
    print(
        f"{name:34s} estimate ${guess['cost_usd']:.4f} [{guess['low_usd']:.4f}, "
        f"{guess['high_usd']:.4f}]  actual ${cost:.4f}  error {100 * error:+.1f}%  "
        f"{'inside' if inside else 'OUTSIDE'} the interval  ({basis})"
    )
    return {"name": name, "error": error, "inside": inside}


def reword(folder: Path) -> None:
    """Every case's scenario reworded: each task is a new version."""
    path = folder / "suite.yaml"
    suite = yaml.safe_load(path.read_text())
    for case in suite["cases"]:
        case["scenario"] = case["scenario"].replace("a user says", "a customer writes that")
    path.write_text(yaml.safe_dump(suite, sort_keys=False))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--delay", type=float, default=0.01, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.seed, args.delay)
        return
    system = "You are a careful engineer. " * 40
    options = ("--seed", str(args.seed))
    with tempfile.TemporaryDirectory() as tmp, endpoint(0.01, __file__, *options) as (url, _):
        folder = Path(tmp)
        write_suite(folder, args.cases)
        print(f"{args.cases} cases x 2 arms per sweep, each run for real after its estimate")
        rows = [
            measure(folder, "first run (no history)", write_sweep(folder, "e1", url), "e1"),
            measure(folder, "the same suite again", write_sweep(folder, "e2", url), "e2"),
        ]
        reword(folder)
        rows.append(measure(folder, "every case reworded", write_sweep(folder, "e3", url), "e3"))
        longer = write_sweep(folder, "e4", url, system=system)
        rows.append(measure(folder, "a longer system prompt", longer, "e4"))
    inside = sum(bool(r["inside"]) for r in rows)
    print(f"the actual cost fell inside the 95% interval in {inside} of {len(rows)} sweeps")


if __name__ == "__main__":
    main()
