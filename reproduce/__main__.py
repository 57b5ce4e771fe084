"""``python -m reproduce <experiment>`` from a checkout: runs :mod:`avalanche_gss.reproduce`."""

import sys

from avalanche_gss.reproduce.__main__ import CHECKOUT, main

if __name__ == "__main__":
    sys.exit(main(prog=CHECKOUT))
