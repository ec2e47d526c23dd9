"""The sandbox conformance battery (`hangar.sandbox.conformance`), as a backend from
another package would take it, against every backend that can run here (`conftest`)."""

from hangar.sandbox.conformance import *  # noqa: F403
