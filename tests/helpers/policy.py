"""A user's policy module: a buffer method and a which-buffer policy it registers by name."""

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


@contextmanager
def registry_restored() -> Iterator[None]:
    """Leave the method and policy registries, ``sys.modules`` and the hashes as they were.

    What a test registers or imports (its ``newest_``, ``ep_`` and ``mine_`` modules) is
    gone afterwards, and the hashes this process keeps of the code are recomputed.
    """
    from avalanche_gss import methods
    from avalanche_gss.reproduce.experiments import policies
    from avalanche_gss.reproduce.runs import identity, own_code
    from avalanche_gss.reproduce.runs.cache import module_sha256

    tables: list[dict[str, Any]] = [methods._USER, methods._PLUGIN_MODULES, own_code._ORIGIN,
                                     own_code._IMPORTED, own_code._LOADED,
                                     policies._STREAM_PROTOCOLS]
    saved = [dict(table) for table in tables]
    registered = dict(methods.REGISTRY.items())
    saved_policies = policies.POLICIES.names()
    plugins, modules = list(methods._PLUGINS), set(sys.modules)
    try:
        yield
    finally:
        for table, before in zip(tables, saved, strict=True):
            table.clear()
            table.update(before)
        for name in set(methods.REGISTRY.names()) - set(methods.REGISTRY.builtin_names()):
            methods.REGISTRY.remove(name)
        for label in set(policies.POLICIES.names()) - set(saved_policies):
            policies.POLICIES.remove(label)
        for name, method in registered.items():
            if name not in methods.REGISTRY:
                methods.REGISTRY.add(name, method)
        methods._PLUGINS[:] = plugins
        for name in set(sys.modules) - modules:
            if name.startswith(("newest_", "ep_", "mine_")):
                del sys.modules[name]
        module_sha256.cache_clear()
        for cached in ("_own_imports", "_file_sha256"):
            getattr(getattr(identity, cached, None), "cache_clear", lambda: None)()
