r"""A stream of one's own that brings its own protocol, in one file.

    avalanche-gss --import own_protocol_stream.py which-buffer --streams three-tasks \
        --quick --policies Reservoir CBRS --out OUT

(run from this file's folder; drop ``--policies`` to compare every buffer policy, and
``--quick`` for the full protocol). The stream: three class-disjoint tasks of two digit
classes each, 500 training samples per task, trained at learning rate 0.1, where a stream
of one's own without a protocol runs with Table 1's (five tasks of 1,000 at 0.05).
``register_stream`` makes the stream a name, ``register_stream_protocol`` gives which-buffer
its counts, learning rate, iterations per batch and model; the report names the stream with
its own protocol's settings. ``--quick`` runs every stream of the digits at 50 samples per
task.
"""

import dataclasses

from avalanche_gss.reproduce.experiments.policies import register_stream_protocol
from avalanche_gss.reproduce.experiments.protocols import Protocol
from avalanche_gss.reproduce.runs.protocol_streams import ProtocolStream
from avalanche_gss.streams import REGISTRY, register_stream

DISJOINT = REGISTRY["disjoint"]

register_stream("three-tasks", dataclasses.replace(
    DISJOINT, description="three class-disjoint tasks of 2 classes",
    options={**DISJOINT.options, "n_tasks": 3}))

register_stream_protocol("three-tasks", Protocol(
    name="three-tasks", title="three disjoint tasks of {data}", paper_ref="",
    stream=ProtocolStream("three-tasks", 500), methods=(), buffer_sizes=(), lr=0.1))
