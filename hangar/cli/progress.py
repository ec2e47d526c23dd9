"""The live view of `hangar run`: the sweep's bar, each node's slot use, the slowest
running trials (read from the sweep's board, `scheduler/board.py`)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

if TYPE_CHECKING:
    from hangar.scheduler.board import Running
    from hangar.scheduler.driver import SweepTally

#: Running trials listed, longest-running first.
SLOWEST = 5


def _stats(tally: SweepTally) -> str:
    rate = f"{tally.pass_rate:.0%}" if tally.pass_rate is not None else "-"
    return f"pass {rate}  cost ${tally.cost_usd:.2f}  retries {tally.retries}"


class SweepView:
    """A Rich renderable: give it each tally (`update`), put it in a `Live`."""

    def __init__(self, sweep_id: str, total: int) -> None:
        self.progress = Progress(
            TextColumn(f"[bold]{escape(sweep_id)}[/]"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[stats]}"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
        )
        self._bar = self.progress.add_task("sweep", total=total, stats="")
        self.tally: SweepTally | None = None

    def update(self, tally: SweepTally) -> None:
        self.tally = tally
        self.progress.update(self._bar, completed=tally.finished, stats=_stats(tally))

    def __rich__(self) -> RenderableType:
        parts: list[RenderableType] = [self.progress]
        board = self.tally.board if self.tally is not None else None
        if board is not None and board.slots:
            parts.append(self._nodes(board.busy(), board.slots))
        if board is not None and board.running:
            parts.append(self._slowest(board.running))
        return Group(*parts)

    @staticmethod
    def _nodes(busy: dict[str, int], slots: dict[str, int]) -> Table:
        table = Table("node", "slots in use", box=None, padding=(0, 2), show_edge=False)
        for node, used in sorted(busy.items()):
            total = slots.get(node, 0)
            width = 20
            filled = round(width * used / total) if total else 0
            bar = "█" * filled + "·" * (width - filled)
            table.add_row(escape(node), f"{bar} {used}/{total}")
        return table

    @staticmethod
    def _slowest(running: list[Running]) -> Table:
        now = time.time()
        table = Table("running longest", "node", "for", box=None, padding=(0, 2), show_edge=False)
        for r in running[:SLOWEST]:
            table.add_row(escape(r.label), escape(r.node), f"{now - r.started:5.0f} s")
        return table
