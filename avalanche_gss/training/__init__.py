"""Training wiring: the online template, the rehearsal and the constrained update.

* :class:`OnlineTemplate` (:mod:`~avalanche_gss.training.template`): Avalanche's
  ``SupervisedTemplate`` on a stream of small experiences, ``n_iter`` steps per batch.
* :class:`OnlineRehearsal`, :class:`OnlineRehearsalPlugin`
  (:mod:`~avalanche_gss.training.rehearsal`): the paper's replay step after each step.
* :class:`RandomRetrieval`, :class:`MIRRetrieval`
  (:mod:`~avalanche_gss.training.retrieval`): which buffer samples a replay step learns
  (uniform draws, or Maximally Interfered Retrieval), with any buffer.
* :class:`LogitAdjustedLoss` (:mod:`~avalanche_gss.training.logit_adjustment`): the
  cross-entropy of logits shifted by the recent label prior (Logit Adjusted Softmax), a
  criterion for any strategy.
* :class:`AsymmetricCrossEntropy` (:mod:`~avalanche_gss.training.ace`): ER-ACE's loss,
  the incoming batch against its own classes and the replay batch against all, with any
  buffer.
* :class:`MKDPlugin` (:mod:`~avalanche_gss.training.mkd`): momentum knowledge
  distillation, an EMA teacher distilled into the learner, on top of any replay method.
* :class:`ConstrainedUpdatePlugin` (:mod:`~avalanche_gss.training.constrained`): appendix
  C's projected step.

Each method's ready strategy is in its own file of :mod:`avalanche_gss.methods`.
"""

from avalanche_gss.training.ace import AsymmetricCrossEntropy, replay_criterion
from avalanche_gss.training.constrained import ConstrainedUpdatePlugin, gem_dual
from avalanche_gss.training.finite import finite_loss
from avalanche_gss.training.logit_adjustment import LogitAdjustedLoss
from avalanche_gss.training.mkd import MKDPlugin, distillation
from avalanche_gss.training.rehearsal import (
    BufferStrategy,
    OnlineRehearsal,
    OnlineRehearsalPlugin,
)
from avalanche_gss.training.retrieval import (
    MIRRetrieval,
    OtherClassesRetrieval,
    RandomRetrieval,
    Retrieval,
    make_retrieval,
)
from avalanche_gss.training.template import (
    OnlineTemplate,
    RepeatedBatchMixin,
    SlowPathWarning,
    quiet_evaluator,
)

__all__ = [
    "OnlineTemplate",
    "RepeatedBatchMixin",
    "SlowPathWarning",
    "quiet_evaluator",
    "OnlineRehearsal",
    "OnlineRehearsalPlugin",
    "BufferStrategy",
    "Retrieval",
    "RandomRetrieval",
    "MIRRetrieval",
    "OtherClassesRetrieval",
    "make_retrieval",
    "ConstrainedUpdatePlugin",
    "gem_dual",
    "finite_loss",
    "LogitAdjustedLoss",
    "AsymmetricCrossEntropy",
    "replay_criterion",
    "MKDPlugin",
    "distillation",
]
