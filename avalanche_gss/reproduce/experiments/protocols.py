"""The paper's experimental protocols as data (section 5, Table 4's text, the authors' scripts).

Each :class:`Protocol` names its stream, its defaults (methods, buffer sizes, seeds, lr,
n_iter) and the per-method settings of the authors' scripts (``Disjoint_Mnist.sh``,
``Permuted_Mnist.sh`` in their repository).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from avalanche_gss import streams
from avalanche_gss.streams import REGISTRY, ArrayDataset, OptionValue, TaskSplit


class MethodOverrides(TypedDict, total=False):
    """Settings of one method that replace its protocol's (the authors' scripts' own).

    :param lr: SGD learning rate.
    :param n_iter: iterations per batch.
    """

    lr: float
    n_iter: int


# Per-method settings from the authors' scripts (Disjoint_Mnist.sh, Permuted_Mnist.sh):
# Single and GEM use 1 iteration per batch; iCaRL uses lr 0.1.
METHOD_OVERRIDES: dict[str, MethodOverrides] = {
    "Single": {"n_iter": 1},
    "GEM": {"n_iter": 1},
    "iCaRL": {"lr": 0.1},
    "iid-online": {"n_iter": 1},
    "iid-offline": {"n_iter": 1},
}


Variant = Mapping[str, OptionValue]
"""A protocol's row keys for one row (Table 4's ``sequence``; ``--quick``'s
``samples_per_task``); the keys its stream takes as options (any registered stream's, so
not a closed set) are passed on to it."""

Flavour = dict[str, OptionValue]
"""A method's extra row: run settings, by their flat or namespaced names, or options of the
method (``{"update": "constrained"}``), that also become the row's keys."""


class QuickSettings(TypedDict, total=False):
    """What ``--quick`` replaces (or adds) among a protocol's defaults.

    :param methods: the methods.
    :param buffer_sizes: the buffer sizes.
    :param seeds: the seeds.
    :param variants: the rows' keys (Table 4: its sequences).
    :param samples_per_task: training samples per task (a shorter stream).
    """

    methods: tuple[str, ...]
    buffer_sizes: tuple[int, ...]
    seeds: tuple[int, ...]
    variants: tuple[Variant, ...]
    samples_per_task: int


@dataclass(frozen=True)
class Protocol:
    """One experiment of ``python -m reproduce``.

    :param name: the experiment (``table1``...).
    :param title: one line for the table's heading; ``{data}`` stands for the data used.
    :param paper_ref: where the paper reports it (``"Table 1"``).
    :param stream: the registered stream it runs and its counts (:class:`ProtocolStream`:
        called with a dataset, the seed and the row's variant, e.g. the imbalanced
        sequence, it builds the task sequence).
    :param methods: default methods.
    :param buffer_sizes: default buffer sizes.
    :param variants: the row keys beyond method and buffer (e.g. ``{"sequence": k}``);
        one empty dict when there are none. The stream builder also reads an optional
        ``samples_per_task`` there (``--quick`` sets it: a shorter stream).
    :param columns_by: the row key the markdown table's columns range over.
    :param quick: settings that replace the defaults under ``--quick``.
    :param dataset: default ``--data``.
    :param lr: SGD learning rate.
    :param n_iter: iterations per batch.
    :param seeds: default seeds.
    :param model: ``"mlp"`` or ``"resnet18"``.
    :param flavours: extra rows per method: settings that also become row keys (e.g.
        ``{"GSS-IQP": ({"update": "rehearsal"}, {"update": "constrained"})}``).
    :param standin: with ``--quick``, a generated stand-in replaces the dataset when it
        cannot be loaded (CIFAR-10 offline), and the outputs say so.
    :param min_classes: the classes the stream needs (5 tasks of 2 classes: 10).
    """

    name: str
    title: str
    paper_ref: str
    stream: ProtocolStream
    methods: tuple[str, ...]
    buffer_sizes: tuple[int, ...]
    variants: tuple[Variant, ...] = ({},)
    columns_by: str = "buffer_size"
    quick: QuickSettings = field(default_factory=QuickSettings)
    dataset: str = "mnist"
    lr: float = 0.05
    n_iter: int = 3
    seeds: tuple[int, ...] = (0, 1, 2)
    model: str = "mlp"
    flavours: dict[str, tuple[Flavour, ...]] = field(default_factory=dict)
    standin: bool = False
    min_classes: int = 10

    def check(self, data: ArrayDataset) -> None:
        """Refuse data this protocol cannot be run on, before any run starts.

        :raises ValueError: too few classes for the stream, or a class without training
            samples in a task.
        """
        classes = data.classes
        if len(classes) < self.min_classes:
            raise ValueError(
                f"{data.name}: {self.name} needs at least {self.min_classes} classes "
                f"({'5 tasks of 2 classes' if self.min_classes == 10 else 'to classify'}), "
                f"the data hold {len(classes)} ({', '.join(map(str, classes))})")

    def heading(self, data: ArrayDataset, buffer_sizes: tuple[int, ...] = ()
                ) -> tuple[str, bool]:
        """Return the title for runs on ``data`` and whether the paper's numbers apply.

        ``{data}`` in the title becomes the data's name, ``{m}`` the buffer sizes run.

        The paper's numbers stand beside ours only on data verified to be the paper's own
        dataset (``data.verified_as``: MNIST, also as the 5,000-digit subset; CIFAR-10); on
        other data the title says whose protocol it follows and that the paper's numbers
        are left out.
        """
        own = data.verified_as in PAPER_DATA[self.dataset]
        label = data_label(data)
        sizes = "/".join(map(str, buffer_sizes or self.buffer_sizes))
        title = self.title.format(data=label, m=sizes)
        if own:
            return f"{title} (paper {self.paper_ref})", True
        paper_label = DATA_LABELS[self.dataset]
        return (f"{title} (protocol of paper {self.paper_ref}, run on {label}; the paper's "
                f"numbers are for {paper_label} and are not shown)", False)


DATA_LABELS = {"mnist": "MNIST", "mnist-5k": "MNIST (5,000-digit subset)",
               "cifar10": "CIFAR-10", "cifar10-standin": "CIFAR-10 stand-in (generated)"}
"""How a dataset is named in titles (an ``.npz`` file: its stem)."""

PAPER_DATA = {"mnist": ("mnist", "mnist-5k"), "cifar10": ("cifar10",)}
"""The datasets the paper's numbers were measured on (``ArrayDataset.verified_as`` values),
by a protocol's default dataset."""


def data_label(data: ArrayDataset) -> str:
    """How ``data`` are named in titles: by what they were verified to be, else by name.

    Files in a published dataset's layout that were not verified to be it are named so
    (``"mnist data not verified as MNIST"``).
    """
    return label_of(data.name, data.verified_as)


def label_of(name: str, verified_as: str | None) -> str:
    """The :func:`data_label` of data named ``name``, verified as ``verified_as``.

    A report's ``dataset`` and ``data_verified_as`` name its data so.
    """
    if verified_as is not None:
        return DATA_LABELS[verified_as]
    if name in PAPER_DATA:
        return f"{name} data not verified as {DATA_LABELS[name]}"
    return DATA_LABELS.get(name, name)


def _class_counts(data: ArrayDataset, n_tasks: int, per_task: int) -> int:
    """Fewest training samples any task of a disjoint split can draw from."""
    y = data.y_train
    classes = data.classes[: n_tasks * per_task]
    return min(
        int(sum(int((y == c).sum()) for c in classes[k * per_task : (k + 1) * per_task]))
        for k in range(n_tasks)
    )


def fit_count(wanted: int, available: int, what: str, deviations: list[str],
              paper: int | None = None) -> int:
    """``wanted`` if the data have it, else ``available`` and a recorded deviation.

    :param paper: the protocol's own count (``None``: ``wanted``); a ``wanted`` that is
        not it (a ``--quick`` run's) is named as asked, not as the paper's.
    """
    if wanted <= available:
        return wanted
    whose = "the paper's" if paper in (None, wanted) else "the"
    deviations.append(f"{what}: {available} instead of {whose} {wanted} (the data have "
                      f"no more)")
    return available


@dataclass(frozen=True)
class ProtocolStream:
    """A protocol's stream: a registered stream and its counts, fitted to the data.

    Called as ``stream(data, seed, variant)``, it builds the registered stream
    (:data:`avalanche_gss.streams.REGISTRY`) of that name with the protocol's samples per
    task, a ``samples_per_task`` in ``variant`` (``--quick`` runs) replacing them, and the
    variant's other keys as the stream's options. Counts the data cannot give shrink to what
    they hold, recorded in the split's ``protocol["deviations"]``.

    :param name: the registered stream (``"disjoint"``, ``"permuted"``, ``"imbalanced"``,
        ``"blurry"``...).
    :param samples_per_task: the protocol's training samples per task (imbalanced: the
        sequence's own task's, ``major``).
    :param minor: imbalanced streams: every other task's samples; a ``samples_per_task``
        in the variant, or data with fewer than ``samples_per_task`` per task, shrink both
        by the same factor (the paper's 10:1 imbalance kept).
    :param pool: what a task draws its samples from: ``"classes"``, its 2 classes' samples
        (5 tasks of 2 classes), or ``"all"``, the whole training set (permuted tasks).
    """

    name: str
    samples_per_task: int
    minor: int | None = None
    pool: Literal["classes", "all"] = "classes"

    def __call__(self, data: ArrayDataset, seed: int, variant: Variant, *,
                 stream: str | None = None, options: Variant | None = None) -> TaskSplit:
        """Build the split for one run.

        :param data: the dataset.
        :param seed: the run's seed.
        :param variant: the row's keys (:data:`Variant`).
        :param stream: build this registered stream instead of :attr:`name`, with the
            protocol's counts (which-buffer's blurry stream is Table 1's, blurred).
        :param options: options of the stream (:meth:`options_of`); the variant's keys and
            the protocol's counts replace them.
        """
        deviations: list[str] = []
        definition = REGISTRY[stream or self.name]
        options = {**(options or {}),
                   **{k: v for k, v in variant.items()
                      if k in definition.options and k != "samples_per_task"}}
        options.update(self.counts(data, variant, deviations))
        split = definition.build(data, seed=seed, **options)
        split.protocol["deviations"] = deviations
        return split

    @property
    def counted(self) -> tuple[str, ...]:
        """The options its counts set (:meth:`counts`)."""
        return ("samples_per_task",) if self.minor is None else ("major", "minor")

    def options_of(self, stream: str, variant: Mapping[str, object]) -> dict[str, OptionValue]:
        """The options of registered ``stream`` that neither its counts nor ``variant`` set.

        What a job records of the stream it builds, beside its name and variant.

        :param stream: a name of :data:`avalanche_gss.streams.REGISTRY`.
        :param variant: the row's keys.
        """
        return {k: v for k, v in REGISTRY[stream].options.items()
                if k not in self.counted and k not in variant}

    def counts(self, data: ArrayDataset, variant: Variant, deviations: list[str]
               ) -> dict[str, OptionValue]:
        """The stream's sample counts for ``data``, the shrunk ones named in ``deviations``.

        :param data: the dataset.
        :param variant: the row's keys (its ``samples_per_task``, if any).
        :param deviations: where a count the data cannot give is recorded.
        """
        wanted = variant.get("samples_per_task", self.samples_per_task)
        if isinstance(wanted, bool) or not isinstance(wanted, int):
            raise ValueError(f"samples_per_task must be an int, got {wanted!r}")
        if self.pool == "all":
            available = len(data.y_train)
        else:
            available = _class_counts(data, 5, 2)
        if self.minor is None:
            return {"samples_per_task": fit_count(wanted, available, "samples per task",
                                                  deviations, self.samples_per_task)}
        major, minor = self.samples_per_task, self.minor
        big, small = wanted, max(1, round(minor * wanted / major))
        if big > available:
            big, small = available, max(1, round(minor * available / major))
            deviations.append(f"imbalanced counts {big}/{small} instead of the paper's "
                              f"{major}/{minor} (same ratio; the data have {available} per "
                              "task)")
        return {"major": big, "minor": small}


def disjoint_stream(samples_per_task: int) -> ProtocolStream:
    """Disjoint stream: 5 tasks of 2 classes, ``samples_per_task`` each (fewer if absent).

    :param samples_per_task: the protocol's training samples per task.
    """
    return ProtocolStream("disjoint", samples_per_task)


BLURRY_KEEP = streams.BLURRY_KEEP
"""Share of its own samples each task keeps in the blurry streams (paper appendix: 90%)."""

_SELECTION = ("Rand", "Reservoir", "GSS-IQP", "GSS-Clust", "FSS-Clust", "GSS-Greedy")

PROTOCOLS: dict[str, Protocol] = {
    "table1": Protocol(
        name="table1",
        title="disjoint {data}, average accuracy by buffer size", paper_ref="Table 1",
        stream=disjoint_stream(1000),
        methods=(*_SELECTION, "Single"),
        buffer_sizes=(300, 400, 500),
        quick={"buffer_sizes": (300,), "seeds": (0,)},
    ),
    "table2": Protocol(
        name="table2",
        title="permuted {data}, M = {m}", paper_ref="Table 2",
        stream=ProtocolStream("permuted", 1000, pool="all"),
        methods=(*_SELECTION, "Single"),
        buffer_sizes=(300,),
        min_classes=2,
        quick={"seeds": (0,), "methods": ("Rand", "Reservoir", "GSS-Greedy", "Single"),
               "samples_per_task": 200},
    ),
    "table3": Protocol(
        name="table3",
        title="disjoint {data}, M = {m}", paper_ref="Table 3",
        stream=disjoint_stream(2000),
        methods=("Rand", "Reservoir", "GSS-Clust", "FSS-Clust", "GSS-Greedy"),
        buffer_sizes=(1000,),
        dataset="cifar10", lr=0.01, model="resnet18", standin=True,
        quick={"seeds": (0,), "buffer_sizes": (40,), "samples_per_task": 20,
               "methods": ("Rand", "Reservoir", "GSS-Greedy")},
    ),
    "table4": Protocol(
        name="table4",
        title="imbalanced disjoint {data}, M = {m}, average accuracy per sequence",
        paper_ref="Table 4",
        stream=ProtocolStream("imbalanced", 2000, minor=200),
        methods=("Reservoir", "GSS-IQP", "GSS-Greedy"),
        buffer_sizes=(300,),
        variants=tuple({"sequence": k} for k in range(1, 6)),
        columns_by="sequence",
        quick={"seeds": (0,), "variants": ({"sequence": 1}, {"sequence": 3})},
    ),
    "blurry": Protocol(
        name="blurry",
        title="blurry disjoint {data} (90% kept per task), M = {m}", paper_ref="appendix",
        stream=ProtocolStream("blurry", 1000),
        methods=_SELECTION,
        buffer_sizes=(500,),
        dataset="cifar10", lr=0.01, model="resnet18", standin=True,
        quick={"seeds": (0,), "buffer_sizes": (40,), "samples_per_task": 20,
               "methods": ("Rand", "Reservoir", "GSS-Greedy")},
    ),
    "constrained": Protocol(
        name="constrained",
        title="GSS-IQP constrained vs rehearsal, disjoint {data}, 200 samples per task",
        paper_ref="appendix C",
        stream=disjoint_stream(200),
        methods=("GSS-IQP",),
        buffer_sizes=(100, 200),
        flavours={"GSS-IQP": ({"update": "rehearsal"}, {"update": "constrained"})},
        quick={"seeds": (0,), "buffer_sizes": (100,)},
    ),
}
"""Implemented experiments, by name."""
