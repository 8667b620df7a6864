"""Read DCP's ``.metadata`` without letting it run code.

``torch.distributed.checkpoint``'s ``FileSystemReader.read_metadata`` calls ``pickle.load`` on
``.metadata``: a crafted file runs any callable it names (``eval``, ``os.system``) the moment a
run resumes. :class:`SafeFileSystemReader` reads it with an unpickler that resolves only the
classes DCP's metadata is made of (an allowlist, the approach of ``torch.load(weights_only=True)``
and its ``torch.serialization.add_safe_globals``); any other global is refused with the file's
name, before anything is called.

Example::

    reader = SafeFileSystemReader("ckpt/step_00000040")
    dcp.load(state, storage_reader=reader)
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import Metadata, StorageMeta

_METADATA = "torch.distributed.checkpoint.metadata"
ALLOWED: dict[str, frozenset[str]] = {
    _METADATA: frozenset({"Metadata", "TensorStorageMetadata", "BytesStorageMetadata", "TensorProperties",
                          "ChunkStorageMetadata", "MetadataIndex", "StorageMeta", "_MEM_FORMAT_ENCODING"}),
    "torch.distributed.checkpoint.filesystem": frozenset({"_StorageInfo"}),
    "torch.serialization": frozenset({"_get_layout"}),  # a layout from its name: torch.strided
    "torch": frozenset({"Size"}),  # plus every torch dtype, checked below
    "pathlib": frozenset({"Path", "PosixPath", "WindowsPath", "PurePath", "PurePosixPath", "PureWindowsPath"}),
    "collections": frozenset({"OrderedDict"}),
    "builtins": frozenset({"set", "frozenset", "slice", "complex"}),
}
"""Module -> names the metadata pickle may use. Nothing here can run code or touch files:
constructors of DCP's dataclasses, torch.Size, dtypes, layouts, paths and plain containers."""


class MetadataRefusedError(pickle.UnpicklingError):
    """``.metadata`` names a global outside the allowlist; the message names the file and the global."""


class _RestrictedUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, path: str):
        super().__init__(file)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if name in ALLOWED.get(module, ()):
            return super().find_class(module, name)
        if module == "torch" and isinstance(getattr(torch, name, None), torch.dtype):
            return getattr(torch, name)
        raise MetadataRefusedError(
            f"refused to read {self.path}: it asks to load {module}.{name}, which is not part of DCP checkpoint "
            "metadata; torchsmith never unpickles anything else (it could run code).\n"
            "Tip: only resume from checkpoints you or torchsmith wrote; delete this step directory to fall back "
            "to the previous one.")


def load_metadata(path: str | os.PathLike[str]) -> Metadata:
    """Unpickle a DCP ``.metadata`` file with the allowlist; :class:`MetadataRefusedError` otherwise."""
    path = Path(path)
    data = path.read_bytes()
    try:
        meta = _RestrictedUnpickler(io.BytesIO(data), str(path)).load()
    except MetadataRefusedError:
        raise
    except Exception as err:  # truncated or garbled: pickle raises many types; none may escape untyped
        raise MetadataRefusedError(f"{path} is not readable DCP metadata ({type(err).__name__}).\n"
                                   "Tip: the save was interrupted or the file damaged; delete this step "
                                   "directory to fall back to the previous one.") from None
    if not isinstance(meta, Metadata):
        raise MetadataRefusedError(f"{path} holds a {type(meta).__name__}, not DCP Metadata.")
    return meta


class SafeFileSystemReader(FileSystemReader):
    """``FileSystemReader`` whose ``read_metadata`` uses the restricted unpickler."""

    def read_metadata(self, *args: Any, **kwargs: Any) -> Metadata:
        path = self._get_metadata_path(kwargs.get("rank"))
        metadata = load_metadata(path)
        storage_meta = getattr(metadata, "storage_meta", None)
        if storage_meta is None:
            storage_meta = metadata.storage_meta = StorageMeta()
        storage_meta.load_id = self.load_id
        return metadata
