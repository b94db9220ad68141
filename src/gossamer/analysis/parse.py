"""Validate and parse raw trace lines in Spark, with the rules of ``gossamer.trace.jsonl``.

``parse_lines`` is the distributed twin of ``gossamer.trace.jsonl.decode_event``: the
same checks in the same order, the same reasons, so a line is rejected by the
analysis when the Python reader rejects it, with the exceptions listed below
(``tests/analysis/test_parse.py`` holds the two side by side). It is a pure DataFrame
transform; reading files and numbering lines is ``gossamer.analysis.load``'s job.

Lines are parsed once into Spark's VARIANT type (Spark 4.0 or later), whose
``schema_of_variant`` tells a JSON string from a number or a boolean: the plain JSON
reader would silently turn ``"msg": 5`` into the string ``"5"`` and ``"seq": true``
into null, hiding a broken producer.

One difference, deliberately: a last line that lacks its newline but is a complete
JSON event is accepted (the Python reader calls it torn). A truly torn line, cut in
the middle, is not valid JSON and is rejected either way.

Four more, not deliberate, are pinned by ``KNOWN_DIFFERENCES`` in the tests until
they are closed; no trace encoder writes such lines: text after the closing brace is
ignored here (the Python reader refuses the line); a repeated key makes the line "not
JSON" here (the Python reader keeps the last value); a time of ``1e400`` is accepted
here as infinity; a ``seq`` between 2**63 and 2**64 is called a float here.

Validating every line through VARIANT costs several times parsing it, so lines take
a fast path when they can: a line in the shape every trace encoder writes (the
schema's keys in its order, no whitespace, each value of its field's JSON type, in
a grammar narrower than JSON's: see ``FAST_SHAPE``) is valid by construction, so one
regular expression proves it and the typed JSON reader (``from_json``) extracts its
fields. Only the lines that do not match (hand-edited, foreign, broken) go through
the full validation. The shape is strictly narrower than validity, so the fast path
changes no verdict and no value: ``tests/analysis/test_parse.py`` runs both on the
same lines.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from gossamer.analysis.schema import EVENT_COLUMNS, EVENTS_SCHEMA, TRACE_SCHEMA
from gossamer.trace.jsonl import MAX_LINE_BYTES
from gossamer.trace.schema import LAYERS, SCHEMA_VERSION

__all__ = [
    "BAD_COLUMNS",
    "FAST_SHAPE",
    "PARSED_COLUMNS",
    "PARSED_SCHEMA",
    "has_fast_shape",
    "parse_lines",
    "parse_shaped",
]

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


def _fast_shape() -> str:
    """The Java regular expression of a line that is valid by its shape alone."""
    assert all(name.isalpha() and name.islower() for name in LAYERS)
    # A string: any character but a quote, a backslash or a control character, or
    # one of JSON's escapes; no escaped surrogate (the Python reader rejects a lone
    # one, and the full validation judges the pairs). Possessive: no backtracking.
    chars = r'(?:[^"\\\x00-\x1f]++|\\["\\/bfnrt]|\\u(?![dD][89a-fA-F])[0-9a-fA-F]{4})'
    string = f'"{chars}*+"'
    # Numbers the typed reader and VARIANT turn into the same value: integers that fit
    # a long, and non-negative seconds with few enough digits to stay finite and exact.
    integer = r"-?(?:0|[1-9][0-9]{0,17})"
    seconds = r"(?:0|[1-9][0-9]{0,15})(?:\.[0-9]{1,24})?(?:[eE][+-]?[0-9]{1,2})?"

    def optional(name: str, value: str) -> str:
        return f'(?:,"{name}":(?:{value}|null))?'

    pair = f"{string}:{string}"
    return (
        rf'^\{{"v":{SCHEMA_VERSION},"run":{string},"node":{string},"t":{seconds},'
        rf'"layer":"(?:{"|".join(LAYERS)})","kind":"{chars}++"'
        + optional("msg", string)
        + optional("peer", string)
        + optional("seq", integer)
        + optional("size", integer)
        + rf'(?:,"attrs":\{{(?:{pair}(?:,{pair})*+)?\}})?\}}\z'
    )


#: A line of this shape (Java regular expression, matched against the whole line) is a
#: valid event: the schema's keys in order (optional ones may be absent or null), no
#: whitespace, every value of its field's type. Every trace encoder writes this shape.
FAST_SHAPE = _fast_shape()


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


def parse_lines(raw: DataFrame, *, fast_path: bool = True) -> DataFrame:
    """Parse ``value, file, line`` rows into events plus the reason each bad one is bad.

    The result has ``PARSED_COLUMNS``. On a valid line ``reason`` is null and the event
    columns hold the event. On a bad line ``reason`` says why (the Python reader's
    words), ``text`` holds its first 200 characters, ``bad_layer`` the layer name when
    the layer is unknown, and ``version`` the schema version when it is a readable
    integer (so that mixed versions can be reported as such, not line by line).
    ``fast_path=False`` validates every line in full (the module docstring), which
    gives the same result, only slower: it is there to show that.
    """
    if not fast_path:
        return _validated(raw)
    shaped = has_fast_shape(F.col("value"))
    # Two branches of one plan, each reading the lines: apart, neither pays for the
    # other's expressions (in one projection, the full validation's scaffolding cost
    # the fast lines as much as parsing them).
    return parse_shaped(raw.where(shaped)).unionByName(_validated(raw.where(~shaped)))


def has_fast_shape(value: Column) -> Column:
    """True for a line of ``FAST_SHAPE`` (which ``parse_shaped`` may parse)."""
    return (F.octet_length(value) <= MAX_LINE_BYTES) & value.rlike(FAST_SHAPE)


def parse_shaped(raw: DataFrame) -> DataFrame:
    """``parse_lines`` of ``value, file, line`` rows known to be of ``FAST_SHAPE``.

    Only the typed JSON reader runs: the caller has checked the shape (with
    ``has_fast_shape``), perhaps earlier and in bulk; on other lines the result
    is undefined.
    """
    parsed = raw.select("value", "file", "line", F.from_json("value", TRACE_SCHEMA).alias("_e"))
    # One thing the shape cannot see: a key repeated inside attrs (maybe spelt with an
    # escape). The typed reader keeps both; VARIANT refuses the line as not JSON, and
    # so does this, to the letter, as the full validation would.
    pairs = F.size("_e.attrs")
    repeated = (pairs >= 2) & (F.size(F.array_distinct(F.map_keys("_e.attrs"))) != pairs)
    checked = parsed.select("*", F.coalesce(repeated, F.lit(False)).alias("_repeated"))
    ok = ~F.col("_repeated")

    def event(name: str) -> Column:
        return F.when(ok, F.col(f"_e.{name}"))

    no_attrs = F.create_map().cast("map<string,string>")
    return checked.select(
        *[event(name).alias(name) for name in _FIELDS if name != "attrs"],
        F.when(ok, F.coalesce(F.col("_e.attrs"), no_attrs)).otherwise(no_attrs).alias("attrs"),
        "file",
        "line",
        F.when(~ok, F.lit("not JSON")).alias("reason"),
        F.lit(None).cast("string").alias("bad_layer"),
        F.lit(None).cast("bigint").alias("version"),
        F.when(~ok, F.substring("value", 1, 200)).alias("text"),
    )


def _validated(raw: DataFrame) -> DataFrame:
    """``parse_lines`` of every line through the full validation, rule by rule."""
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
