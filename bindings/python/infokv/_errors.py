"""Status codes as exceptions: a base :class:`Error` and one subclass per status kind."""
from __future__ import annotations

from typing import Dict, Type

from . import capi as _c


class Error(Exception):
    """Base class of every infokv error. ``status`` is the C status code (negative), ``message`` the library's
    message for the failed call."""

    status: int = 0

    def __init__(self, status: int, message: str = "") -> None:
        super().__init__(f"{_c.ikv_status_string(status)}: {message}" if message else _c.ikv_status_string(status))
        self.status = status
        self.message = message

    def __str__(self) -> str:  # OSError and KeyError would format differently
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(Error, ValueError):
    """IKV_ERR_INVALID_ARGUMENT: a bad argument or option value."""


class IoError(Error, OSError):
    """IKV_ERR_IO: a file could not be opened, read or written."""


class MissingFileError(IoError, FileNotFoundError):
    """IKV_ERR_IO because the named file does not exist: both an :class:`IoError` and the builtin
    :class:`FileNotFoundError` (``errno`` is ENOENT, ``filename`` the path)."""


def missing_file(e: Error, path: str) -> Error:
    """``e`` as a :class:`MissingFileError` when it is an I/O error about a path that does not exist."""
    import errno
    import os
    if not isinstance(e, IoError) or os.path.lexists(path):
        return e
    m = MissingFileError(e.status, e.message)
    m.errno, m.strerror, m.filename = errno.ENOENT, os.strerror(errno.ENOENT), path
    return m


class BadModelError(Error):
    """IKV_ERR_BAD_MODEL: a malformed or truncated model file."""


class UnsupportedError(Error):
    """IKV_ERR_UNSUPPORTED: a valid request this version does not implement."""


class OutOfMemoryError(Error, MemoryError):
    """IKV_ERR_OUT_OF_MEMORY."""


class KvFullError(Error):
    """IKV_ERR_KV_FULL: the KV pool cannot hold the step's tokens (nothing was changed)."""


class OutOfRangeError(Error, IndexError):
    """IKV_ERR_OUT_OF_RANGE: a token id outside the vocabulary, a length beyond the sequence."""


class CancelledError(Error):
    """IKV_ERR_CANCELLED: a callback asked to stop."""


class BadSnapshotError(Error):
    """IKV_ERR_BAD_SNAPSHOT: a corrupt snapshot."""


class WrongModelError(Error):
    """IKV_ERR_WRONG_MODEL: a snapshot made with another model, tokenizer or cache layout."""


class VersionError(Error):
    """IKV_ERR_VERSION: a file needs a newer reader."""


class BadConfigError(Error):
    """IKV_ERR_BAD_CONFIG: a malformed config or an out-of-range value."""


class NoDeviceError(Error):
    """IKV_ERR_NO_DEVICE: the requested device is not available."""


class BufferTooSmallError(Error):
    """IKV_ERR_BUFFER_TOO_SMALL (the Python layer sizes buffers itself; seeing this is a bug)."""


class NotFoundError(Error):
    """IKV_ERR_NOT_FOUND: no such sequence."""


class BadStateError(Error):
    """IKV_ERR_BAD_STATE: the call is not valid now (e.g. logits before any decode)."""


class BadHandleError(Error):
    """IKV_ERR_BAD_HANDLE: a closed or foreign handle."""


class BusyError(Error):
    """IKV_ERR_BUSY: another thread is inside a call on the same session or sampler (use one from one thread at a
    time, or lock around it); nothing was changed."""


class InternalError(Error):
    """IKV_ERR_INTERNAL: a bug in infokv; please report it with the message."""


_BY_STATUS: Dict[int, Type[Error]] = {}


def _register() -> None:
    # Every IKV_ERR_* constant of the C header gets a class: the ones above by name, new ones made here, so a
    # status added to the C ABI surfaces as its own exception type without an edit.
    for name in dir(_c):
        if not name.startswith("IKV_ERR_"):
            continue
        kind = name[len("IKV_ERR_"):]
        cls_name = "".join(p.capitalize() for p in kind.split("_")) + "Error"
        cls = globals().get(cls_name)
        if cls is None and kind == "IO":
            cls = IoError
        if cls is None:
            cls = type(cls_name, (Error,), {"__doc__": f"{name}."})
            globals()[cls_name] = cls
        cls.status = getattr(_c, name)
        _BY_STATUS[getattr(_c, name)] = cls


_register()


def error_for(status: int, message: str = "") -> Error:
    """The exception for a status (the base :class:`Error` for one this version does not know)."""
    return _BY_STATUS.get(status, Error)(status, message)


def check(result):
    """Unpacks a raw call's result ([status, outputs...] or status) and raises on a negative status.
    Returns None, the one output, or a tuple of outputs."""
    if isinstance(result, list):
        status, outs = result[0], result[1:]
    else:
        status, outs = result, []
    if status < 0:
        raise error_for(status, _c.ikv_last_error_message())
    if not outs:
        return None
    return outs[0] if len(outs) == 1 else tuple(outs)
