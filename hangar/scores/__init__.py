"""Scores: statistics by scale, reports per group and metric and their rendering,
paired comparisons, the versions results are comparable at, and immutable baselines."""
