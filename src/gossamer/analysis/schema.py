"""The Spark schema of trace events, derived from ``gossamer.trace.schema.FIELDS``.

Nothing here restates a field: adding a field to ``FIELDS`` changes this schema,
and ``tests/analysis/test_schema.py`` checks the two agree, including against
what Spark itself infers from lines written by the trace encoder.
"""

from __future__ import annotations

from pyspark.sql import types as T

from gossamer.trace.schema import FIELDS, FieldSpec

__all__ = ["TRACE_SCHEMA", "spark_type"]

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
