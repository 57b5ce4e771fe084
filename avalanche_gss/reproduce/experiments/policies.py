"""The buffer policies and the streams that ``python -m reproduce which-buffer`` compares.

Data only, the standard library and the stream registry only: the command line reads the
labels for ``--help`` and ``--policies`` / ``--streams`` without importing torch.

**Adding a policy** is one entry in :data:`POLICIES`: its row label, mapped to the
:class:`Policy` that makes it (its ``method`` names a buffer method of the registry,
``avalanche_gss.methods``; each of its ``settings`` is a run setting, by its flat or its
namespaced name (``retrieval``, ``replay.retrieval``), or else an option of the method's
buffer, by the buffer's own parameter name, or ``options``, a dict of them; see
``avalanche_gss.reproduce.runs.settings.split_keywords``). From one's own module,
:func:`register_policy` adds it (give the module to ``python -m reproduce --import``); on
the command line, ``--policies METHOD:OPTION=VALUE,...`` (:func:`policy_label`); in this
package, one line below. Nothing else changes: the label becomes a ``--policies`` choice,
a row of the table, a series of the figure and a row of the composition report. A policy
whose method is not in the registry, or that sets an option its method does not take, is
refused before any run, in one line naming it.

**Adding a stream** is registering it by name
(:func:`avalanche_gss.streams.register_stream`, in a module given to ``--import``): it
becomes a ``--streams`` choice (:data:`STREAMS`), run with Table 1's protocol.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TypedDict

from avalanche_gss.registry import Registry
from avalanche_gss.reproduce.experiments.protocols import (
    TABLE1,
    TABLE2,
    TABLE3,
    TABLE4,
    Protocol,
)
from avalanche_gss.reproduce.experiments.which_buffer_records import Json
from avalanche_gss.streams import REGISTRY


@dataclass(frozen=True)
class Policy:
    """A which-buffer policy: a buffer method and the settings it runs with.

    :param method: a buffer method of the registry (``avalanche_gss.methods``).
    :param settings: ``RunSettings`` fields (``retrieval``, ...) and options of the
        method's buffer (``variant``, ``growth``, ...), by name, in the order they show.
    """

    method: str
    settings: dict[str, Json] = field(default_factory=dict)

    def keywords(self) -> dict[str, Json]:
        """``method``, then the settings: the policy as reports record it."""
        return {"method": self.method, **self.settings}


POLICIES: Registry[Policy] = Registry("which-buffer policy")
"""Each policy's row label and what makes it (its method; ``RunSettings`` fields and the
buffer's options), in row order.

GSS-Greedy, GSS-Clust and FSS-Clust run as the authors' code does them (the variant
that gave the paper's numbers). ``ER-MIR`` and ``GSS+MIR`` are Reservoir and GSS-Greedy
with MIR's replay draws; ``CB-GSS`` runs with its own retrieval (the classes the
incoming batch does not hold first), as every policy without a ``retrieval`` key does;
``CB-GSS (step)`` scores with the gradients of its training step instead of a pass of its
own (``score_from="step"``), at no cost beyond training.
``GCR`` is the paper's method (coreset selection and its weighted replay loss);
``GCR (selection)`` its buffer alone, replayed with the unweighted loss as every other
policy is.
The ``+LA`` rows train with Logit Adjusted Softmax's loss (``logit_adjustment=1.0``, its
``tau``; ``LogitAdjustedLoss``, Huang et al., TMLR 2024) in place of the plain
cross-entropy, in the incoming and the replay steps alike: ``ER+LA`` is Reservoir with it
(the loss alone), ``CBRS+OC+LA`` and ``CB-GSS (step)+LA`` the class-balancing policies
with it.
``ER-ACE`` is Reservoir trained as ER-ACE (Caccia et al., ICLR 2022): the asymmetric
cross-entropy (``criterion="ace"``) in one SGD step on the incoming and the replay batch
(``joint=True``); ``ER (joint)`` is the same step with the plain cross-entropy, the
baseline ER-ACE's paper compares it with (``Reservoir`` takes a step of its own on the
replay batch after the incoming one: twice the steps). ``ER+MKD`` is Reservoir's
rehearsal with momentum knowledge distillation (Michel et al., ICML 2024) at the weight of
its paper's ER+MKD configurations, ``mkd_weight=5.5``, with its momentum 0.99 and
temperature 4; ``ER+MKD (w8)`` at 8, its code's command-line default. (Reports of earlier
versions name the weight-8 runs ``ER+MKD``: their ``policy_settings`` say which.)
``CSReL`` is the reducible-loss coreset (Tong et al., ICLR 2025) in
its streaming form, replayed as every other buffer is.
"""
for _label, _policy in (
    ("Reservoir", Policy("Reservoir")),
    ("Rand", Policy("Rand")),
    ("GSS-Greedy", Policy("GSS-Greedy", {"variant": "authors"})),
    ("GSS-IQP", Policy("GSS-IQP")),
    ("GSS-Clust", Policy("GSS-Clust", {"variant": "authors"})),
    ("FSS-Clust", Policy("FSS-Clust", {"variant": "authors"})),
    ("CBRS", Policy("CBRS")),
    ("GDumb", Policy("GDumb")),
    ("ER-MIR", Policy("Reservoir", {"retrieval": "mir"})),
    ("GSS+MIR", Policy("GSS-Greedy", {"variant": "authors", "retrieval": "mir"})),
    ("CB-GSS", Policy("CB-GSS")),
    ("CB-GSS (step)", Policy("CB-GSS", {"score_from": "step"})),
    ("CBRS+OC", Policy("CBRS", {"retrieval": "other-classes"})),
    ("OCS", Policy("OCS")),
    ("GCR", Policy("GCR")),
    ("GCR (selection)", Policy("GCR", {"replay_loss": "uniform"})),
    ("ER+LA", Policy("Reservoir", {"logit_adjustment": 1.0})),
    ("CBRS+OC+LA", Policy("CBRS", {"retrieval": "other-classes", "logit_adjustment": 1.0})),
    ("CB-GSS (step)+LA", Policy("CB-GSS", {"score_from": "step", "logit_adjustment": 1.0})),
    ("ER (joint)", Policy("Reservoir", {"joint": True})),
    ("ER-ACE", Policy("Reservoir", {"criterion": "ace", "joint": True})),
    ("ER+MKD", Policy("Reservoir", {"mkd_weight": 5.5})),
    ("ER+MKD (w8)", Policy("Reservoir", {"mkd_weight": 8.0})),
    ("CSReL", Policy("CSReL")),
):
    POLICIES.add(_label, _policy, builtin=True)


BUILTIN_POLICIES: tuple[str, ...] = POLICIES.builtin_names()
"""This package's policies (those added by :func:`register_policy` follow them)."""


def register_policy(label: str, *, method: str, **settings: Json) -> None:
    """Add a which-buffer policy: a row label and the keywords that make it.

    ``register_policy("Newest", method="Newest")``, or a registered method with settings
    of its own: ``register_policy("Newest+MIR", method="Newest", retrieval="mir")``,
    ``register_policy("Clust-1.5", method="GSS-Clust", growth=1.5)``. Whether the method
    exists and takes the options is checked before any run of ``python -m reproduce
    which-buffer``. Registering the same policy again does nothing.

    :param label: the row label and ``--policies`` name.
    :param method: a buffer method of the registry (``avalanche_gss.methods``).
    :param settings: run settings by their flat or namespaced names (``retrieval``,
        ``**{"replay.retrieval": "mir"}``), options of the method's buffer (``variant``,
        ``growth``, ...), or ``options``, a dict of them.
    :raises ValueError: an empty label, or one taken by another policy.
    """
    if not isinstance(label, str) or not label.strip():
        raise ValueError(f"a policy's label must be a non-empty string, got {label!r}")
    policy = Policy(method, dict(settings))
    if label in POLICIES:
        if POLICIES[label] == policy:
            return
        owner = "this package" if label in BUILTIN_POLICIES else "another policy"
        raise ValueError(f"policy label {label!r} is taken by {owner} "
                         f"({POLICIES[label].keywords()}); choose another")
    POLICIES.add(label, policy)


def policy_label(text: str, methods: Sequence[str] | None = None) -> str:
    """The policy a ``--policies`` value names: a label of :data:`POLICIES`, or a new one.

    ``METHOD:OPTION=VALUE,...`` (``"GSS-Clust:growth=1.5,replay.retrieval=mir"``)
    registers the policy of that method with those options and settings
    (:func:`parse_method_text`, :func:`register_policy`), labelled by the text itself.

    :param text: the command line's value.
    :param methods: the buffer methods a new policy may name (``None``: any, checked later).
    :return: the policy's label.
    :raises ValueError: neither a label nor ``METHOD:OPTION=VALUE,...`` of one of ``methods``,
        in one line.
    """
    if text in POLICIES:
        return text
    if ":" not in text:
        raise ValueError(f"unknown policy {text!r}; choose from "
                         f"{', '.join(map(repr, POLICIES))}, or give METHOD:OPTION=VALUE,...")
    method, keywords = parse_method_text(text, methods)
    register_policy(text, method=method, **keywords)
    return text


def parse_method_text(text: str, methods: Sequence[str] | None = None
                      ) -> tuple[str, dict[str, Json]]:
    """Read ``METHOD:OPTION=VALUE,...``: the method and the keywords that make its run.

    A bare name is one of the method's options (its buffer's own parameter,
    ``growth=1.5``); ``PART.NAME`` is a run setting of that part (``training.lr=0.1``,
    ``replay.batch_size=64``, ``replay.retrieval=mir``, ``loss.logit_adjustment=1``; the
    parts and their settings: ``avalanche_gss.reproduce.runs.settings``), so that an
    option never lands among the run settings, nor a setting among the options. Each
    value is read as a Python literal (``1.5``, ``3``, ``True``, ``None``, ``'a'``) where
    it is one, else as the string written.

    :param text: ``METHOD`` alone, or ``METHOD:KEY=VALUE,...``.
    :param methods: the buffer methods it may name (``None``: any, checked later).
    :return: the method and its keywords: ``{"options": {...}}`` where it sets any, and
        each setting by its ``PART.NAME``.
    :raises ValueError: a method not in ``methods``, or an item that is not
        ``OPTION=VALUE`` or ``PART.NAME=VALUE`` (each once), in one line.
    """
    method, colon, rest = (part.strip() for part in text.partition(":"))
    if methods is not None and method not in methods:
        raise ValueError(f"no buffer method {method!r} in {text!r}; choose from "
                         f"{', '.join(methods)}")
    options: dict[str, Json] = {}
    keywords: dict[str, Json] = {}
    for item in rest.split(",") if colon else ():
        key, equals, value = (part.strip() for part in item.partition("="))
        names = key.split(".")
        if (not equals or len(names) > 2 or not all(n.isidentifier() for n in names)
                or key in ("method", "options") or key in options or key in keywords):
            raise ValueError(f"{text!r}: {item.strip()!r} is not OPTION=VALUE or "
                             "PART.SETTING=VALUE (each once, an identifier other than "
                             "method and options)")
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            parsed = value
        (keywords if len(names) == 2 else options)[key] = parsed
    return method, {**({"options": options} if options else {}), **keywords}


@dataclass(frozen=True)
class ComparedStream:
    """One stream of the comparison: a registered stream, run with a protocol's settings.

    :param family: the figure panel it belongs to (``"imbalanced"`` for sequences 1-5;
        a CIFAR-10 stream shares its family with the digits' stream of the same
        construction: one run never holds both kinds).
    :param protocol: the protocol whose counts, learning rate and iterations per batch the
        runs use (:data:`~avalanche_gss.reproduce.experiments.protocols.TABLE1`...; a stream
        of one's own: :func:`register_stream_protocol`'s, else :data:`USER_PROTOCOL`).
    :param variant: the protocol's row keys for this stream (Table 4's ``sequence``).
    :param stream: the stream of :data:`avalanche_gss.streams.REGISTRY` it builds (with the
        protocol's counts); ``None``: the one its ``family`` names.
    :param data: the key of its :data:`KINDS` entry: its protocol's dataset (``"mnist"``:
        the digits with the MLP; ``"cifar10"``: CIFAR-10 with the reduced ResNet-18).
    """

    family: str
    protocol: Protocol
    variant: Mapping[str, int] = field(default_factory=dict)
    stream: str | None = None
    data: str = "mnist"

    @property
    def registered(self) -> str:
        """The name of the stream it builds in :data:`avalanche_gss.streams.REGISTRY`."""
        return self.stream or self.family

    @property
    def blur(self) -> float | None:
        """The share each task keeps when its stream blurs the boundaries, else ``None``."""
        blur = REGISTRY[self.registered].facts.get("blur")
        return None if blur is None else float(blur)

    @property
    def blurred(self) -> bool:
        """Whether its stream blurs the task boundaries."""
        return self.blur is not None


BUILTIN_STREAMS: dict[str, ComparedStream] = {
    "disjoint": ComparedStream("disjoint", TABLE1),
    "permuted": ComparedStream("permuted", TABLE2),
    **{f"imbalanced-{k}": ComparedStream("imbalanced", TABLE4, {"sequence": k})
       for k in range(1, 6)},
    "blurry": ComparedStream("blurry", TABLE1),
    "cifar10-disjoint": ComparedStream("disjoint", TABLE3, data="cifar10"),
    "cifar10-blurry": ComparedStream("blurry", TABLE3, data="cifar10"),
}
"""This package's streams. On the digits, with the MLP: disjoint balanced (Table 1's),
permuted (Table 2's), imbalanced sequences 1-5 (Table 4's) and blurry disjoint (Table 1's
stream, boundaries blurred as in the paper's appendix, on MNIST here). On CIFAR-10, with
the reduced ResNet-18 and Table 3's protocol (2,000 samples per task, learning rate 0.01):
``cifar10-disjoint`` (Split CIFAR-10, 5 tasks of 2 classes: Table 3's stream) and
``cifar10-blurry`` (the same stream blurred as the digits' blurry one; the paper's
appendix blurs it too, with 1,000 samples per task and M = 500, here Table 3's counts so
that both CIFAR-10 columns share M)."""

USER_PROTOCOL = TABLE1
"""The protocol a stream of one's own runs with unless it brings its own
(:func:`register_stream_protocol`): Table 1's counts (``samples_per_task``, which its
definition must take), learning rate, iterations per batch and model, on the digits."""

_STREAM_PROTOCOLS: dict[str, Protocol] = {}


def register_stream_protocol(stream: str, protocol: Protocol) -> Protocol:
    """Have which-buffer run the stream of one's own ``stream`` with ``protocol``; return it.

    In the module that registers the stream (:func:`avalanche_gss.streams.register_stream`,
    given to ``--import``): the runs on ``stream`` take the protocol's counts (its
    ``stream``: a :class:`~avalanche_gss.reproduce.runs.protocol_streams.ProtocolStream`
    naming ``stream``, whose count options the stream's definition must take), its learning
    rate, iterations per batch and model, on its dataset's kind of data
    (:data:`KINDS`: ``"mnist"`` or ``"cifar10"``). Without it, :data:`USER_PROTOCOL`.

    :param stream: the registered stream's name (not one of this package's).
    :param protocol: its protocol (``paper_ref`` empty: one's own).
    :raises ValueError: a stream of this package, a protocol whose stream builds another
        stream, or a dataset with no kind of streams.
    """
    if stream in BUILTIN_STREAMS or stream in REGISTRY.builtin_names():
        raise ValueError(f"{stream!r} is one of this package's streams; its protocol is fixed")
    if protocol.stream.name != stream:
        raise ValueError(f"the protocol of stream {stream!r} builds {protocol.stream.name!r}: "
                         f"give it ProtocolStream({stream!r}, ...)")
    if protocol.dataset not in KINDS:
        raise ValueError(f"the protocol of stream {stream!r} runs on {protocol.dataset!r}; "
                         f"give one of {', '.join(KINDS)}")
    _STREAM_PROTOCOLS[stream] = protocol
    return protocol


class StreamTable(Mapping[str, ComparedStream]):
    """The streams ``--streams`` offers: this package's, then those registered by name.

    A stream registered from code of one's own
    (:func:`avalanche_gss.streams.register_stream`, a module given to ``--import``) is one
    of them from then on: its family is its name, and it runs with its protocol
    (:func:`register_stream_protocol`), else :data:`USER_PROTOCOL`.
    """

    def __init__(self, builtin: Mapping[str, ComparedStream]) -> None:
        self._builtin = dict(builtin)

    def _user(self) -> tuple[str, ...]:
        own = set(REGISTRY.builtin_names())
        return tuple(n for n in REGISTRY.names() if n not in own and n not in self._builtin)

    def __getitem__(self, name: str) -> ComparedStream:
        if name in self._builtin:
            return self._builtin[name]
        if name in self._user():
            protocol = _STREAM_PROTOCOLS.get(name, USER_PROTOCOL)
            return ComparedStream(name, protocol, stream=name, data=protocol.dataset)
        raise KeyError(name)

    def __iter__(self) -> Iterator[str]:
        return iter((*self._builtin, *self._user()))

    def __len__(self) -> int:
        return len(self._builtin) + len(self._user())


STREAMS: Mapping[str, ComparedStream] = StreamTable(BUILTIN_STREAMS)
"""The streams, by ``--streams`` name: :data:`BUILTIN_STREAMS`, then each stream of
:data:`avalanche_gss.streams.REGISTRY` registered from code of one's own."""

DEFAULT_STREAMS: tuple[str, ...] = tuple(name for name, s in BUILTIN_STREAMS.items()
                                         if s.data == "mnist")
"""The streams run when ``--streams`` is not given: those on the digits."""

STREAM_GROUPS: dict[str, tuple[str, ...]] = {
    "imbalanced": tuple(name for name, s in BUILTIN_STREAMS.items()
                        if s.family == "imbalanced"),
}
"""``--streams`` names that stand for several streams."""


def expand_streams(names: Sequence[str] | None) -> tuple[str, ...]:
    """The streams that ``--streams`` names, in order and with repeats kept.

    :param names: the ``--streams`` values; a group of :data:`STREAM_GROUPS` stands for its
        streams; ``None`` (not given): :data:`DEFAULT_STREAMS`.
    """
    if names is None:
        return DEFAULT_STREAMS
    return tuple(s for name in names for s in STREAM_GROUPS.get(name, (name,)))

BUFFER_SIZES = (100, 300, 500)
"""Default buffer sizes ``M``."""

SEEDS = (0, 1, 2, 3)
"""Default seeds: four, so that the report can check its recommendation on two halves of
two seeds each (each half's pick in the other half's group) and the paired comparisons
rest on 2 x 4 = 8 pairs per column (96 over the default 24 columns)."""

TUNE_SEEDS: tuple[int, ...] = (100, 101)
"""The seeds ``--lr-grid`` tunes on by default: apart from the reported seeds (0-3), so that
no reported run chose its own learning rate."""


class QuickChoices(TypedDict, total=False):
    """What ``--quick`` replaces (or adds) among which-buffer's choices.

    :param seeds: the seeds.
    :param buffer_sizes: the buffer sizes ``M``.
    :param samples_per_task: training samples per task (the imbalanced sequence's largest
        task's).
    :param streams: the streams (names of :data:`STREAMS`).
    """

    seeds: tuple[int, ...]
    buffer_sizes: tuple[int, ...]
    samples_per_task: int
    streams: tuple[str, ...]


QUICK: QuickChoices = {
    "seeds": (0,), "buffer_sizes": (100,), "samples_per_task": 50,
    "streams": ("disjoint", "permuted", "imbalanced-1", "blurry"),
}
"""What ``--quick`` runs: one seed, M = 100, one stream per family, and 50 samples per
task (the imbalanced sequence's largest task; its others keep the 10:1 ratio), so that
every policy on the four streams takes well under a minute on one CPU core."""

CIFAR_BUFFER_SIZES = (1000,)
"""Default buffer sizes ``M`` on the CIFAR-10 streams: Table 3's (the paper found no
sensible accuracy below 1,000)."""

CIFAR_QUICK: QuickChoices = {"seeds": (0,), "buffer_sizes": (20,), "samples_per_task": 10}
"""What ``--quick`` runs on the CIFAR-10 streams: one seed, M = 20 and 10 samples per task
(one batch; Table 3: 2,000 and M = 1,000; ``table3 --quick``: 20 and M = 40), so that a
policy's quick run of the ResNet-18 takes about a second on one CPU core (on the generated
stand-in's smaller images) and the command, every policy on both streams, well under a
minute."""


@dataclass(frozen=True)
class StreamKind:
    """The streams of one dataset: the data they fit, their defaults.

    :param label: how messages name them (``"the digits streams"``).
    :param datasets: the ``--data`` names that fit them (any ``PATH.npz`` fits too).
    :param buffer_sizes: default buffer sizes.
    :param quick: what ``--quick`` replaces or adds (seeds, buffer sizes, streams,
        ``samples_per_task``).
    :param paper_samples_per_task: the protocol's samples per task, which a ``--quick`` run
        records as a deviation when it runs fewer (``None``: not recorded).
    """

    label: str
    datasets: tuple[str, ...]
    buffer_sizes: tuple[int, ...]
    quick: QuickChoices
    paper_samples_per_task: int | None = None


KINDS: dict[str, StreamKind] = {
    "mnist": StreamKind("the digits streams", ("mnist", "mnist-5k"), BUFFER_SIZES, QUICK),
    "cifar10": StreamKind("the CIFAR-10 streams", ("cifar10",), CIFAR_BUFFER_SIZES,
                          CIFAR_QUICK, 2000),
}
"""The kinds of streams, by :attr:`ComparedStream.data`. One invocation runs streams of one
kind: the streams share the data (``--data``), the buffer sizes and the table's columns."""


def stream_problem(streams: Sequence[str], data: str | None) -> str | None:
    """Why ``streams`` cannot run together on ``data``, in one line, or ``None``.

    :param streams: the chosen streams (names of :data:`STREAMS`, groups expanded).
    :param data: the ``--data`` value (a dataset name or a ``.npz`` path), or ``None``.
    :return: streams of several kinds (naming each kind's streams), or a ``--data`` name
        that does not fit their kind (naming the value and the names that fit).
    """
    lacking = [name for name in streams if name not in BUILTIN_STREAMS
               and not set(STREAMS[name].protocol.stream.counted)
               <= set(REGISTRY[STREAMS[name].registered].options)]
    if lacking:
        counted = " and ".join(STREAMS[lacking[0]].protocol.stream.counted)
        return (f"argument --streams: {lacking[0]} takes no {counted} option: a stream of "
                "one's own runs with its protocol's counts (register_stream_protocol; "
                f"without one, {USER_PROTOCOL.paper_ref}'s)")
    kinds: dict[str, list[str]] = {}
    for name in streams:
        kinds.setdefault(STREAMS[name].data, []).append(name)
    if len(kinds) > 1:
        parts = [f"{', '.join(names)}: {KINDS[kind].label}" for kind, names in kinds.items()]
        return ("argument --streams: " + "; ".join(parts) + "; they differ in data, model "
                "and default M: give streams of one kind per run")
    if data is None or data.lower().endswith(".npz") or not kinds:
        return None
    kind = KINDS[next(iter(kinds))]
    if data not in kind.datasets:
        return (f"argument --data: {data} does not fit {', '.join(streams)} "
                f"({kind.label}); give {' or '.join(kind.datasets)} or a PATH.npz")
    return None


COMPOSITION_STREAMS = ("disjoint", "imbalanced")
"""Streams (names or families) whose runs trace the buffer's composition; the composition
report shows the first disjoint stream run (the digits' or CIFAR-10's: one kind per run)
and the first imbalanced sequence run."""
