"""The judging half of a trial: verifier protocol, admission rules, evidence bundles.

Filled in by the trial lifecycle issue (DESIGN.md section 3, phases 9-12).
"""
