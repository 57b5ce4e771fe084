"""BufferTrace records what the buffer holds, per task, along the stream."""

import pytest

from avalanche_gss.diagnostics import BufferTrace
from avalanche_gss.reproduce.runs.training import RunSettings, run


@pytest.mark.parametrize("method", ["Reservoir", "GSS-Greedy", "GSS-IQP"])
def test_trace_counts_match_the_final_buffer(tiny_split, method):
    trace = BufferTrace(None, tiny_split.task_classes, every=60)
    result = run(RunSettings(method=method, buffer_size=40, n_iter=1), tiny_split,
                 plugins=[trace])
    assert [r["samples"] for r in trace.records] == [60, 120, 180, 240, 300]
    assert all(sum(r["task_counts"]) == r["size"] for r in trace.records)
    assert trace.records[-1]["task_counts"] == result.extras["buffer_task_counts"]
    # The first 60 samples are task 0: the buffer can hold nothing else yet.
    assert trace.records[0]["task_counts"][1:] == [0, 0, 0, 0]
    assert ("score_q10_q50_q90" in trace.records[-1]) == (method == "GSS-Greedy")
    assert all(0.0 <= r["admitted_share"] <= 1.0 for r in trace.records)
    assert any(r["admitted_share"] > 0 for r in trace.records[1:])  # it does take samples


def test_trace_needs_a_positive_period(tiny_split):
    with pytest.raises(ValueError, match="every"):
        BufferTrace(None, tiny_split.task_classes, every=0)
