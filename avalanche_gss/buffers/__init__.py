"""Buffers as Avalanche storage policies: the template every method's buffer builds on.

* :class:`OnlineBuffer` (:mod:`~avalanche_gss.buffers.base`): storage, validation, state,
  resizing and the Avalanche interface; a policy implements one decision, ``_assign``.
  It holds a :class:`~avalanche_gss.buffers.columns.SlotStore` (the slot columns) and a
  :class:`~avalanche_gss.buffers.sources.ProvenanceIndex` (the samples' source datasets).
* :class:`RecentMergeBuffer` (:mod:`~avalanche_gss.buffers.merge`): Algorithm 1's update
  through a recent buffer; a policy implements ``_select``.
* :class:`ClassBalancedBuffer` (:mod:`~avalanche_gss.buffers.classes`): per-class seen
  counts in the state, shrinking by the largest class, for the class-balancing policies.
* :class:`GradientScored` (:mod:`~avalanche_gss.buffers.scored`): the gradient Gram of a
  batch, for the policies that compare loss gradients.

The methods themselves (one file each) are in :mod:`avalanche_gss.methods`.
"""

from avalanche_gss.buffers.base import OnlineBuffer
from avalanche_gss.buffers.classes import ClassBalancedBuffer
from avalanche_gss.buffers.merge import RecentMergeBuffer
from avalanche_gss.buffers.presets import VARIANTS, Variant
from avalanche_gss.buffers.rows import Rows, task_labels_for
from avalanche_gss.buffers.scored import GradientScored, model_features
from avalanche_gss.buffers.sources import BufferView

__all__ = [
    "OnlineBuffer",
    "RecentMergeBuffer",
    "ClassBalancedBuffer",
    "GradientScored",
    "BufferView",
    "Rows",
    "Variant",
    "VARIANTS",
    "task_labels_for",
    "model_features",
]
