"""Sweeps on Ray: expansion into trials, trial keys, fan-out, backpressure, retries, resume.

See DESIGN.md section 4: `sweep` (files and expansion), `keys`, `driver` (the Ray driver),
`task` (what runs on a worker), `shipping` (scenarios to workers), `metrics`.
"""
