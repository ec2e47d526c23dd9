"""One build per image on a cold cluster: the board's claims and the nodes' waiting."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hangar.sandbox import build_once
from hangar.scheduler.builds import Claims


def test_the_first_node_builds_the_others_wait_then_pull() -> None:
    claims = Claims(lambda: {"aaaa", "bbbb", "cccc"})
    assert claims.claim("t", "x/aaaa") == "build"
    assert claims.claim("t", "y/bbbb") == "wait"
    assert claims.claim("t", "x/aaaa") == "build"  # the builder asking again builds
    claims.finished("t", "x/aaaa", ok=True)
    assert claims.claim("t", "y/bbbb") == "pull"
    assert claims.claim("t", "z/cccc") == "pull"
    assert claims.claim("other", "z/cccc") == "build"  # tags are apart


def test_a_failed_build_or_a_dead_builder_lets_the_next_node_build() -> None:
    alive = {"aaaa", "bbbb", "cccc"}
    claims = Claims(lambda: set(alive))
    assert claims.claim("t", "x/aaaa") == "build"
    claims.finished("t", "x/aaaa", ok=False)
    assert claims.claim("t", "y/bbbb") == "build"
    assert claims.claim("t", "z/cccc") == "wait"
    alive.discard("bbbb")  # y's node died mid-build
    time.sleep(0.01)
    claims._alive_at = 0.0  # its view of Ray is refreshed (every few seconds)
    assert claims.claim("t", "z/cccc") == "build"
    claims.finished("t", "y/bbbb", ok=False)  # the dead node's late word changes nothing
    assert claims.claim("t", "x/aaaa") == "wait"


def test_a_node_without_coordinator_builds_what_the_registry_lacks() -> None:
    build_once.use_coordinator(None)
    assert build_once.built_once("t", lambda: "pulled", lambda: "built", wait_s=1) == "pulled"
    assert build_once.built_once("t", lambda: None, lambda: "built", wait_s=1) == "built"


@pytest.mark.ray
def test_nodes_asking_the_board_at_once_build_an_image_once(
    ray_local: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Four "nodes" (threads, each its own name on the board) miss the image at once: one
    builds and pushes it, the other three wait and pull that one. Then a failing build:
    every node that asks after the failure builds in turn, none waits forever."""
    import ray

    from hangar.scheduler.board import open_board
    from hangar.scheduler.builds import BoardCoordinator

    monkeypatch.setattr(build_once, "WAIT_EVERY_S", 0.05)
    board = open_board(ray, f"builds-{tmp_path.name}")
    here = ray.get_runtime_context().get_node_id()[:12]
    registry: dict[str, str] = {}
    builds: list[str] = []
    got: dict[str, str] = {}
    lock = threading.Lock()

    def node(name: str) -> None:
        def build() -> str:
            time.sleep(0.5)
            with lock:
                builds.append(name)
                registry["image"] = f"id-from-{name}"
            return registry["image"]

        got[name] = build_once.built_once(
            "image:t",
            lambda: registry.get("image"),
            build,
            wait_s=30,
            coordinator=BoardCoordinator(board, f"{name}/{here}"),
        )

    run_as_nodes(node, 4)
    assert len(builds) == 1, builds
    assert set(got.values()) == {f"id-from-{builds[0]}"}, got

    # A build that fails: the next node to ask builds (one at a time), each fails on its
    # own, none waits for a push that never comes.
    tries: list[str] = []
    at_once = [0, 0]  # now, most

    def failing(name: str) -> None:
        def build() -> str:
            with lock:
                tries.append(name)
                at_once[0] += 1
                at_once[1] = max(at_once)
            time.sleep(0.3)
            with lock:
                at_once[0] -= 1
            raise RuntimeError("the Dockerfile is broken")

        with pytest.raises(RuntimeError, match="broken"):
            build_once.built_once(
                "image:bad",
                lambda: None,
                build,
                wait_s=30,
                coordinator=BoardCoordinator(board, f"{name}/{here}"),
            )

    run_as_nodes(failing, 3)
    assert sorted(tries) == ["n0", "n1", "n2"] and at_once[1] == 1, (tries, at_once)
    ray.kill(board)


def run_as_nodes(node: Callable[[str], None], count: int) -> None:
    """`node` run by `count` threads at once ("n0", "n1", ...), each a node of its own."""
    threads = [threading.Thread(target=node, args=(f"n{i}",)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
