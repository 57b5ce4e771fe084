"""The JSON records of the which-buffer statistics are their dataclasses' fields, no more.

``ComparisonRecord`` and ``RankRecord`` spell, for mypy, the dicts that ``Comparison`` and
``Placing`` write: the two must name the same keys, or a report reads a key that no
longer exists.
"""

import dataclasses
import typing

from avalanche_gss.reproduce.experiments.which_buffer_records import RankRecord
from avalanche_gss.reproduce.experiments.which_buffer_report import Placing
from avalanche_gss.reproduce.reports.comparisons import Comparison, ComparisonRecord


def test_each_record_names_its_dataclasses_fields_in_order():
    for record, cls in ((ComparisonRecord, Comparison), (RankRecord, Placing)):
        assert list(typing.get_type_hints(record)) == [f.name for f in dataclasses.fields(cls)]
