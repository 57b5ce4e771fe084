"""Experiments: the paper's tables and figures and our own, each a plan of runs and a report."""
