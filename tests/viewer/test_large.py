"""A large sweep's pages answer at once: while a sweep's first report (or a comparison's
snapshot) is built, the page says so and refreshes by itself, instead of waiting; a
report already built is not built again for each visit."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from hangar.store import ResultsStore
from hangar.viewer.app import Viewer, make_app
from hangar.viewer.data import ReportCache
from tests.test_store import result


@pytest.fixture
def store(tmp_path: Path) -> ResultsStore:
    found = ResultsStore(f"sqlite:///{tmp_path / 'r.db'}")
    found.ensure_sweep("sw", {}, 2)
    found.record([result("k1"), result("k2")])
    return found


def test_a_sweep_page_does_not_wait_for_its_first_report(
    store: ResultsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    gate, built = threading.Event(), []
    real = ReportCache._report

    def slow(self: ReportCache, sweep_id: str) -> Any:
        gate.wait(60)  # a report that takes as long as the test says
        built.append(sweep_id)
        return real(self, sweep_id)

    monkeypatch.setattr(ReportCache, "_report", slow)
    viewer = Viewer(store)
    with TestClient(make_app(viewer)) as client:
        page = client.get("/sweeps/sw")
        assert page.status_code == 200
        assert "The report of these 2 trials is being built" in page.text
        assert 'id="stale"' in page.text  # what the live refresh looks for
        assert page.text.count("<tr") >= 2  # the trials list is there already
        waiting = client.get("/compare?a=sw&b=sw")  # its snapshot: built in the background
        gate.set()
        assert viewer.reports.report("sw", wait=30) is not None
        summary = client.get("/sweeps/sw/part/summary")
        assert "being built" not in summary.text and "gold · m1 · control" in summary.text
        for _ in range(3):  # visits of a sweep whose report is current build nothing
            client.get("/")
            client.get("/sweeps/sw")
        assert built == ["sw"]
    assert waiting.status_code == 200


def test_a_comparison_page_says_its_snapshots_are_being_computed(store: ResultsStore) -> None:
    gate = threading.Event()
    viewer = Viewer(store)
    real = viewer.snapshots._build_one
    viewer.snapshots._build_one = lambda sweep_id: (gate.wait(60), real(sweep_id))[1]
    with TestClient(make_app(viewer)) as client:
        pending = client.get("/compare?a=sw&b=sw")
        assert 'id="pending"' in pending.text and 'http-equiv="refresh"' in pending.text
        gate.set()
        assert viewer.snapshots.get("sw", wait=30) is not None
        done = client.get("/compare?a=sw&b=sw")
        assert 'id="pending"' not in done.text and "compare-metrics" in done.text
        missing = client.get("/compare?a=sw&b=nope")
        assert missing.status_code == 404 and "no sweep &#39;nope&#39;" in missing.text


def test_a_trials_neighbours_come_from_the_store_in_order(store: ResultsStore) -> None:
    from hangar.catalog import Catalog

    store.record([result("k3"), result("k0", scenario_id="s0"), result("k2", attempt=2)])
    catalog = Catalog(store)
    assert catalog.neighbours("sw", "k0") == (None, "k1")  # scenario s0 comes first
    assert catalog.neighbours("sw", "k2") == ("k1", "k3")  # then s1's, by key
    assert catalog.neighbours("sw", "k3") == ("k2", None)
    assert catalog.neighbours("sw", "nope") == (None, None)


def test_a_large_sweep_is_built_in_a_process_of_its_own(
    store: ResultsStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Building a large sweep's report or snapshot would hold the interpreter every page
    needs: it runs in the builder's process, and ends with the viewer."""
    import multiprocessing

    from hangar.viewer import data

    monkeypatch.setattr(data, "APART_FROM", 2)  # this sweep's 2 trials count as large

    def not_here(*_: object) -> None:
        raise AssertionError("built in the viewer's own process")

    viewer = Viewer(store)
    here = viewer.reports._report("sw")
    assert viewer.reports.patience("sw", 0.5) == viewer.snapshots.patience("sw", 0.5) == 0.0
    monkeypatch.setattr(data, "APART_FROM", 3)  # a small sweep's first page waits for it
    assert viewer.reports.patience("sw", 0.5) == 0.5
    monkeypatch.setattr(data, "APART_FROM", 2)
    viewer.reports._build_one = viewer.snapshots._build_one = not_here
    try:
        cached = viewer.reports.report("sw", wait=120)
        assert cached is not None
        assert cached.report.groups == here.groups and cached.report.scenarios == here.scenarios
        found = viewer.snapshots.get("sw", wait=120)
        assert found is not None and found[0].sweep == "sw"
        assert multiprocessing.active_children()
    finally:
        viewer.close()
    assert not multiprocessing.active_children()
