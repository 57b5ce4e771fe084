"""A report: what an experiment found, as its JSON, CSV and Markdown files record it.

:class:`Report` holds the title, the data, the command, the protocol, the rows and the
provenance; :meth:`Report.to_json` is the JSON object the files hold (the keys users
read: ``experiment``, ``title``, ``dataset``, ``data_source``, ``command``, ``protocol``,
``provenance``, ``rows``, ``wall_seconds``...). :class:`SettingsFacts` reads what the
protocol says of the runs' settings (learning rate, iterations, batch sizes, each
method's own settings) from the runs themselves.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from avalanche_gss.reproduce.json_types import Json, JsonObject
from avalanche_gss.reproduce.runs.identity import data_identity
from avalanche_gss.reproduce.runs.training import BUFFER_METHODS, RunSettings, settings_dict
from avalanche_gss.streams import ArrayDataset

__all__ = ["DataFacts", "Report", "ReportRow", "SettingsFacts", "jsonable", "replay_protocol",
           "shared_setting"]

PER_RUN = ("method", "buffer_size", "seed", "variant", "update", "n", "batch_size", "retrieval")
"""Settings that tell one run of an experiment from another (not the protocol's)."""


class ReportRow(Protocol):
    """A row of a report: anything that records itself as a JSON object."""

    def to_dict(self) -> JsonObject:
        """The row as the report's JSON records it."""


def jsonable(value: object) -> Json:
    """``value`` as JSON data: tuples as lists, mappings and sequences element-wise.

    :param value: JSON-like data (tuples, lists, dicts, scalars).
    :raises TypeError: a value that is none of these (one line naming it).
    """
    if isinstance(value, (tuple, list)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    raise TypeError(f"not JSON data: {value!r} ({type(value).__name__})")


@dataclass(frozen=True)
class DataFacts:
    """What every report says of its data: name, source, content hash, verification.

    :param dataset: the data's name (``"mnist"``, ``"synthetic"``).
    :param source: where they came from (``data_source``).
    :param sha256: their content hash (``data_sha256``; ``None``: none, e.g. synthetic).
    :param verified_as: what they were verified to be (``data_verified_as``).
    :param verification: how (``data_verification``).
    :param checked: the report holds the hash and verification keys (``False``: data made
        by the experiment itself, which has none).
    """

    dataset: str
    source: str
    sha256: str | None = None
    verified_as: str | None = None
    verification: str | None = None
    checked: bool = True

    @classmethod
    def of(cls, data: ArrayDataset) -> DataFacts:
        """The facts of loaded data (their hash: :func:`.identity.data_identity`).

        :param data: the data.
        """
        sha256 = data_identity(data)["data_sha256"]
        return cls(data.name, data.source, sha256, data.verified_as, data.verification)

    def to_json(self) -> JsonObject:
        """The report's data keys."""
        facts: JsonObject = {"dataset": self.dataset, "data_source": self.source}
        if self.checked:
            facts.update(data_sha256=self.sha256, data_verified_as=self.verified_as,
                         data_verification=self.verification)
        return facts


def shared_setting(settings: Sequence[RunSettings], name: str) -> Json:
    """The value of setting ``name`` that every run shares, read from the runs.

    :param settings: the runs' settings.
    :param name: a :class:`RunSettings` field (``"batch_size"``, ``"replay_batch_size"``).
    :raises ValueError: the runs differ in it (one line naming the setting and values).
    """
    values = list(dict.fromkeys(getattr(s, name) for s in settings))
    if len(values) != 1:
        raise ValueError(f"the runs differ in {name} ({values}); no single value to report")
    return jsonable(values[0])


def replay_protocol(settings: Sequence[RunSettings]) -> JsonObject:
    """The batch sizes a report's protocol names, read from the runs.

    ``batch_size``; ``replay_batch_size``, the buffer methods' (the baselines replay
    nothing); ``mir_candidates`` where a run retrieves with MIR. Each is the value every
    run it concerns shares, or ``None`` where rows of their own set them apart (a
    ``--methods`` text with ``replay.batch_size``): the rows then say it.

    :param settings: the runs' settings.
    """

    def common(runs: Sequence[RunSettings], name: str) -> Json:
        values = list(dict.fromkeys(getattr(s, name) for s in runs))
        return jsonable(values[0]) if len(values) == 1 else None

    buffered = [s for s in settings if s.method in BUFFER_METHODS] or settings
    mir = [s for s in settings if s.retrieval == "mir"]
    return {"batch_size": common(settings, "batch_size"),
            "replay_batch_size": common(buffered, "replay_batch_size"),
            **({"mir_candidates": common(mir, "mir_candidates")} if mir else {})}


@dataclass(frozen=True)
class SettingsFacts:
    """What a report's protocol says of the runs' settings, read from the runs.

    :param by_method: each method's settings as run, beyond those that tell one run from
        another (``settings_by_method``; a run's options count as settings of their own).
    :param base: the method whose learning rate and iterations are the protocol's.
    """

    by_method: dict[str, JsonObject]
    base: str

    @classmethod
    def of(cls, settings: Sequence[RunSettings], prefer: Sequence[str] = ()) -> SettingsFacts:
        """The facts of the runs' settings.

        :param settings: every run's settings, in plan order.
        :param prefer: methods whose settings are the protocol's, first found first (none
            found: the first method's).
        """
        by_method: dict[str, JsonObject] = {}
        for s in settings:
            values = settings_dict(s)
            flat = {**{k: v for k, v in values.items() if k != "options"}, **values["options"]}
            by_method.setdefault(s.method, {k: jsonable(v) for k, v in flat.items()
                                            if k not in PER_RUN})
        base = next((m for m in by_method if m in prefer), next(iter(by_method)))
        return cls(by_method, base)

    def value(self, key: str) -> Json:
        """The protocol's value of ``key`` (``"lr"``, ``"n_iter"``, ``"model"``).

        :param key: a setting of :attr:`by_method`.
        """
        return self.by_method[self.base][key]

    def overrides(self, lr: Json = None, n_iter: Json = None) -> dict[str, JsonObject]:
        """Each method's learning rate and iterations where they are not the protocol's.

        :param lr: the protocol's learning rate (``None``: the base method's).
        :param n_iter: its iterations per batch (``None``: the base method's).
        """
        base = {"lr": self.value("lr") if lr is None else lr,
                "n_iter": self.value("n_iter") if n_iter is None else n_iter}
        found = {m: {k: s[k] for k in ("lr", "n_iter") if s[k] != base[k]}
                 for m, s in self.by_method.items()}
        return {m: o for m, o in found.items() if o}


@dataclass
class Report:
    """What an experiment found, as its files record it.

    :param experiment: the experiment's name (the files' stem unless :attr:`stem`).
    :param title: one line saying what it shows (``None``: no title key).
    :param data: its data.
    :param command: the command line that made it.
    :param protocol: the protocol as run (learning rate, buffer sizes, seeds, stream...).
    :param rows: its rows (each :meth:`~ReportRow.to_dict`).
    :param provenance: what produced it (versions, device, threads; ``None``: not said).
    :param extra: the experiment's own top-level keys, after the rows.
    :param diverged: a label for each run that diverged (the exit status says so).
    :param wall_seconds: the experiment's wall time (the runner sets it).
    """

    experiment: str
    title: str | None
    data: DataFacts
    command: str
    protocol: JsonObject
    rows: Sequence[ReportRow]
    provenance: JsonObject | None = None
    extra: JsonObject = field(default_factory=dict)
    diverged: list[str] = field(default_factory=list)
    wall_seconds: float | None = None

    def timed(self, seconds: float) -> Report:
        """The report with its wall time.

        :param seconds: the experiment's wall time.
        """
        return dataclasses.replace(self, wall_seconds=seconds)

    def to_json(self) -> JsonObject:
        """The JSON object of the report's ``.json`` file."""
        report: JsonObject = {"experiment": self.experiment}
        if self.title is not None:
            report["title"] = self.title
        report.update(self.data.to_json())
        report["command"] = self.command
        report["protocol"] = self.protocol
        if self.provenance is not None:
            report["provenance"] = self.provenance
        report["rows"] = [r.to_dict() for r in self.rows]
        report.update(self.extra)
        if self.wall_seconds is not None:
            report["wall_seconds"] = self.wall_seconds
        return report
