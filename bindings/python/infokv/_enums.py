"""Enums of the C constants, accepted wherever the CLI's names are."""
from __future__ import annotations

import enum

from . import capi as _c


class _Named(enum.IntEnum):
    """An enum of C constants whose str() is the lower-case name the CLI, configs and keyword options use."""

    def __str__(self) -> str:
        return self.name.lower()


class Policy(_Named):
    """Compression policies (the C IKV_POLICY_* values); accepted wherever a policy name is."""
    NONE = _c.IKV_POLICY_NONE
    INFOKV = _c.IKV_POLICY_INFOKV
    SNAPKV = _c.IKV_POLICY_SNAPKV
    H2O = _c.IKV_POLICY_H2O
    STREAMING = _c.IKV_POLICY_STREAMING
    TOVA = _c.IKV_POLICY_TOVA
    PYRAMIDKV = _c.IKV_POLICY_PYRAMIDKV
    AUTO = _c.IKV_POLICY_AUTO


class KvDtype(_Named):
    """KV cache element types (IKV_KV_F32, ...); accepted wherever a dtype name is."""
    F32 = _c.IKV_KV_F32
    F16 = _c.IKV_KV_F16
    BF16 = _c.IKV_KV_BF16


class KvStat(_Named):
    """Pool statistics for :meth:`Session.kv_stat` (IKV_KV_BLOCKS_TOTAL, ...)."""
    BLOCKS_TOTAL = _c.IKV_KV_BLOCKS_TOTAL
    BLOCKS_USED = _c.IKV_KV_BLOCKS_USED
    BLOCKS_FREE = _c.IKV_KV_BLOCKS_FREE
    BLOCK_BYTES = _c.IKV_KV_BLOCK_BYTES
    BYTES_USED = _c.IKV_KV_BYTES_USED
    BLOCK_SIZE = _c.IKV_KV_BLOCK_SIZE
    HOST_BYTES = _c.IKV_KV_HOST_BYTES


class ChatProtect(_Named):
    """What chat calls protect from eviction (IKV_CHAT_PROTECT_*): SYSTEM (the default) keeps the system prompt and
    the template's control tokens; FAIR keeps the control tokens and gives each message a fair span; NONE nothing."""
    SYSTEM = _c.IKV_CHAT_PROTECT_SYSTEM
    NONE = _c.IKV_CHAT_PROTECT_NONE
    FAIR = _c.IKV_CHAT_PROTECT_FAIR


class Shape(_Named):
    """How a budget is spread over layers (IKV_SHAPE_*)."""
    UNIFORM = _c.IKV_SHAPE_UNIFORM
    PYRAMID = _c.IKV_SHAPE_PYRAMID
