"""Ray cluster bring-up and attach, the per-node reaper, cluster launcher configs.

Filled in by the sweep issue (DESIGN.md section 4).
"""
