"""``python -m reproduce <experiment>``: the paper's tables and figures from this library."""
