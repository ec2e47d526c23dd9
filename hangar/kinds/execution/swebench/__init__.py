"""SWE-bench instances: imported as image tasks, graded with the ``swebench`` package."""
