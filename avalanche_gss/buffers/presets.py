"""Named presets: a method as the paper writes it, or as the authors' code does it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["Variant", "VARIANTS", "resolve"]

Variant = Literal["paper", "authors"]
"""``"paper"``: a method as the paper writes it; ``"authors"``: as the authors' code does it.

The authors' code is what produced the paper's published numbers, so ``"authors"`` is the
default of every buffer that has both (GSS-Greedy, GSS-Clust, FSS-Clust).
"""

VARIANTS: tuple[Variant, ...] = ("paper", "authors")


def resolve(presets: Mapping[str, Mapping[str, Any]], variant: str,
            given: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``variant``, each overridden by the value given when not ``None``.

    :param presets: ``{"paper": {...}, "authors": {...}}``: each preset's option values.
    :param variant: ``"paper"`` or ``"authors"``.
    :param given: the options the caller set (``None``: take the preset's).
    :raises ValueError: an unknown variant.
    """
    if variant not in presets:
        raise ValueError(f"variant must be 'paper' or 'authors', got {variant!r}")
    preset = presets[variant]
    return {name: given[name] if given.get(name) is not None else preset[name]
            for name in preset}
