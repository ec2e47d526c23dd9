"""hangar: a container-sandboxed execution farm for evaluating AI coding agents.

The functional parts live in subpackages: `hangar.sandbox` (where commands run),
`hangar.scheduler` (sweeps on Ray), `hangar.verifiers` (judging and evidence),
`hangar.cluster` (Ray cluster helpers) and `hangar.dashboards` (Grafana as code).
"""

from hangar._version import __version__

__all__ = ["__version__"]
