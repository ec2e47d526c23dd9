"""Sweeps on Ray: expansion into trials, fan-out, backpressure, retries, resume.

`sweep` (files and expansion), `driver` (the Ray driver), `task` (what runs on a
worker), `shipping` (scenarios to workers), `metrics`. docs/architecture.md, "Layers".
"""
