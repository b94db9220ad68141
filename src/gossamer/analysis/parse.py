"""Validate and parse raw trace lines in Spark, with the rules of ``gossamer.trace.jsonl``.

``parse_lines`` is the distributed twin of ``gossamer.trace.jsonl.decode_event``: the
same checks in the same order, the same reasons, so a line is rejected by the
analysis exactly when the Python reader rejects it (``tests/analysis/test_parse.py``
holds the two side by side). It is a pure DataFrame transform; reading files and
numbering lines is ``gossamer.analysis.load``'s job.

Lines are parsed once into Spark's VARIANT type (Spark 4.0 or later), whose
``schema_of_variant`` tells a JSON string from a number or a boolean: the plain JSON
reader would silently turn ``"msg": 5`` into the string ``"5"`` and ``"seq": true``
into null, hiding a broken producer.

One difference, deliberately: a last line that lacks its newline but is a complete
JSON event is accepted (the Python reader calls it torn). A truly torn line, cut in
the middle, is not valid JSON and is rejected either way.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gossamer.analysis.schema import EVENT_COLUMNS, EVENTS_SCHEMA, TRACE_SCHEMA
from gossamer.trace.jsonl import MAX_LINE_BYTES
from gossamer.trace.schema import LAYERS, SCHEMA_VERSION

__all__ = ["BAD_COLUMNS", "PARSED_COLUMNS", "PARSED_SCHEMA", "parse_lines"]

_FIELDS = tuple(f.name for f in TRACE_SCHEMA.fields)
_INTEGER = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MISSING = "MISSING"  # the type of a field that is not in the object at all

#: Columns that describe a rejected line (null on a valid one).
BAD_COLUMNS: tuple[str, ...] = ("reason", "bad_layer", "version", "text")

#: Every column of ``parse_lines``' result: the event columns, then ``BAD_COLUMNS``.
PARSED_COLUMNS: tuple[str, ...] = (*EVENT_COLUMNS, *BAD_COLUMNS)

#: The schema of ``parse_lines``' result (event fields are nullable: bad lines lack them).
PARSED_SCHEMA = T.StructType(
    [T.StructField(f.name, f.dataType, nullable=True) for f in EVENTS_SCHEMA.fields]
    + [
        T.StructField("reason", T.StringType()),
        T.StructField("bad_layer", T.StringType()),
        T.StructField("version", T.LongType()),
        T.StructField("text", T.StringType()),
    ]
)


def _kind_of(type_name: Column) -> Column:
    """A Spark variant type name as the Python type name the Python reader reports."""
    return (
        F.when(type_name.isin(*_INTEGER), F.lit("int"))
        .when(type_name.isin("DOUBLE", "FLOAT") | type_name.startswith("DECIMAL"), F.lit("float"))
        .when(type_name == "STRING", F.lit("str"))
        .when(type_name == "BOOLEAN", F.lit("bool"))
        .when(type_name.startswith("OBJECT"), F.lit("dict"))
        .when(type_name.startswith("ARRAY"), F.lit("list"))
        .when(type_name == "VOID", F.lit("NoneType"))
        .otherwise(F.lower(type_name))
    )


def parse_lines(raw: DataFrame) -> DataFrame:
    """Parse ``value, file, line`` rows into events plus the reason each bad one is bad.

    The result has ``PARSED_COLUMNS``. On a valid line ``reason`` is null and the event
    columns hold the event. On a bad line ``reason`` says why (the Python reader's
    words), ``text`` holds its first 200 characters, ``bad_layer`` the layer name when
    the layer is unknown, and ``version`` the schema version when it is a readable
    integer (so that mixed versions can be reported as such, not line by line).
    """
    # Each line is parsed once, each field looked up and typed once, in stages the
    # optimizer keeps apart (it does not inline an expensive expression used twice):
    # every rule below then compares plain columns. Written as one projection, the
    # rules re-ran the lookups and type probes for every condition, and parsing cost
    # several times what it does now (``bench/analysis.py``).
    parsed_json = raw.select("value", "file", "line", F.try_parse_json("value").alias("_j"))
    as_object = parsed_json.select(
        "*", F.try_variant_get("_j", "$", "map<string,variant>").alias("_o")
    )
    fields = as_object.select(
        "value",
        "file",
        "line",
        "_j",
        "_o",
        *[F.col("_o").getItem(name).alias(f"_f_{name}") for name in _FIELDS],
    )
    df = fields.select(
        "*",
        # Never null, so that every rule below is a plain true or false.
        *[
            F.coalesce(F.schema_of_variant(f"_f_{name}"), F.lit(_MISSING)).alias(f"_t_{name}")
            for name in _FIELDS
        ],
    )

    def field(name: str) -> Column:
        return F.col(f"_f_{name}")

    def type_of(name: str) -> Column:
        return F.col(f"_t_{name}")

    def get(name: str, spark_type: str) -> Column:
        return F.try_variant_get(field(name), "$", spark_type)

    def absent(name: str) -> Column:
        return type_of(name).isin(_MISSING, "VOID")

    def is_int(name: str) -> Column:
        return type_of(name).isin(*_INTEGER)

    def is_str(name: str) -> Column:
        return type_of(name) == "STRING"

    def not_type(name: str, what: str) -> Column:
        return F.concat(F.lit(f"field '{name}' must be {what}, not "), _kind_of(type_of(name)))

    unknown = F.array_except(F.map_keys("_o"), F.array(*[F.lit(n) for n in _FIELDS]))
    unknown_text = F.concat(
        F.lit("unknown fields ["),
        F.array_join(
            F.transform(F.sort_array(unknown), lambda k: F.concat(F.lit("'"), k, F.lit("'"))), ", "
        ),
        F.lit("]"),
    )
    version = F.when(is_int("v"), get("v", "bigint"))
    layer = get("layer", "string")
    attrs_values = F.map_values(F.try_variant_get(field("attrs"), "$", "map<string,variant>"))
    # A missing attrs means {}; an explicit null does not (as in the Python reader).
    attrs_ok = (type_of("attrs") == _MISSING) | (
        type_of("attrs").startswith("OBJECT")
        & F.forall(attrs_values, lambda x: F.schema_of_variant(x) == "STRING")
    )
    number = is_int("t") | type_of("t").isin("DOUBLE", "FLOAT") | type_of("t").startswith("DECIMAL")

    def required_str(name: str) -> list[tuple[Column, Column]]:
        return [
            (absent(name), F.lit(f"field '{name}' is missing or null")),
            (~is_str(name), not_type(name, "a string")),
        ]

    def optional(name: str, ok: Column, what: str) -> tuple[Column, Column]:
        return (~(absent(name) | ok), not_type(name, what))

    rules: list[tuple[Column, Column]] = [
        (
            F.octet_length("value") > MAX_LINE_BYTES,
            F.lit(f"line longer than {MAX_LINE_BYTES} bytes"),
        ),
        (F.trim("value") == "", F.lit("empty line")),
        (F.col("_j").isNull(), F.lit("not JSON")),
        (
            F.col("_o").isNull(),
            F.concat(
                F.lit("a trace line must be a JSON object, not "),
                _kind_of(F.schema_of_variant("_j")),
            ),
        ),
        (F.size(unknown) > 0, unknown_text),
        (absent("v"), F.lit("field 'v' (schema version) is missing")),
        (~is_int("v"), not_type("v", "an integer")),
        (
            version != SCHEMA_VERSION,
            F.format_string(
                f"schema version %d is not supported (this reader knows {SCHEMA_VERSION})",
                version,
            ),
        ),
        (~number, F.lit("field 't' must be a number of seconds")),
        *required_str("layer"),
        (
            ~layer.isin(*LAYERS),
            F.format_string(f"unknown layer '%s' (known: {', '.join(LAYERS)})", layer),
        ),
        *required_str("kind"),
        (get("kind", "string") == "", F.lit("field 'kind' is empty")),
        (~attrs_ok, F.lit("field 'attrs' must be an object of strings")),
        *required_str("run"),
        *required_str("node"),
        optional("msg", is_str("msg"), "a string"),
        optional("peer", is_str("peer"), "a string"),
        optional("seq", is_int("seq"), "an integer"),
        optional("size", is_int("size"), "an integer"),
    ]
    reason: Column = F.lit(None).cast("string")
    for cond, text in reversed(rules):
        reason = F.when(cond, text).otherwise(reason)

    no_attrs = F.create_map().cast("map<string,string>")
    parsed = df.select(
        version.alias("v"),
        get("run", "string").alias("run"),
        get("node", "string").alias("node"),
        get("t", "double").alias("t"),
        layer.alias("layer"),
        get("kind", "string").alias("kind"),
        get("msg", "string").alias("msg"),
        get("peer", "string").alias("peer"),
        get("seq", "bigint").alias("seq"),
        get("size", "bigint").alias("size"),
        F.coalesce(get("attrs", "map<string,string>"), no_attrs).alias("attrs"),
        "file",
        "line",
        reason.alias("reason"),
        "value",
    )
    bad = F.col("reason").isNotNull()
    return parsed.select(
        *EVENT_COLUMNS[:-2],
        "file",
        "line",
        "reason",
        F.when(bad & F.col("reason").startswith("unknown layer"), F.col("layer")).alias(
            "bad_layer"
        ),
        F.when(bad, F.col("v")).alias("version"),
        F.when(bad, F.substring("value", 1, 200)).alias("text"),
    )
