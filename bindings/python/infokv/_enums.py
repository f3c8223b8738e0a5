"""Enums of the C constants, accepted wherever the CLI's names are. Each is made from the C header's constants (as
SWIG exposes them in :mod:`infokv.capi`), so a value added to the C ABI appears here without an edit."""
from __future__ import annotations

import enum
from typing import Iterable, Type

from . import capi as _c


class _Named(enum.IntEnum):
    """An enum of C constants whose str() is the lower-case name the CLI, configs and keyword options use."""

    def __str__(self) -> str:
        return self.name.lower()


def _from_c(name: str, prefix: str, doc: str, only: Iterable[str] = (), skip: Iterable[str] = ()) -> Type[_Named]:
    keep, drop = set(only), set(skip)
    members = sorted(((n[len(prefix):], int(getattr(_c, n))) for n in dir(_c) if n.startswith(prefix)
                      and (not keep or n[len(prefix):] in keep) and n[len(prefix):] not in drop), key=lambda kv: kv[1])
    cls = _Named(name, members, module=__name__)  # type: ignore[call-overload]
    cls.__doc__ = doc
    return cls


_DTYPES = ("F32", "F16", "BF16", "Q8_0", "Q4_0")  # IKV_KV_ also prefixes the pool statistics
Policy = _from_c("Policy", "IKV_POLICY_", "Compression policies (IKV_POLICY_*); accepted wherever a policy name is.")
KvDtype = _from_c("KvDtype", "IKV_KV_", "KV cache element types (IKV_KV_F32, ...); accepted wherever a dtype name is.",
                  only=_DTYPES)
KvStat = _from_c("KvStat", "IKV_KV_STAT_", "Pool statistics for Session.kv_stat (IKV_KV_STAT_BLOCKS_TOTAL, ...).")
Shape = _from_c("Shape", "IKV_SHAPE_", "How a budget is spread over layers (IKV_SHAPE_*).")
Question = _from_c("Question", "IKV_QUESTION_",
                   "Which question a compression serves (IKV_QUESTION_*): NEXT (the tokens that follow at once), LATER "
                   "(a question not yet asked: a probe question's queries stand in for it; the default) or BOTH.")
ChatProtect = _from_c("ChatProtect", "IKV_CHAT_PROTECT_",
                      "What chat calls protect from eviction (IKV_CHAT_PROTECT_*): SYSTEM (the default) keeps the "
                      "system prompt and the template's control tokens; FAIR keeps the control tokens and gives each "
                      "message a fair span; NONE nothing.")
Strategy = _from_c("Strategy", "IKV_STRATEGY_",
                   "What an Engine does when a step does not fit its pool (IKV_STRATEGY_*): AUTO (the cheapest of "
                   "compress, move and recompute per conversation; the default), FAIL, RECOMPUTE, MOVE, COMPRESS.")
TurnState = _from_c("TurnState", "IKV_TURN_", "The state of a conversation's latest turn (IKV_TURN_*).")
Where = _from_c("Where", "IKV_WHERE_", "Where a conversation's cache is (IKV_WHERE_*): NONE, RESIDENT, MOVED, DROPPED.")
EngineStat = _from_c("EngineStat", "IKV_ENGINE_STAT_", "Engine counters for Engine.stat (IKV_ENGINE_STAT_*).")
