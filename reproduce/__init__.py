"""python -m reproduce <experiment>: the paper's tables and figures (Contract 1)."""
