"""The checked readers of JSON values (a cached result, a config read back)."""

import pytest

from avalanche_gss.reproduce.json_types import (
    json_float,
    json_floats,
    json_int,
    json_ints,
    json_object,
    json_objects,
    json_str,
    json_strs,
)


def test_each_reader_returns_what_it_checked():
    assert json_object({"a": 1}) == {"a": 1}
    assert json_int(3) == 3
    assert json_float(2) == 2.0 and isinstance(json_float(2), float)  # JSON's 2 is a number
    assert json_float(0.25) == 0.25
    assert json_str("x") == "x"
    assert json_ints([1, 2]) == [1, 2] and json_ints((1,)) == [1]
    assert json_floats([1, 0.5]) == [1.0, 0.5]
    assert json_strs(["a"]) == ["a"]
    assert json_objects([{}, {"b": None}]) == [{}, {"b": None}]


@pytest.mark.parametrize("reader, value, kind", [
    (json_object, [1], "a JSON object"),
    (json_int, True, "an integer"),  # a bool is no count
    (json_int, 1.5, "an integer"),
    (json_float, None, "a number"),
    (json_float, False, "a number"),
    (json_float, "1.0", "a number"),
    (json_str, 1, "a string"),
    (json_ints, {"a": 1}, "a list of integers"),
    (json_floats, "abc", "a list of numbers"),
    (json_strs, None, "a list of strings"),
    (json_objects, {"a": {}}, "a list of JSON objects"),
])
def test_a_value_of_another_type_is_refused_in_one_line_naming_it(reader, value, kind):
    with pytest.raises(TypeError) as err:
        reader(value, "a run's avg")
    assert str(err.value) == f"a run's avg must be {kind}, got {type(value).__name__} {value!r}"


def test_an_item_of_another_type_is_refused_naming_the_list():
    with pytest.raises(TypeError, match=r"^each item of a run's task_accuracy must be a number, "
                                        r"got NoneType None$"):
        json_floats([1.0, None], "a run's task_accuracy")


def test_a_long_value_is_cut_in_the_message():
    with pytest.raises(TypeError) as err:
        json_int("x" * 500, "a job's threads")
    assert len(str(err.value)) < 150 and str(err.value).endswith("...")
