"""Sweeps on Ray: expansion into trials, trial keys, fan-out, backpressure, retries, resume.

Filled in by the sweep issue (DESIGN.md section 4); nothing here yet.
"""
