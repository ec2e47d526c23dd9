"""Sweeps on Ray: expansion into trials, fan-out, backpressure, retries, resume.

`sweep` (files and expansion), `dispatch` (what goes next), `driver` (the Ray driver),
`task` (what runs on a worker, and what travels to it), `batch` (a kind's batch run as a
sweep), `preflight`, `board`, `metrics`. docs/architecture.md, "Layers".
"""
