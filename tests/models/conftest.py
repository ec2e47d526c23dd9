"""Fixtures of the model tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hangar.testing.scripted import Script, ScriptedServer
from tests.models.cli_agents import EXAMPLES


@pytest.fixture
def scripted_server() -> Iterator[ScriptedServer]:
    """The example script's scripted model on loopback."""
    srv = ScriptedServer(Script.load(EXAMPLES / "scripted-model.yaml")).start()
    yield srv
    srv.shutdown()
