"""Everything an experiment of one's own needs, from one module.

An experiment is a :class:`Experiment` (its ``plan``, ``report`` and ``render``; a
``stages`` generator for runs planned from earlier results) registered by name with
:func:`register` in a module given to ``--import``; ``examples/my_experiment.py`` is one.
A table of runs like the paper's is a :class:`Protocol` run by :class:`Table`; a stream of
one's own brings its protocol with :func:`register_stream_protocol`; a which-buffer row is
:func:`register_policy`. The names below are the harness's own, re-exported: their
documentation is where they are defined.
"""

from __future__ import annotations

from avalanche_gss.reproduce.common import (
    Choices,
    command,
    prog_of,
    resolve_choices,
    resolve_data,
    settings_for,
)
from avalanche_gss.reproduce.experiments.policies import register_policy, register_stream_protocol
from avalanche_gss.reproduce.experiments.protocols import PROTOCOLS, TABLE1, Protocol
from avalanche_gss.reproduce.experiments.registry import register
from avalanche_gss.reproduce.experiments.tables import Table
from avalanche_gss.reproduce.json_types import Json, JsonObject
from avalanche_gss.reproduce.options import Options
from avalanche_gss.reproduce.reports.report import DataFacts, Report, shared_setting
from avalanche_gss.reproduce.reports.rows import Row, group_rows
from avalanche_gss.reproduce.reports.writing import format_cell, provenance, table_csv
from avalanche_gss.reproduce.runner import Experiment, Rendered, Stages
from avalanche_gss.reproduce.runs.identity import data_identity
from avalanche_gss.reproduce.runs.jobs import RunJob, StreamSpec
from avalanche_gss.reproduce.runs.planning import CodeIdentity, PlannedRun, job_base, run_result
from avalanche_gss.reproduce.runs.protocol_streams import ProtocolStream
from avalanche_gss.reproduce.runs.training import RunSettings, run_label

__all__ = ["PROTOCOLS", "TABLE1", "Choices", "CodeIdentity", "DataFacts", "Experiment",
           "Json", "JsonObject", "Options", "PlannedRun", "Protocol", "ProtocolStream", "Rendered",
           "Report", "Row", "RunJob", "RunSettings", "Stages", "StreamSpec", "Table",
           "command", "data_identity", "format_cell", "group_rows", "job_base", "prog_of",
           "provenance", "register", "register_policy", "register_stream_protocol",
           "resolve_choices", "resolve_data", "run_label", "run_result", "settings_for",
           "shared_setting", "table_csv"]
