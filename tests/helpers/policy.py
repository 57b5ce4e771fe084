"""A user's policy module: a buffer method and a which-buffer policy it registers by name."""

from pathlib import Path

POLICY = '''"""Newest: the buffer keeps the newest samples of the stream."""
import torch

from avalanche_gss.buffers import OnlineBuffer
from avalanche_gss.methods import Method, register
from avalanche_gss.reproduce.experiments.policies import register_policy
from avalanche_gss.training import BufferStrategy

NEWEST = True  # False: the first samples stay instead


class NewestBuffer(OnlineBuffer):
    def _assign(self, rows, model):
        b, m = len(rows), self.max_size
        position = torch.arange(self.n_seen, self.n_seen + b)
        if NEWEST:
            slots = position % m
            slots[: max(0, b - m)] = -1  # a batch larger than the buffer keeps its tail
        else:
            slots = torch.where(position < m, position, -1)
        return slots, None


class Newest(BufferStrategy):
    buffer_class = NewestBuffer


register(Method("NAME", NewestBuffer, Newest))
register_policy("NAME", method="NAME")
'''


def write_policy(folder: Path, module: str, name: str = "Newest") -> Path:
    """Write the policy module ``module``.py, registering method and policy ``name``."""
    path = folder / f"{module}.py"
    path.write_text(POLICY.replace("NAME", name))
    return path
