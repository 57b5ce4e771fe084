"""The paper's experimental protocols as data (section 5, Table 4's text, the authors' scripts).

Each :class:`Protocol` names its stream, its defaults (methods, buffer sizes, seeds, lr,
n_iter) and the per-method settings of the authors' scripts (``Disjoint_Mnist.sh``,
``Permuted_Mnist.sh`` in their repository).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

from avalanche_gss import streams
from avalanche_gss.reproduce.reports import paper
from avalanche_gss.reproduce.reports.paper import PaperCell
from avalanche_gss.reproduce.runs.protocol_streams import ProtocolStream, Variant
from avalanche_gss.streams.registry import OptionValue

if TYPE_CHECKING:  # the data's type only: ``--help`` lists the tables without torch
    from avalanche_gss.streams import ArrayDataset


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
    :param paper_ref: where the paper reports it (``"Table 1"``); empty: a protocol of
        one's own.
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
    :param summary: the experiment's line in ``--help``.
    :param paper: the paper's cells, ``(method, column) -> (mean, sd or None)``
        (:mod:`~avalanche_gss.reproduce.reports.paper`); empty: none.
    :param paper_average: the paper's ``Avg`` column over the others, by method; ``None``:
        the table has none.
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
    summary: str = ""
    paper: Mapping[tuple[str, int], PaperCell] = field(default_factory=dict)
    paper_average: Mapping[str, PaperCell] | None = None

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
        are left out. A protocol of one's own (no ``paper_ref``) has its title alone.
        """
        label = data_label(data)
        sizes = "/".join(map(str, buffer_sizes or self.buffer_sizes))
        title = self.title.format(data=label, m=sizes)
        if not self.paper_ref:
            return title, False
        if data.verified_as in PAPER_DATA[self.dataset]:
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


def disjoint_stream(samples_per_task: int) -> ProtocolStream:
    """Disjoint stream: 5 tasks of 2 classes, ``samples_per_task`` each (fewer if absent).

    :param samples_per_task: the protocol's training samples per task.
    """
    return ProtocolStream("disjoint", samples_per_task)


BLURRY_KEEP = streams.BLURRY_KEEP
"""Share of its own samples each task keeps in the blurry streams (paper appendix: 90%)."""

_SELECTION = ("Rand", "Reservoir", "GSS-IQP", "GSS-Clust", "FSS-Clust", "GSS-Greedy")

TABLE1 = Protocol(
    name="table1",
    title="disjoint {data}, average accuracy by buffer size", paper_ref="Table 1",
    stream=disjoint_stream(1000),
    methods=(*_SELECTION, "Single"),
    buffer_sizes=(300, 400, 500),
    quick={"buffer_sizes": (300,), "seeds": (0,)},
    summary="disjoint MNIST, M = 300/400/500, average accuracy (paper Table 1)",
    paper=paper.TABLE1,
)

TABLE2 = Protocol(
    name="table2",
    title="permuted {data}, M = {m}", paper_ref="Table 2",
    stream=ProtocolStream("permuted", 1000, pool="all"),
    methods=(*_SELECTION, "Single"),
    buffer_sizes=(300,),
    min_classes=2,
    quick={"seeds": (0,), "methods": ("Rand", "Reservoir", "GSS-Greedy", "Single"),
           "samples_per_task": 200},
    summary="permuted MNIST, M = 300 (paper Table 2)",
    paper=paper.TABLE2,
)

TABLE3 = Protocol(
    name="table3",
    title="disjoint {data}, M = {m}", paper_ref="Table 3",
    stream=disjoint_stream(2000),
    methods=("Rand", "Reservoir", "GSS-Clust", "FSS-Clust", "GSS-Greedy"),
    buffer_sizes=(1000,),
    dataset="cifar10", lr=0.01, model="resnet18", standin=True,
    quick={"seeds": (0,), "buffer_sizes": (40,), "samples_per_task": 20,
           "methods": ("Rand", "Reservoir", "GSS-Greedy")},
    summary="disjoint CIFAR-10, M = 1000, ResNet-18 (paper Table 3)",
    paper=paper.TABLE3,
)

TABLE4 = Protocol(
    name="table4",
    title="imbalanced disjoint {data}, M = {m}, average accuracy per sequence",
    paper_ref="Table 4",
    stream=ProtocolStream("imbalanced", 2000, minor=200),
    methods=("Reservoir", "GSS-IQP", "GSS-Greedy"),
    buffer_sizes=(300,),
    variants=tuple({"sequence": k} for k in range(1, 6)),
    columns_by="sequence",
    quick={"seeds": (0,), "variants": ({"sequence": 1}, {"sequence": 3})},
    summary="imbalanced disjoint MNIST, M = 300, five sequences (paper Table 4)",
    paper=paper.TABLE4,
    paper_average=paper.TABLE4_AVG,
)

BLURRY = Protocol(
    name="blurry",
    title="blurry disjoint {data} (90% kept per task), M = {m}", paper_ref="appendix",
    stream=ProtocolStream("blurry", 1000),
    methods=_SELECTION,
    buffer_sizes=(500,),
    dataset="cifar10", lr=0.01, model="resnet18", standin=True,
    quick={"seeds": (0,), "buffer_sizes": (40,), "samples_per_task": 20,
           "methods": ("Rand", "Reservoir", "GSS-Greedy")},
    summary="blurry disjoint CIFAR-10, M = 500 (paper appendix)",
    paper=paper.BLURRY,
)

CONSTRAINED = Protocol(
    name="constrained",
    title="GSS-IQP constrained vs rehearsal, disjoint {data}, 200 samples per task",
    paper_ref="appendix C",
    stream=disjoint_stream(200),
    methods=("GSS-IQP",),
    buffer_sizes=(100, 200),
    flavours={"GSS-IQP": ({"update": "rehearsal"}, {"update": "constrained"})},
    quick={"seeds": (0,), "buffer_sizes": (100,)},
    summary="GSS-IQP constrained vs rehearsal update (paper appendix C)",
    paper=paper.CONSTRAINED,
)

PROTOCOLS: dict[str, Protocol] = {p.name: p for p in (TABLE1, TABLE2, TABLE3, TABLE4, BLURRY,
                                                 CONSTRAINED)}
"""The paper's table experiments, by name (the command line's and ``--help``'s)."""
