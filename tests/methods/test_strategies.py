"""The ready strategies' constructors: written in each method's module, naming the buffer's
options with the buffer's defaults and annotations, in the buffer's order."""

import inspect

import pytest

from avalanche_gss.methods import REGISTRY
from avalanche_gss.training import BufferStrategy

KW, VAR = inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD
STRATEGIES = sorted({(m.strategy.__name__, m.strategy, m.buffer) for _, m in REGISTRY.items()}
                    | {(m.constrained.__name__, m.constrained, m.buffer)
                       for _, m in REGISTRY.items() if m.constrained is not None},
                    key=lambda item: item[0])


def _buffer_options(buffer):
    return [p for p in inspect.signature(buffer).parameters.values()
            if p.kind is KW and p.name != "seed"]


@pytest.mark.parametrize(("name", "strategy", "buffer"), STRATEGIES,
                         ids=[name for name, _, _ in STRATEGIES])
def test_a_strategy_names_its_buffers_options_in_its_own_init(name, strategy, buffer):
    params = list(inspect.signature(strategy).parameters.values())
    options = _buffer_options(buffer)
    own = [p for p in params if p.kind is KW and p.name not in {o.name for o in options}]
    # The strategy's own keywords first (mem_size, seed, ...), then every buffer option as
    # the buffer declares it (name, default, annotation), then the rest as **kwargs.
    assert params == [*own, *options, params[-1]] and params[-1].kind is VAR
    assert [p.name for p in own][:1] == ["mem_size"] and "seed" in [p.name for p in own]
    init = inspect.unwrap(strategy.__init__)
    if options:  # written beside the strategy, where a reader and a type checker see it
        assert inspect.getsourcefile(init) == inspect.getsourcefile(strategy), name
    else:
        assert init is inspect.unwrap(BufferStrategy.__init__)


def test_a_one_line_strategy_builds_its_buffer_with_the_seed():
    from avalanche_gss.methods.reservoir import ReservoirBuffer

    class Mine(BufferStrategy):
        buffer_class = ReservoirBuffer

    assert [p.name for p in inspect.signature(Mine).parameters.values()] == [
        "mem_size", "seed", "options"]
