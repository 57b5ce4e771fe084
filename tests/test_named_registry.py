"""The one registry mechanism (avalanche_gss.registry)."""

import doctest

import pytest

from avalanche_gss import registry
from avalanche_gss.registry import Registry


def test_names_keep_their_registration_order_and_unknown_names_are_one_line():
    r = Registry[int]("stream")
    r.add("b", 2, builtin=True)
    assert r.register("a")(1) == 1
    assert r.names() == ("b", "a") and list(r) == ["b", "a"] and len(r) == 2
    assert r.builtin_names() == ("b",) and "a" in r and "c" not in r
    with pytest.raises(ValueError, match=r"^unknown stream 'c'; choose from b, a$"):
        r["c"]


def test_a_taken_name_is_refused_unless_replaced_and_the_packages_own_never():
    r = Registry[int]("method")
    r.add("own", 0, builtin=True)
    r.add("mine", 1)
    with pytest.raises(ValueError, match="'mine' is already registered; pass replace=True"):
        r.add("mine", 2)
    assert r.add("mine", 2, replace=True) == 2 and r["mine"] == 2
    with pytest.raises(ValueError, match="'own' is already registered$"):
        r.add("own", 3, replace=True)
    with pytest.raises(ValueError, match="stays registered"):
        r.remove("own")
    r.remove("mine")
    assert r.names() == ("own",)
    with pytest.raises(ValueError, match="non-empty string"):
        r.add(" ", 1)


def test_the_module_example_runs():
    assert doctest.testmod(registry).failed == 0
