"""``python -m reproduce`` from a checkout: ``python -m avalanche_gss.reproduce``.

This folder is the repository's scripts folder and is not installed; the experiments
live in :mod:`avalanche_gss.reproduce`, which ``pip install`` puts in site-packages.
"""
