"""The online template's building blocks, on stock Avalanche strategies."""

import torch
from avalanche.core import SupervisedPlugin
from avalanche.training import Naive
from helpers import sgd as _sgd

from avalanche_gss.models import MLP
from avalanche_gss.streams import online_benchmark
from avalanche_gss.training import OnlineTemplate, RepeatedBatchMixin, quiet_evaluator


class _Batches(SupervisedPlugin):
    """Records the input of every training iteration and the optimizer steps taken."""

    def __init__(self):
        super().__init__()
        self.inputs = []

    def before_training_iteration(self, strategy, **kwargs):
        self.inputs.append(strategy.mb_x.clone())


class _RepeatedNaive(RepeatedBatchMixin, Naive):
    pass


def test_repeated_batch_mixin_repeats_each_batch_of_a_stock_strategy(tiny_split):
    # Given Avalanche's Naive with the mixin, 3 iterations per mini-batch
    torch.manual_seed(0)
    model = MLP()
    probe = _Batches()
    strategy = _RepeatedNaive(model=model, optimizer=_sgd(model), train_mb_size=10,
                              train_epochs=1, plugins=[probe], evaluator=quiet_evaluator())
    strategy.n_iter = 3
    stream = online_benchmark(tiny_split, batch_size=10).train_stream
    # When it learns 4 experiences of 10 samples
    strategy.train(list(stream)[:4], eval_streams=[])
    # Then each batch is learnt 3 times in a row, and the batches are the experiences'
    # samples in stream order (Avalanche's loader shuffles within an experience)
    assert len(probe.inputs) == 12
    x, _ = tiny_split.stream_tensors()
    for k in range(4):
        for r in range(3):
            assert torch.equal(probe.inputs[3 * k + r], probe.inputs[3 * k])
        seen = probe.inputs[3 * k].flatten(1).sum(dim=1).sort().values
        expected = x[10 * k : 10 * k + 10].flatten(1).sum(dim=1).sort().values
        torch.testing.assert_close(seen, expected)
    assert strategy.clock.train_iterations == 12


class _TupleLoader(OnlineTemplate):
    """A template whose loader yields tuples (as a plain PyTorch DataLoader may)."""

    def make_train_dataloader(self, **kwargs):
        x, y = self.experience.tensors
        t = torch.zeros_like(y)
        self.dataloader = [(x[:5], y[:5], t[:5]), (x[5:], y[5:], t[5:])]


def test_tuple_batches_are_repeated_as_lists(tiny_split):
    torch.manual_seed(0)
    model = MLP()
    probe = _Batches()
    strategy = _TupleLoader(model=model, optimizer=_sgd(model), n_iter=2, plugins=[probe])
    first = next(iter(online_benchmark(tiny_split, batch_size=10).train_stream))
    strategy.train(first)
    x, _ = first.tensors
    assert [len(b) for b in probe.inputs] == [5, 5, 5, 5]
    for i, part in enumerate((x[:5], x[:5], x[5:], x[5:])):
        assert torch.equal(probe.inputs[i], part)


class _LoaderAfterEpoch(SupervisedPlugin):
    def __init__(self):
        super().__init__()
        self.loaders = []

    def after_training_epoch(self, strategy, **kwargs):
        self.loaders.append(strategy.dataloader)


def test_the_dataloader_is_the_plain_one_again_after_each_epoch(tiny_split):
    # The repetition wraps the loader only while an epoch runs: plugins that read
    # strategy.dataloader after it see what make_train_dataloader built.
    torch.manual_seed(0)
    model = MLP()
    probe = _LoaderAfterEpoch()
    strategy = OnlineTemplate(model=model, optimizer=_sgd(model), n_iter=3, plugins=[probe])
    first = next(iter(online_benchmark(tiny_split, batch_size=10).train_stream))
    strategy.train(first)
    (loader,) = probe.loaders
    assert isinstance(loader, list) and len(loader) == 1 and len(loader[0]) == 3
