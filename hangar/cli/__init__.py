"""The `hangar` command line (Typer): one module per command group (`hangar/cli/<group>.py`,
and each kind's own group in its package, `hangar/kinds/<kind>/cli.py`)."""

import gc

# A command's objects are mostly long-lived (imported modules, a sweep's specs, a report's
# rows): the default threshold (700) runs a collection every few hundred allocations, 1.2 s
# of a 2,000-prompt run's 12 s of driver CPU; 20,000 (and a freeze once a run starts)
# makes it 0.2 s.
gc.set_threshold(20_000, 20, 20)

from hangar.cli import (  # noqa: E402 (the threshold first: imports are allocations)
    agents,
    baseline,
    cluster,
    dashboards,
    evidence,
    image,
    model,
    report,
    run,
    sandbox,
    sessions,
    store,
    suite,
    sweep,
    trial,
    view,
)
from hangar.cli._app import add_kind_groups, app, main  # noqa: E402

add_kind_groups()

__all__ = [
    "agents",
    "app",
    "baseline",
    "cluster",
    "dashboards",
    "evidence",
    "image",
    "main",
    "model",
    "report",
    "run",
    "sandbox",
    "sessions",
    "store",
    "suite",
    "sweep",
    "trial",
    "view",
]
