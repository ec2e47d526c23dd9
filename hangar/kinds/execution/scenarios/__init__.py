"""Git scenarios: a task pinned to a repository revision, its fixtures, admission,
trial, verification places and judgement."""
