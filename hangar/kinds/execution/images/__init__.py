"""Image tasks: execution tasks whose fixture is an image (Harbor tasks, SWE-bench
instances), their trial, where their tests run, and what their images need."""
