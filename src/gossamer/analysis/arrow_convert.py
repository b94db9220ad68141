"""The conversion of local trace files, run in Spark's Python workers with pyarrow.

Spark schedules the work (one task per chunk of a file); each task reads its chunk
itself, parses it with pyarrow's JSON reader against the trace schema and writes the
valid events straight into the Parquet dataset, laid out as Spark would write it
(``layer=<layer>/kind=<kind>/part-*.parquet``, partition values escaped as Spark
escapes them). Nothing passes through the JVM row by row. ``gossamer.analysis.load``
decides when this applies (a local run converted in a local session) and runs the
two Spark jobs: ``count_lines`` per chunk, so that every chunk knows the number of
its first line, then ``convert_chunk``.

Lines split as Spark's text reader splits them (at ``\\n``, ``\\r`` or ``\\r\\n``; a
last line without its terminator is a line; a byte order mark that opens a file is
dropped). A line is accepted here only when it is
certainly valid, with the values the full validation (``parse.parse_lines``) would
give it: pyarrow's reader refuses a value of the wrong JSON type, an integer beyond a
long, a repeated key, a torn or trailing text, an unpaired surrogate, a control
character; what it cannot see is checked on the columns (version, required fields,
known layer, non-empty kind, a finite time, no null in ``attrs``). Every
other line is *pending*: written with its file and line number to ``_pending/``
beside the data, for Spark's full validation (``parse_lines(..., fast_path=False)``)
to judge with its reasons. A chunk whose lines do not parse together is parsed in
smaller batches, then line by line, so one bad line costs little.
"""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from gossamer.trace.jsonl import MAX_LINE_BYTES
from gossamer.trace.schema import FIELDS, LAYERS, SCHEMA_VERSION

__all__ = [
    "PENDING_DIR",
    "Chunk",
    "convert_chunk",
    "count_lines",
    "escape_partition_value",
    "plan_chunks",
]

#: Where the lines the fast path leaves to Spark's full validation wait, inside the
#: dataset directory (Spark's reader skips names that begin with ``_``).
PENDING_DIR = "_pending"
#: The partition of rejected lines (``load.BAD_PARTITION``).
_BAD = "_bad"

_ARROW_TYPES = {"int": pa.int64(), "float": pa.float64(), "str": pa.string()}
#: The scalar trace fields as pyarrow's reader types them (attrs is inferred: pyarrow
#: reads no JSON object as a map).
_SCALARS = pa.schema([pa.field(f.name, _ARROW_TYPES[f.type]) for f in FIELDS if f.name != "attrs"])
_REQUIRED = tuple(f.name for f in FIELDS if not f.nullable and f.name != "attrs")
_ATTRS = pa.map_(pa.string(), pa.string())
#: The stored columns (``load.STORED_SCHEMA`` without the partition columns).
_STORED = pa.schema(
    [
        *[f for f in _SCALARS if f.name not in ("layer", "kind")],
        pa.field("attrs", _ATTRS),
        pa.field("file", pa.string()),
        pa.field("line", pa.int64()),
        pa.field("reason", pa.string()),
        pa.field("bad_layer", pa.string()),
        pa.field("version", pa.int64()),
        pa.field("text", pa.string()),
    ]
)
#: A null inside attrs reads like an absent key once pyarrow has made attrs a struct,
#: so a line whose attrs might hold one is left to the full validation.
_ATTRS_NULL = r'"attrs"\s*:\s*(?:null|\{.*null)'
#: Lines parsed together after a whole chunk failed to: a bad line costs one batch.
_BATCH_LINES = 1024
#: Bytes read past a chunk's nominal start to find the line boundary after it.
_SCAN_BYTES = 1 << 16
#: The characters Spark escapes in a partition directory's name (``%XX``), and NUL,
#: which Spark's own writer cannot put in a name at all (its reader unescapes it).
_ESCAPED = frozenset([chr(c) for c in range(32)] + list("\"#%'*/:=?\\\x7f{[]^"))
_DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
_BOM = b"\xef\xbb\xbf"


@dataclass(frozen=True, slots=True, kw_only=True)
class Chunk:
    """A byte range ``[start, end)`` of one trace file that starts at a line boundary."""

    index: int
    path: str
    name: str
    start: int
    end: int
    #: The number of the chunk's first line (1-based), once ``count_lines`` is known.
    first_line: int = 0


def plan_chunks(files: Sequence[tuple[str, str, int]], chunk_bytes: int) -> list[Chunk]:
    """Chunks of about ``chunk_bytes`` of each ``(path, name, size)``, each ending just
    after a ``\\n`` (or at the end of its file), in file order."""
    chunks: list[Chunk] = []
    for path, name, size in files:
        bounds = [0]
        with open(path, "rb") as handle:
            target = chunk_bytes
            while target < size:
                handle.seek(target - 1)
                window = handle.read(_SCAN_BYTES)
                cut = window.find(b"\n")
                if cut < 0:  # a very long line: look further
                    target += _SCAN_BYTES
                    continue
                bounds.append(target + cut)
                target = bounds[-1] + chunk_bytes
        bounds.append(size)
        chunks += [
            Chunk(index=len(chunks) + i, path=path, name=name, start=a, end=b)
            for i, (a, b) in enumerate(itertools.pairwise(bounds))
            if b > a
        ]
    return chunks


def _read(chunk: Chunk) -> bytes:
    with open(chunk.path, "rb") as handle:
        handle.seek(chunk.start)
        data = handle.read(chunk.end - chunk.start)
    # Spark's text reader (Hadoop's) drops a UTF-8 byte order mark that opens a file.
    return data[3:] if chunk.start == 0 and data.startswith(_BOM) else data


def _split(data: bytes) -> tuple[bytes, int]:
    """The chunk's lines joined by ``\\n`` (each terminated), and how many there are."""
    if b"\r" in data:  # Spark's reader also ends a line at \r or \r\n
        lines = data.splitlines()
        return b"".join(line + b"\n" for line in lines), len(lines)
    if data and not data.endswith(b"\n"):
        data += b"\n"
    return data, data.count(b"\n")


def count_lines(chunk: Chunk) -> int:
    """The number of lines of a chunk, as Spark's text reader counts them."""
    return _split(_read(chunk))[1]


def numbered(chunks: Sequence[Chunk], counts: Sequence[int]) -> list[Chunk]:
    """The chunks with their first line numbers, from each chunk's line count."""
    out: list[Chunk] = []
    before: dict[str, int] = {}
    for chunk, n in zip(chunks, counts, strict=True):
        out.append(replace(chunk, first_line=before.get(chunk.path, 0) + 1))
        before[chunk.path] = before.get(chunk.path, 0) + n
    return out


def escape_partition_value(value: str) -> str:
    """A partition value as Spark spells it in a directory name."""
    if not value:
        return _DEFAULT_PARTITION
    return "".join(f"%{ord(c):02X}" if c in _ESCAPED else c for c in value)


def convert_chunk(chunk: Chunk, out: str) -> tuple[int, int]:
    """Convert one chunk into the dataset at ``out``; ``(events written, lines pending)``."""
    data, count = _split(_read(chunk))
    if not count:
        return 0, 0
    lines = pc.split_pattern(pa.array([data], pa.binary()), "\n").flatten()[:count]
    numbers = pa.array(range(chunk.first_line, chunk.first_line + count), pa.int64())
    # What a line must look like before it is worth parsing with the others: a torn or
    # blank line, or two objects on one line, would shift every row after it.
    shaped = pc.and_(
        pc.and_(pc.starts_with(lines, "{"), pc.ends_with(lines, "}")),
        pc.and_(pc.less_equal(pc.binary_length(lines), MAX_LINE_BYTES), _utf8(lines)),
    )
    tables: list[pa.Table] = []
    pending: list[pa.Array] = [pc.indices_nonzero(pc.invert(shaped))]
    if len(pending[0]) == 0:
        _parse_batches(data, lines, None, tables, pending)
    else:
        keep = pc.indices_nonzero(shaped)
        kept = pc.take(lines, keep)
        _parse_batches(_joined(kept), kept, keep.cast(pa.int64()), tables, pending)
    written = _write_events(chunk, out, tables, numbers)
    rows = pc.sort_indices(pa.concat_arrays([p.cast(pa.int64()) for p in pending]))
    rows = pc.take(pa.concat_arrays([p.cast(pa.int64()) for p in pending]), rows)
    if len(rows):
        table = pa.table(
            {
                "value": pc.take(lines, rows),
                "file": pa.repeat(chunk.name, len(rows)),
                "line": pc.take(numbers, rows),
            }
        )
        target = Path(out) / PENDING_DIR
        target.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, os.fspath(target / f"part-{chunk.index:05d}.parquet"))
    return written, len(rows)


def _utf8(lines: pa.Array) -> pa.Array:
    """True for each line that is valid UTF-8 (pyarrow's reader does not check)."""
    try:
        lines.cast(pa.string())
    except pa.ArrowInvalid:
        return pa.array([_decodes(line) for line in lines.to_pylist()], pa.bool_())
    return pa.repeat(True, len(lines))


def _decodes(line: bytes) -> bool:
    try:
        line.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _joined(lines: pa.Array) -> bytes:
    """The lines, each terminated by ``\\n``, as one buffer for the JSON reader."""
    if not len(lines):
        return b""
    whole = pa.ListArray.from_arrays(pa.array([0, len(lines)], pa.int32()), lines)
    return bytes(pc.binary_join(whole, pa.scalar(b"\n"))[0].as_buffer()) + b"\n"


def _parse_batches(
    data: bytes,
    lines: pa.Array,
    positions: pa.Array | None,
    tables: list[pa.Table],
    pending: list[pa.Array],
) -> None:
    """Parse ``lines`` (``data``: them joined); append the valid rows' tables, with a
    ``_pos`` column (each row's index in the chunk: ``positions``, or its index in
    ``lines`` when None), and the positions of the lines left pending. A batch that
    does not parse is parsed again in smaller batches, then line by line."""
    count = len(lines)
    if positions is None:
        positions = pa.array(range(count), pa.int64())
    table = _parse(data)
    if table is not None and table.num_rows == count:
        valid = _valid_rows(table, lines)
        if valid is not None:
            ok = _array(valid)
            tables.append(table.append_column("_pos", positions).filter(ok))
            pending.append(pc.filter(positions, pc.invert(ok)))
            return
    if count == 1:
        pending.append(positions)
        return
    step = _BATCH_LINES if count > _BATCH_LINES else 1
    for start in range(0, count, step):
        part = lines.slice(start, step)
        _parse_batches(_joined(part), part, positions.slice(start, step), tables, pending)


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    return values.combine_chunks() if isinstance(values, pa.ChunkedArray) else values


def _parse(data: bytes) -> pa.Table | None:
    try:
        return pj.read_json(
            pa.py_buffer(data),
            read_options=pj.ReadOptions(use_threads=False, block_size=max(len(data), 1 << 20)),
            parse_options=pj.ParseOptions(
                explicit_schema=_SCALARS, unexpected_field_behavior="infer"
            ),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def _valid_rows(table: pa.Table, lines: pa.Array) -> pa.Array | None:
    """Which rows are certainly valid events; None when the batch's columns rule it out
    as a whole (an unknown field, an attrs value that is not a string)."""
    extra = set(table.column_names) - {*_SCALARS.names, "attrs"}
    if extra:
        return None
    ok = pc.and_(pc.equal(table["v"], SCHEMA_VERSION), pc.is_in(table["layer"], pa.array(LAYERS)))
    for name in _REQUIRED:
        ok = pc.and_(ok, pc.is_valid(table[name]))
    ok = pc.and_(ok, pc.is_finite(table["t"]))
    ok = pc.and_(ok, pc.not_equal(pc.binary_length(table["kind"]), 0))
    if "attrs" in table.column_names:
        attrs = table["attrs"].combine_chunks()
        if not pa.types.is_struct(attrs.type) and not pa.types.is_null(attrs.type):
            return None
        if pa.types.is_struct(attrs.type) and any(
            not pa.types.is_string(f.type) for f in attrs.type
        ):
            return None
        maybe_null = _maybe_null_attrs(attrs, lines)
        ok = pc.and_(ok, pc.invert(maybe_null))
    return pc.fill_null(ok, False)


def _maybe_null_attrs(attrs: pa.Array, lines: pa.Array) -> pa.Array:
    """Rows whose attrs might be ``null`` or hold a null (a struct cannot say)."""
    gap = pc.is_null(attrs)
    if pa.types.is_struct(attrs.type):
        for i in range(attrs.type.num_fields):
            gap = pc.or_(gap, pc.is_null(attrs.field(i)))
    text = pc.or_(pc.match_substring_regex(lines, _ATTRS_NULL), pc.match_substring(lines, "\\u"))
    return pc.and_(gap, text)


def _as_map(attrs: pa.Array | None, count: int) -> pa.Array:
    """An attrs struct column as the stored map (absent keys left out; null: empty)."""
    if attrs is None or pa.types.is_null(attrs.type) or attrs.type.num_fields == 0:
        return pa.MapArray.from_arrays(
            pa.repeat(0, count + 1).cast(pa.int32()),
            pa.array([], pa.string()),
            pa.array([], pa.string()),
        )
    names, values, rows = [], [], []
    sizes = pa.repeat(0, count).cast(pa.int32())
    for i, field in enumerate(attrs.type):
        child = attrs.field(i)
        present = pc.and_(pc.is_valid(child), pc.is_valid(attrs))
        where = pc.indices_nonzero(present)
        names.append(pa.repeat(field.name, len(where)))
        values.append(pc.take(child, where))
        rows.append(where)
        sizes = pc.add(sizes, pc.cast(present, pa.int32()))
    order = pc.sort_indices(pa.concat_arrays(rows))  # stable: keys keep the field order
    offsets = pa.concat_arrays([pa.array([0], pa.int32()), pc.cumulative_sum(sizes)])
    return pa.MapArray.from_arrays(
        offsets,
        pc.take(pa.concat_arrays(names), order),
        pc.take(pa.concat_arrays(values), order),
    )


def _write_events(chunk: Chunk, out: str, tables: list[pa.Table], numbers: pa.Array) -> int:
    written = 0
    for table in tables:
        if not table.num_rows:
            continue
        n = table.num_rows
        attrs = table["attrs"].combine_chunks() if "attrs" in table.column_names else None
        columns = {
            **{name: table[name] for name in _SCALARS.names},
            # Spark's full validation reads -0.0 as 0.0: adding 0.0 does the same.
            "t": pc.add(table["t"], 0.0),
            "attrs": _as_map(attrs, n),
            "file": pa.repeat(chunk.name, n),
            "line": pc.take(numbers, table["_pos"]),
            "reason": pa.nulls(n, pa.string()),
            "bad_layer": pa.nulls(n, pa.string()),
            "version": pa.nulls(n, pa.int64()),
            "text": pa.nulls(n, pa.string()),
        }
        events = pa.table(columns)
        keys = pc.binary_join_element_wise(events["layer"], events["kind"], "\x00")
        groups = pc.dictionary_encode(keys).combine_chunks()
        for j, key in enumerate(groups.dictionary.to_pylist()):
            layer, kind = key.split("\x00", 1)
            part = events.filter(pc.equal(groups.indices, j)).select(_STORED.names)
            directory = Path(out) / (
                f"layer={escape_partition_value(layer)}/kind={escape_partition_value(kind)}"
            )
            directory.mkdir(parents=True, exist_ok=True)
            name = f"part-{chunk.index:05d}-{uuid.uuid4().hex}.snappy.parquet"
            pq.write_table(part.cast(_STORED), os.fspath(directory / name))
            written += part.num_rows
    return written
