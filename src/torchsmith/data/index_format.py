"""What ``index.json`` holds, and its parser: one table of fields per object, one validator per field.

Format 2 (written now) records each file's XXH3-128 per block of ``block_bytes``; format 1
(torchsmith 0.1.0) recorded one SHA-256 per file. Both are read. Every field is checked for type
and range, so a damaged or hand-edited index is a :class:`StoreError` naming the field, never a
TypeError later, and never a path outside the store.

Example::

    index = parse_index(json.loads(text), Path("store/index.json"))
    index.format_version, index.block_bytes      # 2, 1048576
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from torchsmith.data.checksum import BLOCK_HASH, DIGEST_HEX, block_count

FORMAT_VERSION = 2
"""What this torchsmith writes: per-block checksums."""
WHOLE_FILE_SHA256 = 1
"""torchsmith 0.1.0's format: one SHA-256 per file, still read (and upgradable in place)."""
READABLE_VERSIONS = (WHOLE_FILE_SHA256, FORMAT_VERSION)
MIN_BLOCK_BYTES = 4096
"""One page: a block is whole pages, so verifying it faults in exactly the pages a read needs."""


class StoreError(ValueError):
    """A store that cannot be opened or written; the message names the file."""


@dataclass(frozen=True)
class FileRecord:
    name: str
    bytes: int
    sha256: str | None = None
    """Format 1: the whole file's SHA-256 (64 hex digits), checked on the shard's first touch."""
    blocks: str | None = None
    """Format 2: the XXH3-128 of each ``block_bytes`` block of the file, hex digests concatenated."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "bytes": self.bytes}
        if self.sha256 is not None:
            out["sha256"] = self.sha256
        if self.blocks is not None:
            out["blocks"] = self.blocks
        return out


@dataclass(frozen=True)
class ShardRecord:
    samples: int
    data: FileRecord
    offsets: FileRecord | None = None
    """Ragged stores: where each sample starts in the flat ``data`` array."""


@dataclass(frozen=True)
class StoreIndex:
    """What ``index.json`` records. ``shape`` is None for a ragged store of 1-D samples."""

    dtype: str
    shape: tuple[int, ...] | None
    num_samples: int
    shards: tuple[ShardRecord, ...]
    meta: dict[str, Any] = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    block_bytes: int | None = None
    """Format 2: the size of a checksummed block (the last block of a file may be shorter)."""

    @property
    def ragged(self) -> bool:
        return self.shape is None

    @property
    def total_bytes(self) -> int:
        return sum(s.data.bytes + (s.offsets.bytes if s.offsets else 0) for s in self.shards)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"dtype": self.dtype, "shape": list(self.shape) if self.shape is not None else None,
                               "num_samples": self.num_samples}
        if self.block_bytes is not None:
            out.update(block_hash=BLOCK_HASH, block_bytes=self.block_bytes)
        out["shards"] = [{"samples": s.samples, "data": s.data.to_json(),
                          **({"offsets": s.offsets.to_json()} if s.offsets else {})} for s in self.shards]
        out.update(meta=self.meta, format_version=self.format_version)
        return out


class _FieldError(Exception):
    """One field's problem, worded as ``what`` (the parser adds the file and the Tip)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what


Parse = Callable[[Any, str, dict[str, Any]], Any]
"""A field's validator: (value, where it is, the fields parsed so far) -> the parsed value."""


@dataclass(frozen=True, kw_only=True)
class FieldSpec:
    name: str
    """The JSON key."""
    parse: Parse
    """Checks the value's type and range and returns it parsed; raises _FieldError naming what it found."""
    required: bool = True
    """A missing required key is an error; a missing optional one takes ``default``."""
    default: Any = None
    """The value of an optional key that is absent."""


@dataclass(frozen=True, kw_only=True)
class ObjectSpec:
    fields: tuple[FieldSpec, ...]
    """Parsed in this order: a field's validator sees the fields before it."""
    expected: str
    """How the error words the object's keys, e.g. ``{name, bytes, sha256}``."""

    def keys_fit(self, value: dict) -> bool:
        required = {f.name for f in self.fields if f.required}
        return required <= set(value) <= {f.name for f in self.fields}


# --- field validators ----------------------------------------------------------------

_SHARD_NAME = re.compile(r"^shard_\d+(\.offs)?\.npy$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_HEX = re.compile(r"^[0-9a-f]*$")


def _count(value: Any, where: str, _: dict[str, Any]) -> int:
    if type(value) is not int or value < 0:
        raise _FieldError(f"{where} is {value!r}, expected an integer >= 0")
    return value


def _dtype(value: Any, where: str, _: dict[str, Any]) -> str:
    try:
        dtype = np.dtype(value) if isinstance(value, str) else None
    except (TypeError, ValueError):
        dtype = None
    if dtype is None or dtype.hasobject or dtype.fields is not None or dtype.itemsize == 0:
        raise _FieldError(f"{where} {value!r} is not a plain numeric dtype")
    return value


def _shape(value: Any, where: str, seen: dict[str, Any]) -> tuple[int, ...] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise _FieldError(f"{where} is {value!r}, expected a list of sizes or null")
    return tuple(_count(d, f"{where}[]", seen) for d in value)


def _meta(value: Any, where: str, _: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _FieldError(f"{where} is {type(value).__name__}, expected an object")
    return dict(value)


def _shard_name(value: Any, where: str, _: dict[str, Any]) -> str:
    if not isinstance(value, str) or not _SHARD_NAME.match(value):
        raise _FieldError(f"{where} is {value!r}, expected shard_N.npy or shard_N.offs.npy in the store")
    return value


def _sha256(value: Any, where: str, _: dict[str, Any]) -> str:
    if not isinstance(value, str) or not _HEX64.match(value):
        raise _FieldError(f"{where} is {value!r}, expected 64 hex digits")
    return value


def _block_hash(value: Any, where: str, _: dict[str, Any]) -> str:
    if value != BLOCK_HASH:
        raise _FieldError(f"{where} is {value!r}, expected {BLOCK_HASH!r}")
    return value


def _block_bytes(value: Any, where: str, _: dict[str, Any]) -> int:
    if type(value) is not int or value < MIN_BLOCK_BYTES or value & (value - 1):
        raise _FieldError(f"{where} is {value!r}, expected a power of two >= {MIN_BLOCK_BYTES}")
    return value


def _blocks(value: Any, where: str, seen: dict[str, Any]) -> str:
    """Needs ``bytes`` (this record's, parsed before) and ``block_bytes`` (the root's)."""
    if not isinstance(value, str) or len(value) % DIGEST_HEX or not _HEX.match(value):
        shown = value if not isinstance(value, str) or len(value) <= 40 else value[:40] + "..."
        raise _FieldError(f"{where} is {shown!r}, expected {DIGEST_HEX} hex digits per block")
    expected = block_count(seen["bytes"], seen["block_bytes"])
    if len(value) != expected * DIGEST_HEX:
        raise _FieldError(f"{where} holds {len(value) // DIGEST_HEX} block digest(s), but {seen['bytes']} bytes in "
                          f"blocks of {seen['block_bytes']} make {expected}")
    return value


def _record(spec: ObjectSpec) -> Parse:
    def parse(value: Any, where: str, seen: dict[str, Any]) -> FileRecord:
        return FileRecord(**_parse_object(value, spec, where, {"block_bytes": seen.get("block_bytes")}))
    return parse


_FILE = {
    WHOLE_FILE_SHA256: ObjectSpec(expected="{name, bytes, sha256}", fields=(
        FieldSpec(name="name", parse=_shard_name),
        FieldSpec(name="sha256", parse=_sha256),
        FieldSpec(name="bytes", parse=_count))),
    FORMAT_VERSION: ObjectSpec(expected="{name, bytes, blocks}", fields=(
        FieldSpec(name="name", parse=_shard_name),
        FieldSpec(name="bytes", parse=_count),
        FieldSpec(name="blocks", parse=_blocks))),
}


def _offsets_fit_shape(shard: dict[str, Any], where: str, seen: dict[str, Any]) -> None:
    ragged = seen["shape"] is None
    if (shard["offsets"] is None) == ragged:
        raise _FieldError(f"{where} {'lacks' if ragged else 'has'} offsets, but the store is "
                          f"{'ragged' if ragged else 'fixed-shape'}")


def _shard_spec(version: int) -> ObjectSpec:
    record = _record(_FILE[version])
    return ObjectSpec(expected="{samples, data[, offsets]}", fields=(
        FieldSpec(name="offsets", parse=lambda v, w, s: None if v is None else record(v, w, s), required=False),
        FieldSpec(name="samples", parse=_count),
        FieldSpec(name="data", parse=record)))


def _shards(value: Any, where: str, seen: dict[str, Any]) -> tuple[ShardRecord, ...]:
    if not isinstance(value, list):
        raise _FieldError(f"{where} is {type(value).__name__}, expected a list")
    spec = _shard_spec(seen["format_version"])
    shards = []
    for i, raw in enumerate(value):
        parsed = _parse_object(raw, spec, f"{where}[{i}]", seen)
        _offsets_fit_shape(parsed, f"{where}[{i}]", seen)
        shards.append(ShardRecord(**parsed))
    return tuple(shards)


_ROOT_COMMON = (FieldSpec(name="dtype", parse=_dtype), FieldSpec(name="shape", parse=_shape))
_ROOT_REST = (FieldSpec(name="shards", parse=_shards),
              FieldSpec(name="meta", parse=_meta, required=False, default={}),
              FieldSpec(name="num_samples", parse=_count))
_ROOT = {
    WHOLE_FILE_SHA256: _ROOT_COMMON + _ROOT_REST,
    FORMAT_VERSION: _ROOT_COMMON + (FieldSpec(name="block_hash", parse=_block_hash),
                                    FieldSpec(name="block_bytes", parse=_block_bytes)) + _ROOT_REST,
}


# --- the parser ------------------------------------------------------------------------

def _parse_fields(raw: dict, fields: tuple[FieldSpec, ...], where: str, seen: dict[str, Any]) -> dict[str, Any]:
    """Each field in table order; ``seen`` (the enclosing fields) plus the fields so far go to each."""
    out: dict[str, Any] = {}
    for f in fields:
        key = f"{where}.{f.name}" if where else f.name
        out[f.name] = f.parse(raw[f.name], key, {**seen, **out}) if f.name in raw else copy.copy(f.default)
    return out


def _parse_object(value: Any, spec: ObjectSpec, where: str, seen: dict[str, Any]) -> dict[str, Any]:
    if not isinstance(value, dict) or not spec.keys_fit(value):
        raise _FieldError(f"{where} is {value!r}, expected {spec.expected}")
    return _parse_fields(value, spec.fields, where, seen)


def parse_index(raw: Any, file: Path) -> StoreIndex:
    """The decoded JSON of ``file`` as a :class:`StoreIndex`; a StoreError naming the first bad field."""
    if not isinstance(raw, dict):
        raise _bad(file, f"it holds a {type(raw).__name__}, expected an object")
    version = raw.get("format_version")
    if type(version) is not int or version not in READABLE_VERSIONS:
        raise StoreError(f"{file}: format_version {version!r} is unknown; this torchsmith reads versions "
                         f"{' and '.join(map(str, READABLE_VERSIONS))}.\n"
                         "Tip: re-pack the source with this version of torchsmith.")
    fields = _ROOT[version]
    missing = sorted(f.name for f in fields if f.required and f.name not in raw)
    if missing:
        raise _bad(file, f"key {missing[0]!r} is missing")
    try:
        parsed = _parse_fields(raw, fields, "", {"format_version": version})
    except _FieldError as err:
        raise _bad(file, err.what) from None
    parsed.pop("block_hash", None)  # checked: the one algorithm this torchsmith knows
    return StoreIndex(**parsed, format_version=version)


def _bad(file: Path, what: str) -> StoreError:
    return StoreError(f"{file} is not a valid store index: {what}.\n"
                      "Tip: re-pack the source; index.json is written by `torchsmith data pack`.")
