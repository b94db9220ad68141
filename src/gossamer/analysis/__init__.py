"""The PySpark trace pipeline: pure DataFrame transforms, jobs and the report."""
