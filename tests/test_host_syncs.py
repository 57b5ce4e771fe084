"""The per-batch path's host syncs, counted as a GPU run would make them (on any machine).

``benchmarks/host_syncs.py`` tracks which tensors would live on the device and counts
the calls that would make the host wait for it. The pins below are what the path makes
now; a change that adds a sync to every online batch fails here (raise a pin only with a
reason). What remains: ``finite_loss``'s check of each step's loss (2 per iteration),
and, for GSS-Greedy, the scores the host-side decision reads (3 per batch); CBRS and
CB-GSS read the stored and the new labels for their class rule (2 per batch), CB-GSS
also the scores (3 more). OCS reads which gradients are finite and the scores, and copies
their indices to the device (3 per batch). GCR reads the classes at each selection and,
at each replay step, copies the drawn samples' weights and logits to the device (2 per
step, 6 per batch).
"""

import pytest
import torch
from helpers import benchmark_script


def _host_syncs():
    return benchmark_script("host_syncs", register=True)


def test_the_counter_sees_reads_masks_and_blocking_copies():
    hs = _host_syncs()
    host = torch.arange(4)
    with hs.SyncCounter([host]) as counter:
        dev = torch.zeros(4, device="cpu")  # a factory told its device: a device tensor
        bool(host.sum() > 0)  # host only: no sync
        moved = host.to(torch.device("cpu"))  # blocking H2D copy
        host.to(torch.device("cpu"), non_blocking=True)  # no sync
        float(dev.sum())  # read
        dev[dev > 0]  # boolean mask on the device: data-dependent shape
        dev[host]  # host index: copied to the device
        moved.cpu()  # read
    kinds = [kind for kind, _, _ in counter.events]
    assert kinds == ["h2d", "read", "shape", "h2d", "read"]
    assert all("test_host_syncs.py" in where for _, _, where in counter.events)


@pytest.mark.parametrize(("method", "pin"), [("Reservoir", 6.0), ("GSS-Greedy", 9.0),
                                             ("GSS-IQP", 7.5), ("CBRS", 8.0),
                                             ("CB-GSS", 11.0), ("OCS", 9.0), ("GCR", 13.0)])
def test_per_batch_syncs_are_pinned(method, pin):
    # (GCR's first selection waits for its recent buffer: 12 batches, then replay steps)
    warmup = 12 if method == "GCR" else 6
    result = _host_syncs().count_run(method, warmup=warmup, batches=4, mem_size=30)
    assert result["per_batch"] <= pin, result["events"]
    finite = sum(v for where, kinds in result["events"].items() if "finite_loss" in where
                 for v in kinds.values())
    assert finite == 2 * result["n_iter"] * result["batches"]  # the steps' loss checks
