"""A stream as an experiment's protocol runs it: a registered stream and its counts.

The engine builds a job's stream from this alone (:func:`~avalanche_gss.reproduce.runs.jobs.
build_split`): the counts travel in the job, resolved when the experiment plans it, so a
stream of one's own brings its own and the engine looks no protocol up by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from avalanche_gss.reproduce.json_types import Json, JsonObject, json_int
from avalanche_gss.streams.registry import REGISTRY, OptionValue

if TYPE_CHECKING:  # the data's types only: defining a protocol imports no torch
    from avalanche_gss.streams import ArrayDataset, TaskSplit

__all__ = ["ProtocolStream", "Variant", "fit_count"]

Variant = Mapping[str, OptionValue]
"""A protocol's row keys for one row (Table 4's ``sequence``; ``--quick``'s
``samples_per_task``); the keys its stream takes as options (any registered stream's, so
not a closed set) are passed on to it."""


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

    def config(self) -> JsonObject:
        """The stream as a job's config holds it (:meth:`from_config`'s inverse)."""
        config: JsonObject = {"name": self.name, "samples_per_task": self.samples_per_task,
                              "pool": self.pool}
        if self.minor is not None:
            config["minor"] = self.minor
        return config

    @classmethod
    def from_config(cls, config: Mapping[str, Json]) -> ProtocolStream:
        """The stream a job's config describes (:meth:`config`).

        :param config: ``{"name", "samples_per_task", "pool"[, "minor"]}``.
        :raises ValueError: a count that is not a positive int, or another pool.
        """
        counts = {k: config.get(k) for k in ("samples_per_task", "minor")}
        for key, value in counts.items():
            if value is None and key == "minor":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"a protocol stream's {key} must be a positive int, got "
                                 f"{value!r}")
        pool = config.get("pool", "classes")
        if pool not in ("classes", "all"):
            raise ValueError(f"a protocol stream's pool must be 'classes' or 'all', got {pool!r}")
        return cls(str(config["name"]), json_int(counts["samples_per_task"]),
                   None if counts["minor"] is None else json_int(counts["minor"]),
                   "all" if pool == "all" else "classes")

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
        tasks = {k: options.get(k, definition.options.get(k, default))
                 for k, default in (("n_tasks", 5), ("classes_per_task", 2))}
        options.update(self.counts(data, variant, deviations, **tasks))
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

    def counts(self, data: ArrayDataset, variant: Variant, deviations: list[str],
               n_tasks: OptionValue = 5, classes_per_task: OptionValue = 2
               ) -> dict[str, OptionValue]:
        """The stream's sample counts for ``data``, the shrunk ones named in ``deviations``.

        :param data: the dataset.
        :param variant: the row's keys (its ``samples_per_task``, if any).
        :param deviations: where a count the data cannot give is recorded.
        :param n_tasks: the stream's tasks (pool ``"classes"``: each draws from its classes).
        :param classes_per_task: the classes of each task.
        """
        wanted = variant.get("samples_per_task", self.samples_per_task)
        if isinstance(wanted, bool) or not isinstance(wanted, int):
            raise ValueError(f"samples_per_task must be an int, got {wanted!r}")
        if self.pool == "all":
            available = len(data.y_train)
        else:
            available = _class_counts(data, json_int(n_tasks),
                                      json_int(classes_per_task))
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
