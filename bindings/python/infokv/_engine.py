"""The engine: many conversations over one KV pool, decoded in continuous batches; when memory runs out, each
conversation is compressed, moved to a spill directory or dropped and recomputed, whichever is cheapest."""
from __future__ import annotations

import json
import threading
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from . import capi as _c
from ._common import PathLike, _Owner, _fill, _member, _TOO_SMALL, _sized_bytes
from ._enums import EngineStat, Strategy, TurnState, Where
from ._errors import check as _check

if TYPE_CHECKING:
    from ._model import Model


def _ids(fn: Any, *args: Any) -> List[int]:
    """A C function with the id-buffer size-query protocol (capacity first) as a list of ints."""
    r = fn(0, *args)
    if r[0] == _TOO_SMALL or (r[0] >= 0 and r[2] > 0):
        r = fn(max(1, r[2]), *args)
    arr, n = _check(r)
    return [int(x) for x in arr[:n]]


class Engine(_Owner):
    """Many conversations over one KV pool (DESIGN.md §9, "Where, and whether to recompute").

    ``strategy``: what happens when a step does not fit the pool: "auto" (default: per conversation the cheapest of
    compressing it further, moving it to ``spill_dir`` and back, or dropping it and recomputing it from its tokens,
    by a cost model measured at start-up), "fail", "recompute", "move" or "compress". Other keyword options are the
    session's (as :class:`Session`: ``kv_pool_blocks``, ``policy``, ``threads``...); a compression ``policy`` lets
    the engine compress, without one it moves and recomputes.

    Use::

        with infokv.Engine(model, kv_pool_blocks=400) as eng:
            a = eng.open()
            eng.submit(a, model.tokenize("Once upon a time"), max_tokens=32)
            for conv, token in eng.run():          # steps until no turn is pending
                ...
            print(eng.generated(a), eng.report()["decisions"])

    An engine must be used by one thread at a time; its methods take a lock.
    """

    _what = "engine"

    def __init__(self, model: "Model", *, strategy: Union[str, int] = "auto", spill_dir: Optional[PathLike] = None,
                 **options: Any) -> None:
        from ._session import _SESSION_ALIASES
        self._h = None
        self._lock = threading.RLock()
        self.model = model
        opts = _c.ikv_session_options()
        _check(_c.ikv_session_options_init(opts))
        _fill(opts, options, _SESSION_ALIASES)
        st = _member(Strategy, "strategy", strategy)
        self._h = _check(_c.ikv_engine_create(model.handle, opts, st, None if spill_dir is None else str(spill_dir)))

    def close(self) -> None:
        """Frees the engine, its conversations and their spill files. Idempotent."""
        self._free_with(_c.ikv_engine_free)

    def prefix_cache(self, memory_bytes: int = 256 << 20, disk_dir: Optional[PathLike] = None,
                     redis: Optional[str] = None) -> None:
        """Turns the prefix cache on with these tiers (memory, a directory, a Redis/Valkey "host:port"), or off when
        none is given (memory_bytes=0): new conversations start from the longest cached prefix of their prompt."""
        with self._lock:
            _check(_c.ikv_engine_prefix_cache(self.handle, int(memory_bytes),
                                              None if disk_dir is None else str(disk_dir), redis))

    def open(self, priority: int = 0, memory_limit_tokens: int = 0, **sampling: Any) -> int:
        """A new conversation's id. Higher ``priority`` runs first and is preempted last; ``memory_limit_tokens``
        compresses it to that many tokens when it holds more (needs a policy); ``sampling`` are the sampler's options
        (temperature, top_k, ..., seed); none: greedy."""
        with self._lock:
            so = None
            if sampling:
                so = _c.ikv_sampler_options()
                _check(_c.ikv_sampler_options_init(so))
                _fill(so, sampling, {})
            return int(_check(_c.ikv_engine_open(self.handle, int(priority), int(memory_limit_tokens), so)))

    def submit(self, conversation: int, tokens: Sequence[int], max_tokens: int) -> None:
        """Queues a turn: ``tokens`` appended to the conversation, then up to ``max_tokens`` generated."""
        with self._lock:
            _check(_c.ikv_engine_submit(self.handle, int(conversation), list(tokens), int(max_tokens)))

    def pending(self) -> int:
        """Queued and running turns."""
        with self._lock:
            return int(_check(_c.ikv_engine_pending(self.handle)))

    def step(self) -> List[Tuple[int, int]]:
        """One scheduling step; the (conversation, token) pairs it produced."""
        with self._lock:
            n = max(1, 2 * self.pending())
            arr, count = _check(_c.ikv_engine_step(n, self.handle))
            return [(int(arr[i]), int(arr[i + 1])) for i in range(0, count, 2)]

    def run(self) -> Iterator[Tuple[int, int]]:
        """Steps until no turn is pending, yielding each (conversation, token) as it is produced."""
        while self.pending() > 0:
            yield from self.step()

    def state(self, conversation: int) -> TurnState:
        with self._lock:
            return TurnState(_check(_c.ikv_engine_turn_state(self.handle, int(conversation))))

    def where(self, conversation: int) -> Where:
        with self._lock:
            return Where(_check(_c.ikv_engine_where(self.handle, int(conversation))))

    def generated(self, conversation: int) -> List[int]:
        """The tokens the conversation's latest turn generated."""
        with self._lock:
            return _ids(_c.ikv_engine_generated, self.handle, int(conversation))

    def failure(self, conversation: int) -> str:
        """Why its latest turn failed ("" when it did not)."""
        with self._lock:
            return _sized_bytes(_c.ikv_engine_failure, self.handle, int(conversation)).decode("utf-8", "replace")

    def close_conversation(self, conversation: int) -> None:
        """Frees a conversation's memory wherever it is."""
        with self._lock:
            _check(_c.ikv_engine_close(self.handle, int(conversation)))

    def stat(self, stat: Union[str, int, EngineStat]) -> int:
        with self._lock:
            return int(_check(_c.ikv_engine_stat(self.handle, _member(EngineStat, "stat", stat))))

    def stats(self) -> Dict[str, int]:
        """Every counter by name (steps, decoded_tokens, compressions, moves, recomputes, bytes_moved, ...)."""
        return {str(s): self.stat(s) for s in EngineStat}

    def report(self) -> Dict[str, Any]:
        """The cost model's rates and every decision: what was done to which conversation, why, estimated and
        measured cost (see ikv_engine_report_json)."""
        with self._lock:
            return json.loads(_sized_bytes(_c.ikv_engine_report_json, self.handle).decode("utf-8"))

    def __repr__(self) -> str:
        return f"<infokv.Engine {'closed' if self._h is None else 'open'}>"
