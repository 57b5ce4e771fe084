"""Exact resume of an online run: the training state as tensors, written atomically.

:func:`train_resumable` trains a stream in chunks of ``every`` experiences and saves the
state after each chunk (:func:`save_state`); started again with the same arguments after
a crash or a ``SIGKILL``, it loads the last state (:func:`load_state`) and trains only
the experiences after it, so the run ends with the same model, buffer and accuracy as
an uninterrupted one (bit for bit on CPU)::

    strategy = GSSIQP(model=model, optimizer=optimizer, mem_size=300, seed=0)
    train_resumable(strategy, bench.train_stream, "run.ckpt", every=100)

The state (:func:`strategy_state_dict`) holds tensors, numbers and strings only: the
model's and the optimizer's ``state_dict``, the ``state_dict`` of every plugin that has
one (buffer samples, scores, recent buffer, clustering state and every generator the
selectors and the replay draw from), the Avalanche clock's counters and the global RNGs
(torch, CUDA, NumPy, Python). It is loaded with ``torch.load(weights_only=True)``, which
builds no arbitrary Python object: a checkpoint of unknown origin cannot run code when
loaded. The file is a header line, the SHA-256 of the rest, then ``torch.save``'s output
(:func:`read_state` checks the checksum before anything is unpickled). A file is written
to a temporary name in the same folder, synced and renamed over the previous one
(``os.replace``), so a process killed while saving leaves the previous checkpoint intact
(and at most a ``.<name>.*.tmp`` file behind, removed by the next save once it is an hour
old). A path that is a symbolic link is written through (the file it points to is
replaced and the link stays); a failed write raises an ``OSError`` naming the file.

Each file also carries the configuration it was made with (:func:`strategy_config`:
strategy and plugin classes, every option of the buffer's and of its plugin's
constructor (retrieval included), those of every other plugin that holds state (MKD's
momentum, temperature and weight), loss, the model's class, the constructor options it
keeps, its submodules with their ``extra_repr()`` (a ``Dropout``'s ``p``) and its tensor
shapes, optimizer type and hyper-parameters, iterations per batch, the stream's length
and any ``identity`` the caller adds) and a SHA-256 checksum of its whole payload. A
model whose Avalanche heads grew (``IncrementalClassifier``, ``MultiHeadClassifier``) is
grown to the saved shapes before the comparison (:mod:`~avalanche_gss.checkpoint.model`).
Loading refuses, with one line naming the file and the first difference, a file made by
another configuration or another model, and a damaged or altered one. A file saved
before the model's class and submodules were recorded is compared on its shapes alone.

A checksum proves no origin: anyone can recompute it. So the content is checked too,
before anything is allocated: every tensor must hold the bytes its shape takes (no
repeated elements behind zero strides), each buffer's saved number of slots must be the
configuration's, the model's state and every saved copy of it (MKD's teacher, CSReL's
coreset model) must have the model's tensor names, shapes and kinds of dtype (real
floating-point weights), and a buffer's labels must be integers. Errors quote the file's
content in a few hundred characters at most, and a file refused at any step, even the
last, leaves the strategy as it was (model, optimizer, plugins, buffers, criterion,
clock, global generators).

Avalanche's ``save_checkpoint``/``maybe_load_checkpoint`` also work on this library's
strategies; they pickle the whole strategy with ``dill``, so loading one of their files
runs whatever code it names: load only files you trust (README, "Reliability").

The pieces: :mod:`~avalanche_gss.checkpoint.state` (the state), ``config`` (the
configuration), ``model`` (models that grow), ``files`` (the file format) and ``resume``
(:func:`train_resumable`).
"""

from avalanche_gss.checkpoint.config import strategy_config
from avalanche_gss.checkpoint.files import CheckpointError, load_state, read_state, save_state
from avalanche_gss.checkpoint.resume import train_resumable
from avalanche_gss.checkpoint.state import (
    FORMAT_VERSION,
    load_strategy_state_dict,
    rng_state,
    set_rng_state,
    strategy_state_dict,
)

__all__ = [
    "FORMAT_VERSION",
    "CheckpointError",
    "load_state",
    "read_state",
    "load_strategy_state_dict",
    "rng_state",
    "save_state",
    "set_rng_state",
    "strategy_config",
    "strategy_state_dict",
    "train_resumable",
]
