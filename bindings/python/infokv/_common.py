"""Shared pieces of the infokv package: argument conversion, value types, the handle-owning base class."""
from __future__ import annotations

import contextlib
import enum
import math
import numbers
import os
from typing import Any, Callable, Dict, List, NamedTuple, Sequence, Tuple, Union

from . import capi as _c
from ._errors import BadHandleError, InvalidArgumentError, IoError, check as _check, missing_file as _missing_file

_TOO_SMALL = _c.IKV_ERR_BUFFER_TOO_SMALL
PathLike = Union[str, "os.PathLike[str]"]
Prompt = Union[str, bytes, Sequence[int], None]


Message = Union[Dict[str, str], Tuple[str, str]]


def _message(m: Message) -> Tuple[str, str]:
    """A chat message as (role, content): {"role": ..., "content": ...} or a (role, content) pair."""
    if isinstance(m, dict):
        try:
            return str(m["role"]), str(m["content"])
        except KeyError as e:
            raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"chat message without {e.args[0]!r}: {m!r}") from None
    if isinstance(m, (tuple, list)) and len(m) == 2:
        return str(m[0]), str(m[1])
    raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"a chat message is a dict with role and content or a "
                               f"(role, content) pair, not {m!r}")


def _member(kind: "type[enum.IntEnum]", what: str, value: Any) -> int:
    """A name ('infokv', 'F16'), an enum member or a plain int of one kind to its C value. A name or number of
    another kind (a stat name given as a dtype) is refused with the names this kind has."""
    names = [m.name.lower() for m in kind]
    if isinstance(value, enum.Enum) and not isinstance(value, kind):
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"{what}: {value!r} is not a {kind.__name__}")
    if isinstance(value, kind):
        return int(value)
    if isinstance(value, str):
        key = value.strip().upper().replace("-", "_")
        if key in kind.__members__:
            return int(kind[key])
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"unknown {what} {value!r}; one of {names}")
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        if int(value) in {int(m) for m in kind}:
            return int(value)
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"{what} {int(value)} is not one of "
                                   f"{ {m.name.lower(): int(m) for m in kind} }")
    raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT,
                               f"{what} must be a name ({names}) or a {kind.__name__}, not {type(value).__name__}")


def _whole(what: str, value: Any) -> int:
    """An integer option: ints and whole floats; bools, fractions and other types are refused (never truncated)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT,
                                   f"{what} must be a whole number, not {type(value).__name__} {value!r}")
    if isinstance(value, numbers.Integral):
        return int(value)
    if not math.isfinite(value) or value != int(value):
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"{what} must be a whole number, not {value!r}")
    return int(value)


def _constant(prefix: str, value: Union[str, int]) -> int:
    """'n_vocab' -> IKV_MODEL_N_VOCAB etc.; ints pass through. Reads the C header's constants, so new ones work."""
    if isinstance(value, str):
        name = prefix + value.upper().replace("-", "_")
        if not hasattr(_c, name):
            choices = sorted(n[len(prefix):].lower() for n in dir(_c) if n.startswith(prefix))
            raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"unknown value {value!r}; one of {choices}")
        return int(getattr(_c, name))
    return _whole("property", value)


def _check_path(result: Any, path: str) -> Any:
    """_check, with an I/O error about a file that does not exist raised as :class:`MissingFileError`."""
    try:
        return _check(result)
    except IoError as e:
        raise _missing_file(e, path) from None


def _real(what: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT,
                                   f"{what} must be a number, not {type(value).__name__} {value!r}")
    return float(value)


def _fill(struct: Any, options: Dict[str, Any], aliases: Dict[str, Callable[[Any, Any], None]]) -> None:
    """Sets fields of a SWIG options struct from keyword arguments (no hand-written mirror of the struct)."""
    for key, value in options.items():
        if value is None:
            continue
        if key in aliases:
            aliases[key](struct, value)
        elif key in ("struct_size", "version") or not hasattr(type(struct), key):
            fields = sorted(n for n, v in vars(type(struct)).items() if isinstance(v, property)
                            and n not in ("struct_size", "version", "thisown"))
            raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT,
                                       f"unknown option {key!r}; options: {sorted(set(fields) | set(aliases))}")
        else:
            current = getattr(struct, key)
            if isinstance(current, bool) or isinstance(current, int):
                setattr(struct, key, _whole(key, value))
            elif isinstance(current, float):
                setattr(struct, key, _real(key, value))
            else:
                setattr(struct, key, value)


# ------------------------------------------------------------------------------------------------------------
class Token(NamedTuple):
    """One generated token: its id and the text it completed (may be empty; id -1 is a final flush)."""
    id: int
    text: str


class Completion(NamedTuple):
    """What :meth:`Session.complete` made."""
    tokens: List[int]
    text: str
    cancelled: bool


def evidence_name(evidence: int) -> str:
    """The name of an IKV_EVIDENCE_* value ("window_attention", "infokv", "accumulated_attention", "last_query",
    "recency", "key_norm", "replay"); "unknown" for any other value."""
    return _c.ikv_evidence_name(int(evidence))


#: Every kind of evidence the auto policy chooses from, name -> IKV_EVIDENCE_* value (read from the C header).
EVIDENCE: Dict[str, int] = {evidence_name(getattr(_c, n)): int(getattr(_c, n))
                            for n in dir(_c) if n.startswith("IKV_EVIDENCE_")}


class AutoLayer(NamedTuple):
    """One layer of what the auto policy chose: the evidence that ranked its tokens (a name of :data:`EVIDENCE`),
    the attention weight of the InfoKV mix (1.0 unless the evidence is "infokv"), the tokens it kept and its proxy
    loss at that budget."""
    evidence: str
    alpha: float
    budget: int
    loss: float


class AutoReport(NamedTuple):
    """What the auto policy chose at a sequence's latest compression (:meth:`Session.auto_report`): per layer, the
    mean proxy loss (relative error of the observation window's attention output), the tokens kept in all layers,
    what a uniform budget would have kept (0 under a quality target) and the quality target (0.0: a byte budget)."""
    layers: List[AutoLayer]
    loss: float
    tokens: int
    uniform_tokens: int
    max_loss: float


def _sized_bytes(fn: Callable[..., Any], *args: Any) -> bytes:
    """Calls a C function with the size-query protocol (out buffer first) and returns the bytes it wrote."""
    r = fn(0, *args)
    if r[0] == _TOO_SMALL or (r[0] >= 0 and r[2] > 0):
        r = fn(r[2] + 1, *args)
    buf, n = _check(r)
    return bytes(buf[:n])


class _Owner:
    """Life cycle shared by every handle owner: a context manager, closed when collected, and ``handle`` that
    raises BadHandleError once closed. Subclasses set ``_what``, ``_h`` and ``close()``."""

    _what = "object"
    _h: Any = None

    def close(self) -> None:  # pragma: no cover - every subclass overrides it
        raise NotImplementedError

    def _free_with(self, free: Callable[[Any], Any]) -> None:
        """Takes the handle (under the owner's ``_lock`` where it has one, so no call is in progress) and frees it
        once: a second close finds None."""
        with getattr(self, "_lock", None) or contextlib.nullcontext():
            h, self._h = self._h, None
        if h is not None:
            free(h)

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    @property
    def handle(self) -> Any:
        if self._h is None:
            raise BadHandleError(_c.IKV_ERR_BAD_HANDLE, f"the {self._what} is closed")
        return self._h
