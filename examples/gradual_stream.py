r"""A stream of one's own, in one file: tasks that drift into each other gradually.

    avalanche-gss --import gradual_stream.py which-buffer --streams gradual --quick \
        --policies Reservoir CBRS --out OUT

(run from this file's folder; drop ``--policies`` to compare every buffer policy, and
``--quick`` for the full protocol). The command registers the stream by importing this
file, in every worker process too; which-buffer then runs it as it runs its own streams,
with Table 1's protocol on the digits (its counts, learning rate and model), and names it
in the report (``OUT/which_buffer.md``). The runs' cache key holds the stream's name and
options, and the hash of any code of one's own that builds it (here the package's
transform builds it): edit the window and the runs are new.

The stream: Table 1's disjoint tasks (5 tasks of 2 classes), where around each boundary
the last samples of a task and the first of the next interleave, the next task's share
growing linearly from none to all across the window
(:func:`avalanche_gss.streams.gradual_tasks`). ``WINDOW`` is the share of a task that
blends: 1.0 would make the whole stream one ramp.
"""

from avalanche_gss.streams import REGISTRY, gradual_drift, register_stream

WINDOW = 0.5
"""Share of the smaller of two neighbouring tasks that blends into the other."""

register_stream("gradual", gradual_drift(REGISTRY["disjoint"], window=WINDOW))
