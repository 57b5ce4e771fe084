"""The paper's figures (``figure2``, ``figure4``, ``figure5``) for ``python -m reproduce``.

Each entry of :data:`FIGURES` takes the parsed command line and writes its outputs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

FIGURES: dict[str, Callable[[argparse.Namespace], int]] = {}
"""Figure experiments by name."""
