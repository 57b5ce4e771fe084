"""Fixtures of the harness's tests."""

from collections.abc import Iterator

import pytest
from helpers.policy import registry_restored


@pytest.fixture
def registry() -> Iterator[None]:
    """Leave the registries, ``sys.modules`` and the hashes as they were."""
    with registry_restored():
        yield
