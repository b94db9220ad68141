"""The Spark schema of trace events, derived from ``gossamer.trace.schema.FIELDS``.

Nothing here restates a field: adding a field to ``FIELDS`` changes this schema,
and ``tests/analysis/test_schema.py`` checks the two agree, including against
what Spark itself infers from lines written by the trace encoder.
"""

from __future__ import annotations

from pyspark.sql import types as T

from gossamer.trace.schema import FIELDS, FieldSpec

__all__ = ["EVENTS_SCHEMA", "EVENT_COLUMNS", "SOURCE_FIELDS", "TRACE_SCHEMA", "spark_type"]

_SCALARS: dict[str, T.DataType] = {
    "int": T.LongType(),
    "float": T.DoubleType(),
    "str": T.StringType(),
}


def spark_type(spec: FieldSpec) -> T.DataType:
    """The Spark type of one schema field."""
    if spec.type == "map<str,str>":
        return T.MapType(T.StringType(), T.StringType(), valueContainsNull=False)
    try:
        return _SCALARS[spec.type]
    except KeyError:
        raise ValueError(f"no Spark type for trace field type {spec.type!r}") from None


TRACE_SCHEMA = T.StructType(
    [T.StructField(spec.name, spark_type(spec), nullable=spec.nullable) for spec in FIELDS]
)


#: Where each loaded event came from: the file's name inside the run directory and
#: its 1-based line number. Together with ``t`` they give every node's events a
#: total order (``t`` ties are common in the simulator, where one input causes
#: several events at the same virtual instant), and they let every violation point
#: at the exact trace line that shows it.
SOURCE_FIELDS: tuple[T.StructField, ...] = (
    T.StructField("file", T.StringType(), nullable=False),
    T.StructField("line", T.LongType(), nullable=False),
)

#: The schema of a loaded run: every trace field, then the source fields.
EVENTS_SCHEMA = T.StructType([*TRACE_SCHEMA.fields, *SOURCE_FIELDS])

#: Column names of ``EVENTS_SCHEMA`` in order.
EVENT_COLUMNS: tuple[str, ...] = tuple(f.name for f in EVENTS_SCHEMA.fields)
