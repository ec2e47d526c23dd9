"""The scores-and-cost dashboard: PostgreSQL, over the results store's views."""

from __future__ import annotations

from hangar.dashboards.model import Dashboard, Panel, Sql, Variable

#: Every panel honours the five template variables.
FILTER = (
    "sweep_id IN ($sweep) AND suite IN ($suite) AND agent IN ($agent) "
    "AND model IN ($model) AND arm IN ($arm)"
)
TIME = "$__timeFilter(finished_at)"
# The Wilson 95% interval of k passes in n trials (hangar.scores.stats.wilson), in SQL.
Z, Z2, Z2_2, Z2_4 = (
    "1.959963984540054",
    "3.841458820694124",
    "1.920729410347062",
    "0.960364705173531",
)
_SPREAD = f"{Z} * sqrt(k / n * (1 - k / n) / n + {Z2_4} / (n * n))"
WILSON_LOW = f"(k / n + {Z2_2} / n - {_SPREAD}) / (1 + {Z2} / n)"
WILSON_HIGH = f"(k / n + {Z2_2} / n + {_SPREAD}) / (1 + {Z2} / n)"

PASS_RATE_OVER_TIME = Sql(
    f"""WITH g AS (
  SELECT $__timeGroup(finished_at, '1d') AS time, model,
         SUM(passed)::float AS k, SUM(counted)::float AS n
  FROM v_trials WHERE {TIME} AND counted = 1 AND {FILTER}
  GROUP BY 1, 2)
SELECT time, model AS metric, k / n AS value FROM g
UNION ALL SELECT time, model || ' 95% low', {WILSON_LOW} FROM g
UNION ALL SELECT time, model || ' 95% high', {WILSON_HIGH} FROM g
ORDER BY 1, 2""",
    ("time", "metric", "value"),
    "time_series",
)

SCORES_BY_GROUP = Sql(
    f"""WITH g AS (
  SELECT agent, model, arm, SUM(passed)::float AS k, SUM(counted)::float AS n
  FROM v_trials WHERE {TIME} AND counted = 1 AND {FILTER}
  GROUP BY agent, model, arm)
SELECT agent, model, arm, n::int AS trials, k::int AS passes, k / n AS pass_rate,
       {WILSON_LOW} AS low, {WILSON_HIGH} AS high
FROM g ORDER BY agent, model, arm""",
    ("agent", "model", "arm", "trials", "passes", "pass_rate", "low", "high"),
)

ARM_VS_CONTROL = Sql(
    f"""WITH s AS (
  SELECT agent, model, arm, scenario_id, AVG(passed::float) AS rate
  FROM v_trials WHERE {TIME} AND counted = 1 AND sweep_id IN ($sweep) AND suite IN ($suite)
    AND agent IN ($agent) AND model IN ($model)
  GROUP BY agent, model, arm, scenario_id)
SELECT a.agent, a.model, a.arm, COUNT(*) AS scenarios, AVG(a.rate - c.rate) AS difference
FROM s a JOIN s c ON c.agent = a.agent AND c.model = a.model
                 AND c.scenario_id = a.scenario_id AND c.arm = 'control'
WHERE a.arm <> 'control'
GROUP BY a.agent, a.model, a.arm ORDER BY 1, 2, 3""",
    ("agent", "model", "arm", "scenarios", "difference"),
)

COST_PER_DAY = Sql(
    f"""SELECT $__timeGroupAlias(finished_at, '1d'), model AS metric, SUM(cost_usd) AS value
FROM v_attempts WHERE {TIME} AND {FILTER}
GROUP BY 1, 2 ORDER BY 1, 2""",
    ("time", "metric", "value"),
    "time_series",
)

COST_PER_PASS = Sql(
    f"""SELECT agent, model, arm, SUM(cost_usd) AS cost_usd, SUM(passed) AS passes,
       SUM(cost_usd) / NULLIF(SUM(passed), 0) AS cost_per_pass,
       SUM(cost_usd) / NULLIF(SUM(counted), 0) AS cost_per_trial
FROM v_trials WHERE {TIME} AND {FILTER}
GROUP BY agent, model, arm ORDER BY agent, model, arm""",
    ("agent", "model", "arm", "cost_usd", "passes", "cost_per_pass", "cost_per_trial"),
)

TOKENS_BY_KIND = Sql(
    f"""SELECT model, SUM(tokens_in - tokens_cached) AS input_uncached,
       SUM(tokens_cached) AS cached_input, SUM(tokens_out - tokens_reasoning) AS output,
       SUM(tokens_reasoning) AS reasoning
FROM v_trials WHERE {TIME} AND {FILTER} GROUP BY model ORDER BY model""",
    ("model", "input_uncached", "cached_input", "output", "reasoning"),
)

DURATIONS = Sql(
    f"""SELECT agent, model, arm,
       percentile_cont(0.5) WITHIN GROUP (ORDER BY duration_s) AS p50,
       percentile_cont(0.95) WITHIN GROUP (ORDER BY duration_s) AS p95
FROM v_trials WHERE {TIME} AND counted = 1 AND {FILTER}
GROUP BY agent, model, arm ORDER BY agent, model, arm""",
    ("agent", "model", "arm", "p50", "p95"),
)

VERDICT_MIX = Sql(
    f"""SELECT $__timeGroupAlias(finished_at, '1d'), verdict AS metric, COUNT(*) AS value
FROM v_trials WHERE {TIME} AND {FILTER}
GROUP BY 1, 2 ORDER BY 1, 2""",
    ("time", "metric", "value"),
    "time_series",
)

LATEST_SWEEP = Sql(
    f"""WITH per AS (
  SELECT model, sweep_id, MAX(finished_at) AS finished, SUM(counted) AS trials,
         SUM(passed) AS passes, SUM(cost_usd) AS cost_usd
  FROM v_trials WHERE {TIME} AND {FILTER} GROUP BY model, sweep_id)
SELECT DISTINCT ON (model) model, sweep_id, finished, trials, passes,
       passes::float / NULLIF(trials, 0) AS pass_rate, cost_usd
FROM per ORDER BY model, finished DESC""",
    ("model", "sweep_id", "finished", "trials", "passes", "pass_rate", "cost_usd"),
)

#: Tasks of datasets that validation found broken or could not validate: sweeps leave them
#: out (no trial, no rate), so a dashboard names them apart.
TASKS_LEFT_OUT = Sql(
    """SELECT task_id, status, reason, sweep_id AS validated_by, updated_at
FROM validations WHERE status <> 'valid' ORDER BY updated_at DESC, task_id""",
    ("task_id", "status", "reason", "validated_by", "updated_at"),
)

#: Every score panel honours the metric and kind variables too. A knowledge answer not
#: labelled yet has no value: pending, never scored.
SCORE_FILTER = f"{FILTER} AND metric IN ($metric) AND kind IN ($kind) AND value IS NOT NULL"

METRIC_BY_GROUP = Sql(
    f"""WITH g AS (
  SELECT agent, model, arm, kind, metric, MIN(scale) AS scale, COUNT(*)::float AS n,
         SUM(value)::float AS k, AVG(value) AS mean, STDDEV_SAMP(value) AS sd
  FROM v_scores WHERE {TIME} AND {SCORE_FILTER}
  GROUP BY agent, model, arm, kind, metric)
SELECT agent, model, arm, kind, metric, scale, n::int AS n, mean,
       CASE WHEN scale = 'binary' THEN {WILSON_LOW}
            ELSE mean - {Z} * COALESCE(sd, 0) / sqrt(n) END AS low,
       CASE WHEN scale = 'binary' THEN {WILSON_HIGH}
            ELSE mean + {Z} * COALESCE(sd, 0) / sqrt(n) END AS high
FROM g ORDER BY agent, model, arm, kind, metric""",
    ("agent", "model", "arm", "kind", "metric", "scale", "n", "mean", "low", "high"),
)

#: The model's cost and the judge's apart (a rubric benchmark's judge is paid too).
COST_BY_PAYER = Sql(
    f"""SELECT agent, model, arm, SUM(cost_usd) AS model_cost_usd,
       SUM(judge_cost_usd) AS judge_cost_usd, SUM(judge_tokens_in) AS judge_tokens_in,
       SUM(judge_tokens_out) AS judge_tokens_out
FROM v_attempts WHERE {TIME} AND {FILTER}
GROUP BY agent, model, arm ORDER BY agent, model, arm""",
    (
        "agent", "model", "arm", "model_cost_usd", "judge_cost_usd", "judge_tokens_in",
        "judge_tokens_out",
    ),
)  # fmt: skip

JUDGE_COST_PER_DAY = Sql(
    f"""SELECT $__timeGroupAlias(finished_at, '1d'), model AS metric,
       SUM(judge_cost_usd) AS value
FROM v_attempts WHERE {TIME} AND {FILTER} AND judge_cost_usd > 0
GROUP BY 1, 2 ORDER BY 1, 2""",
    ("time", "metric", "value"),
    "time_series",
)

METRIC_OVER_TIME = Sql(
    f"""SELECT $__timeGroupAlias(finished_at, '1d'), model || ' · ' || metric AS metric,
       AVG(value) AS value
FROM v_scores WHERE {TIME} AND {SCORE_FILTER}
GROUP BY 1, 2 ORDER BY 1, 2""",
    ("time", "metric", "value"),
    "time_series",
)

BAND = (
    {
        "matcher": {"id": "byRegexp", "options": ".* 95% (low|high)"},
        "properties": [
            {"id": "custom.lineStyle", "value": {"fill": "dash", "dash": [4, 4]}},
            {"id": "custom.fillOpacity", "value": 10},
        ],
    },
)


#: The scores dashboard's panels, in order.
SCORES_PANELS = (
    Panel(
        "Pass rate per model over time (95% Wilson band)",
        "timeseries",
        (PASS_RATE_OVER_TIME,),
        "Daily pass rate of counted trials (pass and fail) per "
        "model, with its Wilson interval as dashed low and high lines.",
        "percentunit",
        width=24,
        overrides=BAND,
    ),
    Panel(
        "Pass rate per agent, model and arm",
        "table",
        (SCORES_BY_GROUP,),
        "Counted trials, passes, pass rate and its 95% Wilson interval per group.",
        "percentunit",
    ),
    Panel(
        "Scores per agent, model, arm, kind and metric",
        "table",
        (METRIC_BY_GROUP,),
        "Every metric of every kind (variables `metric`, `kind`): execution `pass`, "
        "decision `correct`, rubric dimensions and `overall`, routing `route`, "
        "knowledge `correctness` and `citation_validity` per answer (pending answers "
        "left out). Assessed scores, their mean, and a 95% interval (Wilson for "
        "binary scores; for points and counts the normal approximation, where "
        "`hangar report` bootstraps).",
        "short",
    ),
    Panel(
        "Mean score per model over time",
        "timeseries",
        (METRIC_OVER_TIME,),
        "Daily mean of each selected metric per model.",
        "short",
    ),
    Panel(
        "Each arm against control",
        "table",
        (ARM_VS_CONTROL,),
        "Mean over shared scenarios of (arm's pass rate - control's), repeats averaged "
        "first: the difference `hangar report` tests with a paired bootstrap.",
        "percentunit",
    ),
    Panel(
        "Cost per day per model",
        "timeseries",
        (COST_PER_DAY,),
        "USD spent per day by model, every attempt included.",
        "currencyUSD",
    ),
    Panel(
        "Model cost and judge cost",
        "table",
        (COST_BY_PAYER,),
        "Per group, every attempt: what the trials' own model calls cost, and apart "
        "what their LLM judge's calls cost (rubric benchmarks), with the judge's tokens.",
        "currencyUSD",
    ),
    Panel(
        "Judge cost per day per model",
        "timeseries",
        (JUDGE_COST_PER_DAY,),
        "USD the LLM judge cost per day, by the judged trials' model.",
        "currencyUSD",
    ),
    Panel(
        "Cost per trial and per passing trial",
        "table",
        (COST_PER_PASS,),
        "Per group: total cost, cost per counted trial, cost per passing trial.",
        "currencyUSD",
    ),
    Panel(
        "Tokens by kind",
        "barchart",
        (TOKENS_BY_KIND,),
        "Uncached input, cached input, output (non-reasoning) and reasoning tokens per model.",
        "short",
    ),
    Panel(
        "Trial duration p50 and p95",
        "table",
        (DURATIONS,),
        "Median and 95th percentile duration of counted trials per group.",
        "s",
    ),
    Panel(
        "Verdict mix over time",
        "timeseries",
        (VERDICT_MIX,),
        "Trials per day by verdict, blocked_setup, infra_error, verifier_error and void included.",
        "short",
    ),
    Panel(
        "Tasks left out: broken or not validated",
        "table",
        (TASKS_LEFT_OUT,),
        "Dataset tasks whose oracle fails, whose nop passes, whose image does not "
        "build, or that are flaky (`hangar dataset validate`): sweeps leave them out, "
        "so they are in no rate above.",
        "",
        width=24,
    ),
    Panel(
        "Latest sweep per model",
        "table",
        (LATEST_SWEEP,),
        "Each model's most recent sweep: trials, passes, pass rate and cost.",
        "",
        width=24,
    ),
)


def _filters() -> list[Variable]:
    """The dashboard's variables: sweep, suite, agent, model, arm, metric and kind."""
    # from the scores too: a knowledge arm run outside hangar has scores and no trial
    var = [
        Variable(
            name,
            f"SELECT {col} FROM v_trials UNION SELECT {col} FROM v_scores ORDER BY 1",
            label,
        )
        for name, col, label in (
            ("sweep", "sweep_id", "sweep"),
            ("suite", "suite", "suite"),
            ("agent", "agent", "agent"),
            ("model", "model", "model"),
            ("arm", "arm", "arm"),
        )
    ]
    var.append(Variable("metric", "SELECT DISTINCT metric FROM v_scores ORDER BY 1", "metric"))
    var.append(Variable("kind", "SELECT DISTINCT kind FROM v_scores ORDER BY 1", "kind"))
    return var


def scores_dashboard() -> Dashboard:
    """Scores and cost across sweeps, from the results store (PostgreSQL)."""
    return Dashboard(
        uid="hangar-scores",
        title="hangar: scores and cost",
        variables=_filters(),
        panels=list(SCORES_PANELS),
    )


ALL_QUERIES = {
    "pass_rate_over_time": PASS_RATE_OVER_TIME,
    "scores_by_group": SCORES_BY_GROUP,
    "arm_vs_control": ARM_VS_CONTROL,
    "cost_per_day": COST_PER_DAY,
    "cost_per_pass": COST_PER_PASS,
    "tokens_by_kind": TOKENS_BY_KIND,
    "durations": DURATIONS,
    "verdict_mix": VERDICT_MIX,
    "latest_sweep": LATEST_SWEEP,
    "metric_by_group": METRIC_BY_GROUP,
    "metric_over_time": METRIC_OVER_TIME,
    "tasks_left_out": TASKS_LEFT_OUT,
    "cost_by_payer": COST_BY_PAYER,
    "judge_cost_per_day": JUDGE_COST_PER_DAY,
}
