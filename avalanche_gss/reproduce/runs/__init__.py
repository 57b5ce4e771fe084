"""Runs: one run's settings and training, the jobs a sweep runs, the sweep and its cache."""
