"""Configs (schemas/config.fbs) and snapshot inspection."""
from __future__ import annotations

import json
import os
import tempfile
import threading
from typing import Any, Callable, Dict, Union

from . import capi as _c
from ._common import PathLike, _Owner, _sized_bytes
from ._errors import IoError, check as _check, missing_file as _missing_file


class Config(_Owner):
    """Settings for models, sessions and samplers (the FlatBuffers schema schemas/config.fbs), made from JSON or
    the binary form and read back in either. Immutable; a context manager (``close()`` frees it; objects made from
    it do not need it any more).

        with infokv.Config.from_json('{"model_path": "m.gguf", "compression": {"policy": "infokv",
                                      "budget_fraction": 0.5}}') as cfg:
            model = infokv.Model.from_config(cfg)
            session = model.session(config=cfg)

    A malformed config, an unknown field or an out-of-range value raises :class:`BadConfigError` naming the field.
    """

    _what = "config"

    def __init__(self) -> None:
        """A config holding every default."""
        self._h = None
        self._lock = threading.RLock()
        self._h = _check(_c.ikv_config_create())

    @classmethod
    def _wrap(cls, h: Any) -> "Config":
        c = cls.__new__(cls)
        c._lock = threading.RLock()
        c._h = h
        return c

    def _use(self, f: Callable[[Any], Any]) -> Any:
        """Calls f with the live handle; close() waits until it returns (the C call releases the GIL)."""
        with self._lock:
            return f(self.handle)

    @classmethod
    def from_json(cls, text: Union[str, bytes]) -> "Config":
        """Parses JSON text (absent fields keep their defaults)."""
        return cls._wrap(_check(_c.ikv_config_from_json(text)))

    @classmethod
    def from_dict(cls, fields: Dict[str, Any]) -> "Config":
        """A config from a dict of the schema's fields (serialised to JSON and parsed)."""
        return cls.from_json(json.dumps(fields))

    @classmethod
    def from_binary(cls, data: bytes) -> "Config":
        """Reads the binary form (a verified FlatBuffer, identifier "IKVC")."""
        return cls._wrap(_check(_c.ikv_config_from_binary(bytes(data))))

    def to_json(self) -> str:
        """Every field as indented JSON."""
        return self._use(lambda h: _sized_bytes(_c.ikv_config_to_json, h)).decode("utf-8")

    def to_dict(self) -> Dict[str, Any]:
        return json.loads(self.to_json())

    def to_binary(self) -> bytes:
        """The binary form."""
        return self._use(lambda h: _sized_bytes(_c.ikv_config_to_binary, h))

    @property
    def model_path(self) -> str:
        """The config's model path ("" when unset)."""
        return self._use(lambda h: _sized_bytes(_c.ikv_config_get_model_path, h)).decode("utf-8")

    def close(self) -> None:
        self._free_with(_c.ikv_config_free)


    def __repr__(self) -> str:
        return f"<infokv.Config{' closed' if self._h is None else ''}>"


def inspect_snapshot(source: Union[PathLike, bytes, bytearray, memoryview]) -> Dict[str, Any]:
    """Checks a snapshot (a file path, or the bytes of :meth:`Session.save_bytes`) without a model and describes it:
    header, policy, sizes, per-layer kept counts. Raises :class:`BadSnapshotError`, :class:`VersionError`,
    :class:`IoError`."""
    if isinstance(source, (bytes, bytearray, memoryview)):
        fd, tmp = tempfile.mkstemp(suffix=".ikvs")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(source)
            return inspect_snapshot(tmp)
        finally:
            os.unlink(tmp)
    try:
        raw = _sized_bytes(_c.ikv_snapshot_inspect, os.fspath(source))
    except IoError as e:
        raise _missing_file(e, os.fspath(source)) from None
    return json.loads(raw.decode("utf-8"))
