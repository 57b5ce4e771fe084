"""The library never changes process-wide torch settings behind the user's back."""

from __future__ import annotations

import torch

from avalanche_gss.methods.clust import GSSClustBuffer
from avalanche_gss.methods.gss_greedy import GSSGreedyBuffer
from avalanche_gss.methods.gss_iqp import GSSIQPBuffer
from avalanche_gss.models import MLP
from avalanche_gss.selection.iqp import select_iqp


def test_selectors_and_buffers_never_set_torch_threads(monkeypatch):
    calls: list[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    g = torch.Generator().manual_seed(0)
    u = torch.randn(30, 5, generator=g)
    select_iqp(u @ u.T, 10, solver="fast", restarts=2)
    model = MLP(16, (8,), 3)
    x, y = torch.rand(40, 1, 4, 4, generator=g), torch.randint(0, 3, (40,), generator=g)
    for buf in (GSSIQPBuffer(10, recent_size=20), GSSClustBuffer(10, recent_size=20),
                GSSGreedyBuffer(10)):
        for i in range(0, 40, 10):
            buf.add(x[i : i + 10], y[i : i + 10], model)
    assert calls == []
