"""The field's output formats a sweep exports to: Harbor job folders, SWE-bench
submissions."""
