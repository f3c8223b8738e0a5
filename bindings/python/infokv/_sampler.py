"""Samplers: sampling settings and state."""
from __future__ import annotations

from typing import Any

from . import capi as _c
from ._common import _Owner, _fill
from ._config import Config
from ._errors import check as _check


class Sampler(_Owner):
    """Sampling settings and state (the repetition penalty's history). Keyword arguments are the fields of the C
    ikv_sampler_options: temperature (<= 0: greedy), top_k, top_p, min_p, repeat_penalty, repeat_last_n, seed."""

    _what = "sampler"

    def __init__(self, **options: Any) -> None:
        self._h = None
        opts = _c.ikv_sampler_options()
        _check(_c.ikv_sampler_options_init(opts))
        _fill(opts, options, {})
        self._h = _check(_c.ikv_sampler_create(opts))

    @classmethod
    def greedy(cls) -> "Sampler":
        return cls(temperature=0.0)

    @classmethod
    def from_config(cls, config: Config) -> "Sampler":
        """A sampler from the config's sampler settings."""
        s = cls.__new__(cls)
        s._h = None
        s._h = _check(config._use(_c.ikv_sampler_create_with_config))
        return s

    def close(self) -> None:
        self._free_with(_c.ikv_sampler_free)
