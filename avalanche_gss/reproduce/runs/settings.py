"""A run's settings, in parts: its buffer, its training, its replay, its loss, its baselines.

:class:`RunSettings` is what defines one run: the method, the seed and five parts, each a
frozen dataclass that checks its own values (:class:`BufferSettings`,
:class:`TrainingSettings`, :class:`ReplaySettings`, :class:`LossSettings`,
:class:`BaselineSettings`); what spans parts (an update the method has, a retrieval or a
loss that only the buffer methods' rehearsal takes) :class:`RunSettings` checks.

**Names.** Each setting has a namespaced name, its part's then its own
(``training.lr``, ``replay.batch_size``, ``loss.logit_adjustment``), and a flat one, as a
run's record (:func:`settings_dict`), its cache key and the flat constructor spell it
(``lr``, ``replay_batch_size``, ``logit_adjustment``: :data:`FLAT_NAMES`). The method's
options (its buffer's own parameters, ``growth``, ``variant``) are bare names, in
:attr:`BufferSettings.options`. So in a ``METHOD:OPTION=VALUE,...`` text
(:func:`make_settings`, ``--methods``, ``--policies``) a bare name is always one of the
method's options, ``PART.NAME`` always a run setting: an option may share a run
setting's name (``lr``) without landing in the wrong part.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Generic, TypedDict, TypeVar

from avalanche_gss import methods
from avalanche_gss.methods.baselines import BASELINES
from avalanche_gss.training.logit_adjustment import check_tau, check_window
from avalanche_gss.training.retrieval import RETRIEVALS

__all__ = ["BUFFER_METHODS", "BaselineSettings", "BufferSettings", "CONSTRAINED_METHODS",
           "CRITERIA", "FLAT_NAMES", "LossSettings", "METHODS", "PARTS", "ReplaySettings",
           "RunSettings", "SettingsRecord", "TrainingSettings", "UPDATES", "VARIANT_METHODS",
           "default_mir_candidates", "default_retrieval", "make_settings", "settings_dict",
           "settings_from_dict", "split_keywords"]

VARIANT_METHODS: Sequence[str] = methods.NameView(
    lambda: tuple(name for name, m in methods.REGISTRY.items() if m.presets))
"""Methods with named presets ``"paper"`` / ``"authors"`` (see :class:`RunSettings`): those
whose authors' code departs from the paper's text. Like the other name lists here, a live
view of the registry: it holds the methods registered later too."""

BUFFER_METHODS: Sequence[str] = methods.NameView(lambda: tuple(methods.REGISTRY))
"""Task-free buffer policies, trained with the paper's online rehearsal: the registry's,
this package's then the registered ones (:func:`avalanche_gss.methods.register`)."""

UPDATES = ("rehearsal", "constrained")

CRITERIA = ("cross-entropy", "ace")
"""The rehearsal's losses (:attr:`LossSettings.criterion`): the plain cross-entropy, and
ER-ACE's asymmetric cross-entropy."""
"""How a buffer method uses its buffer: replay steps, or GEM-style constraints (appendix C)."""

CONSTRAINED_METHODS: Sequence[str] = methods.NameView(
    lambda: tuple(name for name, m in methods.REGISTRY.items() if m.constrained))
"""Buffer methods that ``run`` also trains with ``update="constrained"``."""

METHODS: Sequence[str] = methods.NameView(lambda: (*BUFFER_METHODS, *BASELINES))
"""Every method name a run accepts (the names used in tables, JSON and CLI)."""

OptionValue = object
"""A method option's value: any value its buffer's or strategy's parameter takes."""


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


@dataclass(frozen=True)
class BufferSettings:
    """The buffer: its size and the method's options.

    :param size: replay buffer size ``M`` (GEM: split evenly over the tasks; iCaRL: its
        total memory). Ignored by Single and the i.i.d. baselines.
    :param options: the method's options, by its buffer's own parameter names
        (``{"growth": 1.01, "recent_size": 100}`` for GSS-Clust); those left out take the
        buffer's defaults. A method's named preset is its option ``"variant"``:
        ``"authors"`` (the authors' code, which gave the paper's published numbers; the
        default) or ``"paper"`` (the paper's text), for GSS-Greedy, GSS-Clust and FSS-Clust
        (:data:`VARIANT_METHODS`). Checked against the method by :class:`RunSettings`.
    """

    size: int = 300
    options: dict[str, OptionValue] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", dict(self.options))
        _check(self.size >= 1, f"buffer_size must be >= 1, got {self.size}")
        bad = [name for name in self.options if not (isinstance(name, str)
                                                     and name.isidentifier())]
        _check(not bad, f"an option's name must be an identifier, got {bad}")


@dataclass(frozen=True)
class TrainingSettings:
    """How the network learns the incoming batches.

    :param n_iter: iterations per incoming batch (the paper's 1-5; 3 for MNIST).
    :param lr: SGD learning rate (0.05 MNIST, 0.01 CIFAR-10).
    :param batch_size: incoming batch size (10).
    :param model: ``"mlp"`` or ``"resnet18"``.
    :param device: where to train.
    """

    n_iter: int = 3
    lr: float = 0.05
    batch_size: int = 10
    model: str = "mlp"
    device: str = "cpu"

    def __post_init__(self) -> None:
        _check(self.n_iter >= 1, f"n_iter must be >= 1, got {self.n_iter}")
        _check(self.batch_size >= 1, "batch sizes must be >= 1")
        _check(self.lr > 0, f"lr must be positive, got {self.lr}")


@dataclass(frozen=True)
class ReplaySettings:
    """How a buffer method learns from its buffer.

    :param batch_size: buffer samples per replay step (10).
    :param update: ``"rehearsal"`` (the paper's replay steps) or ``"constrained"``
        (appendix C: each step projected so as not to increase any buffer sample's loss;
        GSS-IQP only).
    :param constraint_margin: the constrained update's GEM ``memory_strength`` (0: the
        plain projection; see ``ConstrainedUpdatePlugin``).
    :param retrieval: which buffer samples each replay step learns: ``"random"`` (uniform
        draws, the paper's), ``"mir"`` (Maximally Interfered Retrieval, Aljundi, Caccia
        et al., NeurIPS 2019; see ``MIRRetrieval``) or ``"other-classes"`` (the classes
        the incoming batch does not hold first; see ``OtherClassesRetrieval``). Buffer
        methods with ``update="rehearsal"`` only. ``None`` (the default): the method's own
        (:func:`default_retrieval`: ``"other-classes"`` for CB-GSS, else ``"random"``);
        the run's settings then hold that name.
    :param mir_candidates: MIR's ``C``, buffer samples scored per replay step; at least
        ``batch_size``. ``None`` (the default): :func:`default_mir_candidates`, the MIR
        authors' 50 (their replay batch was 10) up to a replay batch of 10, five times the
        replay batch above it (their ratio: 320 for a replay batch of 64); the run's
        settings then hold that number.
    :param joint: learn the replay batch in the incoming batch's SGD step (one step on the
        sum of the two mean losses: the experience replay of the MIR and ER-ACE papers)
        instead of a step of its own after it (the GSS paper's rehearsal, the default).
        Buffer methods with ``update="rehearsal"`` only.
    """

    batch_size: int = 10
    update: str = "rehearsal"
    constraint_margin: float = 0.0
    retrieval: str | None = None
    mir_candidates: int | None = None
    joint: bool = False

    def __post_init__(self) -> None:
        _check(self.batch_size >= 1, "batch sizes must be >= 1")
        _check(self.update in UPDATES,
               f"unknown update {self.update!r}; choose from {', '.join(UPDATES)}")
        _check(self.retrieval is None or self.retrieval in RETRIEVALS,
               f"unknown retrieval {self.retrieval!r}; choose from {', '.join(RETRIEVALS)}")
        candidates = self.mir_candidates
        if candidates is None:
            candidates = default_mir_candidates(self.batch_size)
            object.__setattr__(self, "mir_candidates", candidates)
        _check(candidates >= 1 and (self.retrieval != "mir" or candidates >= self.batch_size),
               f"mir_candidates must be >= replay_batch_size ({self.batch_size}), got "
               f"{candidates}")
        _check(isinstance(self.joint, bool), f"joint must be True or False, got {self.joint!r}")


def default_mir_candidates(replay_batch_size: int) -> int:
    """MIR's candidates per replay step when a run names none.

    The MIR authors' 50 on MNIST and CIFAR-10, where the replay batch was 10; above a
    replay batch of 10, five times the replay batch (their ratio), so that MIR still
    chooses its replay batch among more samples than it replays.

    :param replay_batch_size: buffer samples per replay step.
    """
    return max(50, 5 * replay_batch_size)


@dataclass(frozen=True)
class LossSettings:
    """The training loss of a buffer method's rehearsal.

    :param logit_adjustment: train with Logit Adjusted Softmax's loss, of this ``tau``
        (:class:`~avalanche_gss.training.LogitAdjustedLoss`; Huang et al., TMLR 2024):
        the cross-entropy of the logits shifted by ``tau`` times the log of the recent
        training labels' counts, in the incoming and the replay steps alike. ``0`` (the
        default): the plain cross-entropy. Buffer methods with ``update="rehearsal"``
        only. At most 100 (``MAX_TAU`` of :mod:`~avalanche_gss.training.logit_adjustment`).
    :param prior_window: how many recent training labels that prior counts (with
        ``logit_adjustment`` above 0), at most ``MAX_WINDOW`` (10,000,000: 8 bytes each).
    :param criterion: ``"cross-entropy"`` (the default) or ``"ace"``: ER-ACE's asymmetric
        cross-entropy (:class:`~avalanche_gss.training.AsymmetricCrossEntropy`; Caccia et
        al., ICLR 2022), the incoming batch's loss over the classes it holds and the replay
        batch's over all; ER-ACE proper with ``joint=True`` (:class:`ReplaySettings`). Not
        with ``logit_adjustment`` (each is a loss of its own). Buffer methods with
        ``update="rehearsal"`` only.
    :param mkd_weight: add momentum knowledge distillation with this weight
        (:class:`~avalanche_gss.training.MKDPlugin`; Michel et al., ICML 2024: an EMA
        teacher distilled into the learner on the incoming and the replay batches; MKD's
        code defaults to 8, its paper's ER+MKD configurations use 5.5). ``0`` (the
        default): none. Buffer methods with
        ``update="rehearsal"`` only.
    :param mkd_momentum: the teacher's EMA momentum (MKD's 0.99), in ``[0, 1)``.
    :param mkd_temperature: the distillation's temperature (MKD's 4), in ``(0, 100]``.
    """

    logit_adjustment: float = 0.0
    prior_window: int = 1000
    criterion: str = "cross-entropy"
    mkd_weight: float = 0.0
    mkd_momentum: float = 0.99
    mkd_temperature: float = 4.0

    def __post_init__(self) -> None:
        check_tau(self.logit_adjustment, "logit_adjustment")
        check_window(self.prior_window, "prior_window")
        _check(self.criterion in CRITERIA,
               f"unknown criterion {self.criterion!r}; choose from {', '.join(CRITERIA)}")
        _check(not self.logit_adjustment or self.criterion == "cross-entropy",
               f"criterion={self.criterion!r} and logit_adjustment={self.logit_adjustment} are "
               "two losses; choose one")
        _check(0 <= self.mkd_weight <= 1e6, f"mkd_weight must be in [0, 1e6], got "
                                            f"{self.mkd_weight}")
        _check(0 <= self.mkd_momentum < 1,
               f"mkd_momentum must be in [0, 1), got {self.mkd_momentum}")
        _check(0 < self.mkd_temperature <= 100,
               f"mkd_temperature must be in (0, 100], got {self.mkd_temperature}")


@dataclass(frozen=True)
class BaselineSettings:
    """What only the baselines take.

    :param iid_epochs: epochs of the ``iid-offline`` baseline.
    :param gem_memory_strength: GEM's margin (0.5 in the authors' scripts).
    """

    iid_epochs: int = 5
    gem_memory_strength: float = 0.5


PARTS: dict[str, type] = {"buffer": BufferSettings, "training": TrainingSettings,
                          "replay": ReplaySettings, "loss": LossSettings,
                          "baseline": BaselineSettings}
"""Each part of :class:`RunSettings` by its attribute name (its settings' namespace)."""

_RENAMED = {("buffer", "size"): "buffer_size", ("buffer", "options"): "options",
            ("replay", "batch_size"): "replay_batch_size"}

FLAT_NAMES: dict[str, tuple[str, str]] = {
    _RENAMED.get((part, f.name), f.name): (part, f.name)
    for part, cls in PARTS.items() for f in fields(cls)}
"""Each setting's flat name (as :func:`settings_dict` and the flat constructor spell it)
and its part and name there: ``"replay_batch_size"`` is ``("replay", "batch_size")``."""

class SettingsRecord(TypedDict):
    """A run's settings as its record holds them (:func:`settings_dict`).

    Flat, in this order: part of every run's cache key and of the results users read.
    """

    method: str
    options: dict[str, OptionValue]
    buffer_size: int
    seed: int
    n_iter: int
    lr: float
    batch_size: int
    replay_batch_size: int
    model: str
    device: str
    iid_epochs: int
    gem_memory_strength: float
    update: str
    constraint_margin: float
    retrieval: str
    mir_candidates: int
    joint: bool
    logit_adjustment: float
    prior_window: int
    criterion: str
    mkd_weight: float
    mkd_momentum: float
    mkd_temperature: float


T = TypeVar("T")


class _Flat(Generic[T]):
    """A flat name's read-only attribute: ``settings.lr`` is ``settings.training.lr``.

    On the class, the part's default (``RunSettings.mir_candidates`` is 50).
    """

    def __init__(self, flat: str) -> None:
        self.part, self.name = FLAT_NAMES[flat]

    def __get__(self, obj: RunSettings | None, owner: type) -> T:
        if obj is None:  # the default of a part built with its defaults (resolved ones too)
            default: T = getattr(PARTS[self.part](), self.name)
            return default
        value: T = getattr(getattr(obj, self.part), self.name)
        return value


@dataclass(frozen=True, init=False)
class RunSettings:
    """Everything that defines one run (hashable into a cache key by :func:`settings_dict`).

    Built from its parts (``RunSettings("GSS-Clust", seed=1, training=TrainingSettings(
    lr=0.1))``) or, as a run's record spells them, from flat keywords routed into their
    parts: ``RunSettings(method="GSS-Clust", options={"growth": 1.5}, buffer_size=300,
    lr=0.1)`` (:data:`FLAT_NAMES`; a flat keyword replaces that setting of a part given
    too). Each flat name reads back as an attribute (``settings.lr``,
    ``settings.replay_batch_size``, ``settings.options``).

    :param method: one of :data:`METHODS`.
    :param options: the method's options (:attr:`BufferSettings.options`); the baselines
        take none.
    :param buffer_size: :attr:`BufferSettings.size`.
    :param seed: seeds the model's initialisation, the buffer and the replay draws.
    :param buffer: the buffer part (its size and options).
    :param training: the training part.
    :param replay: the replay part; its ``retrieval`` left ``None`` becomes the method's
        own (:func:`default_retrieval`).
    :param loss: the loss part.
    :param baseline: the baselines' part.
    :param flat: the other flat keywords (``lr``, ``replay_batch_size``, ...).
    :raises TypeError: a keyword that names no setting.
    :raises ValueError: a value a part refuses, an unknown method, an option the method
        does not take, or settings that do not go together, in one line.
    """

    method: str
    seed: int
    buffer: BufferSettings
    training: TrainingSettings
    replay: ReplaySettings
    loss: LossSettings
    baseline: BaselineSettings

    options = _Flat[dict[str, OptionValue]]("options")
    buffer_size = _Flat[int]("buffer_size")
    n_iter = _Flat[int]("n_iter")
    lr = _Flat[float]("lr")
    batch_size = _Flat[int]("batch_size")
    replay_batch_size = _Flat[int]("replay_batch_size")
    model = _Flat[str]("model")
    device = _Flat[str]("device")
    iid_epochs = _Flat[int]("iid_epochs")
    gem_memory_strength = _Flat[float]("gem_memory_strength")
    update = _Flat[str]("update")
    constraint_margin = _Flat[float]("constraint_margin")
    retrieval = _Flat[str]("retrieval")
    mir_candidates = _Flat[int]("mir_candidates")
    joint = _Flat[bool]("joint")
    logit_adjustment = _Flat[float]("logit_adjustment")
    prior_window = _Flat[int]("prior_window")
    criterion = _Flat[str]("criterion")
    mkd_weight = _Flat[float]("mkd_weight")
    mkd_momentum = _Flat[float]("mkd_momentum")
    mkd_temperature = _Flat[float]("mkd_temperature")

    def __init__(self, method: str, options: Mapping[str, OptionValue] | None = None,
                 buffer_size: int | None = None, seed: int = 0, *,
                 buffer: BufferSettings | None = None,
                 training: TrainingSettings | None = None,
                 replay: ReplaySettings | None = None, loss: LossSettings | None = None,
                 baseline: BaselineSettings | None = None, **flat: Any) -> None:
        given = {"buffer": buffer, "training": training, "replay": replay, "loss": loss,
                 "baseline": baseline}
        changes: dict[str, dict[str, object]] = {part: {} for part in PARTS}
        named = {**({} if options is None else {"options": options}),
                 **({} if buffer_size is None else {"buffer_size": buffer_size}), **flat}
        for key, value in named.items():
            if key not in FLAT_NAMES:
                raise TypeError(f"RunSettings got an unexpected keyword {key!r}; the flat "
                                f"settings: {', '.join(FLAT_NAMES)}")
            part, name = FLAT_NAMES[key]
            changes[part][name] = value
        object.__setattr__(self, "method", method)
        object.__setattr__(self, "seed", seed)
        for part, cls in PARTS.items():
            current = given[part]
            value = (cls(**{**({} if current is None else vars(current)), **changes[part]})
                     if current is None or changes[part] else current)
            object.__setattr__(self, part, value)
        self._check()

    def _check(self) -> None:
        """Check what spans parts; fill in the method's own retrieval."""
        method, update = self.method, self.replay.update
        _check(method in METHODS, f"unknown method {method!r}; choose from {', '.join(METHODS)}")
        buffered = method in BUFFER_METHODS
        if buffered:
            methods.get(method).check_options(self.options)
        _check(buffered or not self.options,
               f"{method} takes no options, got {', '.join(self.options)}")
        _check(update != "constrained" or method in CONSTRAINED_METHODS,
               f"update='constrained' is implemented for {', '.join(CONSTRAINED_METHODS)}, "
               f"not {method!r}")
        if self.replay.retrieval is None:
            object.__setattr__(self, "replay", replace(
                self.replay, retrieval=default_retrieval(method, update)))
        rehearsal = buffered and update == "rehearsal"
        what = f"update={update!r}" if buffered else repr(method)
        _check(self.retrieval == "random" or rehearsal,
               f"retrieval={self.retrieval!r} chooses the replay batches of the buffer "
               f"methods' rehearsal, not of {what}")
        _check(not self.logit_adjustment or rehearsal,
               f"logit_adjustment={self.logit_adjustment} is the loss of the buffer methods' "
               f"rehearsal, not of {method!r} with update={update!r}")
        for name, value, off in (("criterion", self.criterion, "cross-entropy"),
                                 ("joint", self.joint, False), ("mkd_weight", self.mkd_weight, 0)):
            _check(value == off or rehearsal,
                   f"{name}={value!r} applies to the buffer methods' rehearsal, not to {what}")


def default_retrieval(method: str, update: str = "rehearsal") -> str:
    """The retrieval a run of ``method`` uses when its settings name none.

    A buffer method's ready strategy's ``default_retrieval`` (``"other-classes"`` for
    CB-GSS, ``"random"`` for the paper's methods) under ``update="rehearsal"``; else
    ``"random"`` (no replay batch to choose).

    :param method: one of :data:`METHODS`.
    :param update: the run's update.
    """
    if method in BUFFER_METHODS and update == "rehearsal":
        name: str = methods.REGISTRY[method].strategy.default_retrieval
        return name
    return "random"


def make_settings(method: str, **keywords: Any) -> RunSettings:
    """A run's settings from keywords: namespaced or flat settings, and options.

    Each keyword is read as :func:`split_keywords` reads it:
    ``make_settings("GSS-Clust", seed=1, growth=1.5, **{"training.lr": 0.1})`` is
    ``RunSettings("GSS-Clust", {"growth": 1.5}, seed=1, lr=0.1)``.

    :param method: one of :data:`METHODS`.
    :param keywords: settings and options.
    :raises ValueError: what :func:`split_keywords` or :class:`RunSettings` refuses, in
        one line.
    """
    settings, options = split_keywords(method, keywords)
    flat: dict[str, Any] = {key if key == "seed" else _flat_name(key): value
                            for key, value in settings.items()}  # checked by RunSettings
    return RunSettings(method, options, **flat)


def split_keywords(method: str, keywords: Mapping[str, object]
                   ) -> tuple[dict[str, object], dict[str, OptionValue]]:
    """Sort keywords into run settings, by their namespaced names, and the method's options.

    Each keyword is:

    - ``options``: a mapping of the method's options;
    - ``PART.NAME`` (a key with a dot): that setting of that part (:data:`PARTS`:
      ``training.lr``, ``replay.batch_size``, ``buffer.size``...);
    - ``seed``, or a flat setting's name (:data:`FLAT_NAMES`: ``buffer_size``, ``lr``,
      ``retrieval``...): that setting, unless the method also has an option of that
      name, which is refused as ambiguous (write ``PART.NAME`` or ``options``);
    - any other name: one of the method's options.

    :param method: the run's method (whose options a flat name must not be).
    :param keywords: settings and options.
    :return: the settings (``"seed"`` and ``"PART.NAME"`` keys) and the options.
    :raises ValueError: an unknown part or setting, a setting or option given twice, or
        an ambiguous name, in one line.
    """
    options: dict[str, OptionValue] = {}
    given = keywords.get("options") or {}
    if not isinstance(given, Mapping):
        raise ValueError(f"options must be a mapping, got {given!r}")
    options.update(given)
    own = _method_options(method)
    settings: dict[str, object] = {}
    for key, value in keywords.items():
        if key == "options":
            continue
        if "." in key:
            name = _namespaced(_flat_name(key))
        elif key == "seed" or key in FLAT_NAMES:
            name = key if key == "seed" else _namespaced(key)
            _check(key not in own, f"{key!r} is both a run setting and an option of "
                                   f"{method}; write {name} for the setting or "
                                   f"options={{{key!r}: ...}} for the option")
        else:
            _check(key not in options, f"option {key!r} given twice")
            options[key] = value
            continue
        _check(name not in settings, f"setting {name} given twice ({key})")
        settings[name] = value
    return settings, options


def _namespaced(flat: str) -> str:
    """A setting's namespaced name (``"replay_batch_size"``: ``"replay.batch_size"``)."""
    part, name = FLAT_NAMES[flat]
    return f"{part}.{name}"


def _flat_name(key: str) -> str:
    """The flat name of a namespaced setting (``"replay.batch_size"``: ``replay_batch_size``).

    :raises ValueError: no such part, or no such setting in it (``buffer.options`` too: the
        options are bare names), naming the choices.
    """
    part, _, name = key.partition(".")
    _check(part in PARTS, f"unknown settings part {part!r} in {key!r}; the parts: "
                          f"{', '.join(PARTS)} (a method's options take no prefix)")
    names = [f.name for f in fields(PARTS[part]) if (part, f.name) != ("buffer", "options")]
    _check(name in names, f"{part} has no setting {name!r}; its settings: {', '.join(names)}")
    return _RENAMED.get((part, name), name)


def _method_options(method: str) -> tuple[str, ...]:
    """The option names of ``method`` (none for a baseline or an unknown name)."""
    if method not in BUFFER_METHODS:
        return ()
    return tuple(methods.get(method).defaults())


def settings_dict(settings: RunSettings) -> SettingsRecord:
    """The run's settings as a flat JSON-ready dict, a cache key's part.

    ``method``, then every setting by its flat name (:data:`FLAT_NAMES`), the options as
    one dict (a copy): ``RunSettings(**d)`` gives the run back.

    :param settings: the run's settings.
    """
    s = settings
    return SettingsRecord(
        method=s.method, options=copy.deepcopy(s.options), buffer_size=s.buffer_size,
        seed=s.seed, n_iter=s.n_iter, lr=s.lr, batch_size=s.batch_size,
        replay_batch_size=s.replay_batch_size, model=s.model, device=s.device,
        iid_epochs=s.iid_epochs, gem_memory_strength=s.gem_memory_strength,
        update=s.update, constraint_margin=s.constraint_margin, retrieval=s.retrieval,
        mir_candidates=s.mir_candidates, joint=s.joint, logit_adjustment=s.logit_adjustment,
        prior_window=s.prior_window, criterion=s.criterion, mkd_weight=s.mkd_weight,
        mkd_momentum=s.mkd_momentum, mkd_temperature=s.mkd_temperature)


def settings_from_dict(values: Mapping[str, object]) -> RunSettings:
    """A run's settings from their record (``settings_dict``, as a job receives them).

    Flat, namespaced keywords and bare options work too, as
    :func:`make_settings` reads them.
    """
    rest = dict(values)
    return make_settings(str(rest.pop("method")), **rest)
