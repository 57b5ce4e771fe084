"""Reports: rows from runs, the statistics that compare them, and the files they are written to."""
