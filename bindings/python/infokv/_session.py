"""Sessions: a KV cache over a model with sequences; decoding, generation, chat, compression, snapshots."""
from __future__ import annotations

import codecs
import math
import numbers
import os
import threading
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np

from . import capi as _c
from ._common import (
    AutoLayer, AutoReport, Completion, Message, PathLike, Prompt, Token, evidence_name, _Owner, _TOO_SMALL,
    _check_path, _fill, _member, _message, _sized_bytes, _whole)
from ._config import Config
from ._enums import ChatProtect, KvDtype, KvStat, Policy, Question, Shape
from ._errors import InvalidArgumentError, check as _check
from ._sampler import Sampler

if TYPE_CHECKING:
    from ._model import Model


def _set_budget(o: Any, v: Union[int, float, str]) -> None:
    """budget=: a fraction in (0, 1] of each sequence's length (0.25, "25%", "0.25") or a whole number of tokens
    per layer (128, "128"), as the CLI's --budget. Anything else is refused, never rounded."""
    text = None
    if isinstance(v, str):
        text = v.strip()
        try:
            v = float(text[:-1]) / 100.0 if text.endswith("%") else (int(text) if text.isdigit() else float(text))
        except ValueError:
            raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT,
                                       f"budget {text!r}: expected a fraction (0.25, \"25%\") or tokens (128)") from None
    if isinstance(v, bool) or not isinstance(v, numbers.Real) or not math.isfinite(v) or v <= 0:
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"budget must be a fraction in (0, 1] or a positive "
                                   f"whole number of tokens, not {type(v).__name__} {v!r}")
    if isinstance(v, numbers.Integral):
        o.budget_tokens, o.budget_fraction = int(v), 0.0
    elif v <= 1.0:
        o.budget_fraction, o.budget_tokens = float(v), 0
    elif v == int(v):
        o.budget_tokens, o.budget_fraction = int(v), 0.0
    else:
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT,
                                   f"budget {v!r}: a fraction must be in (0, 1], a token count a whole number")


def _set_layer_precision(o: Any, v: Any) -> None:
    if isinstance(v, bool):
        o.layer_precision = _c.IKV_LAYER_PRECISION_AUTO if v else _c.IKV_LAYER_PRECISION_OFF
    elif isinstance(v, str) and v.lower() in ("auto", "off"):
        o.layer_precision = _c.IKV_LAYER_PRECISION_AUTO if v.lower() == "auto" else _c.IKV_LAYER_PRECISION_OFF
    else:
        raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, f"layer_precision {v!r}: 'auto', 'off', True or False")


_SESSION_ALIASES: Dict[str, Callable[[Any, Any], None]] = {
    "policy": lambda o, v: setattr(o, "policy", _member(Policy, "policy", v)),
    "kv_dtype": lambda o, v: setattr(o, "kv_dtype", _member(KvDtype, "kv_dtype", v)),
    "shape": lambda o, v: setattr(o, "shape", _member(Shape, "shape", v)),
    "budget": _set_budget,
    "threads": lambda o, v: setattr(o, "n_threads", _whole("threads", v)),
    "compress_after_prefill": lambda o, v: setattr(o, "compress_after_prefill", int(bool(v))),
    "layer_precision": _set_layer_precision,
}


class Session(_Owner):
    """A KV cache over a model with one or more sequences (sequence 0 exists from the start).

    Keyword options are the fields of the C ikv_session_options (n_threads, kv_dtype, block_size, ubatch,
    kv_pool_blocks, kv_pool_bytes, policy, budget_tokens, budget_fraction, window, interval, alpha, tau, ...), plus
    conveniences: ``policy="infokv"`` (or "none", "snapkv", "h2o", "streaming", "tova", "pyramidkv", "auto"),
    ``budget=0.5`` (a fraction) or ``budget=128`` (tokens per layer), ``kv_dtype="f16"``, ``threads=4``.
    ``policy="auto", max_loss=0.05`` compresses to a quality target instead of a budget (see :meth:`auto_report`).
    ``layer_precision="auto"`` (the default; or True) lets auto hold a layer at q8_0 under a byte budget where that
    keeps more than it loses, ``"off"`` (or False) keeps every layer in ``kv_dtype`` (see :meth:`layer_dtype`).

    ``device="auto"`` (the default; also None: the runtime's choice, the CPU for now), ``"cpu"``, ``"cuda"`` or ``"cuda:N"`` chooses where
    it runs: :class:`NoDeviceError` when there is no such CUDA device (its message says why),
    :class:`InvalidArgumentError` for any other name.

    Or pass ``config=`` a :class:`Config` (its threads, KV layout, pool, compression and protection settings)
    instead of keywords.

    A session must be used by one thread at a time; its methods take a lock, so concurrent calls wait.
    """

    _what = "session"

    def __init__(self, model: Model, *, config: Optional[Config] = None, **options: Any) -> None:
        self._h = None
        self._lock = threading.RLock()
        self.model = model
        if config is not None:
            if options:
                raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT,
                                           f"give a config or options, not both (options: {sorted(options)})")
            self._h = _check(config._use(lambda h: _c.ikv_session_create_with_config(model.handle, h)))
        else:
            opts = _c.ikv_session_options()
            _check(_c.ikv_session_options_init(opts))
            _fill(opts, options, _SESSION_ALIASES)
            self._h = _check(_c.ikv_session_create(model.handle, opts))
        model._sessions.add(self)

    def close(self) -> None:
        """Frees the session and its KV cache. Idempotent."""
        self._free_with(_c.ikv_session_free)


    # sequences
    def add_sequence(self) -> int:
        with self._lock:
            return int(_check(_c.ikv_seq_add(self.handle)))

    def fork(self, src: int = 0) -> int:
        """A new sequence sharing src's cache (copy-on-write) and logits."""
        with self._lock:
            return int(_check(_c.ikv_seq_fork(self.handle, src)))

    def remove(self, seq: int) -> None:
        with self._lock:
            _check(_c.ikv_seq_remove(self.handle, seq))

    def truncate(self, seq: int, length: int) -> None:
        with self._lock:
            _check(_c.ikv_seq_truncate(self.handle, seq, length))

    def length(self, seq: int = 0) -> int:
        with self._lock:
            return int(_check(_c.ikv_seq_length(self.handle, seq)))

    def kept(self, seq: int = 0, layer: int = 0) -> int:
        """Tokens kept in one layer (below the length after compression)."""
        with self._lock:
            return int(_check(_c.ikv_seq_kept(self.handle, seq, layer)))

    def layer_dtype(self, seq: int = 0, layer: int = 0) -> KvDtype:
        """The dtype one layer holds its K/V in: the session's kv_dtype unless auto chose a lower precision for it
        (``layer_precision``) or a snapshot restored it so."""
        with self._lock:
            return KvDtype(_check(_c.ikv_seq_layer_dtype(self.handle, seq, layer)))

    def kv_bytes(self, seq: int = 0) -> int:
        """Bytes of KV blocks the sequence holds."""
        with self._lock:
            return int(_check(_c.ikv_seq_kv_bytes(self.handle, seq)))

    def kv_bytes_uncompressed(self, seq: int = 0) -> int:
        """Bytes of KV blocks the sequence would hold uncompressed (its whole length in every layer), counted as
        kv_bytes counts what it holds."""
        with self._lock:
            return int(_check(_c.ikv_seq_kv_bytes_uncompressed(self.handle, seq)))

    def budget(self, seq: int = 0) -> Tuple[int, int]:
        """What compression holds the sequence to now, as (budget_tokens, slack_tokens) per layer: it is compressed
        back to its budget whenever it holds more than budget + slack. (0, 0) without a policy."""
        with self._lock:
            budget, slack = _check(_c.ikv_seq_budget(self.handle, seq))
            return int(budget), int(slack)

    def protection(self, seq: int = 0) -> Tuple[int, int]:
        """(protected_tokens, released_tokens): never-evicted tokens now, and protected tokens released so far so
        that protection stays within the budget (oldest spans first, the first span last)."""
        with self._lock:
            protected, released = _check(_c.ikv_seq_protection(self.handle, seq))
            return int(protected), int(released)

    def pressure_estimate(self, seq: int = 0) -> Tuple[int, float]:
        """What compressing the sequence to its budget now would free, as (blocks, cost_per_block): KV blocks returned
        to the pool and the estimated loss per freed block (the share of the policy's score mass evicted, over the
        blocks), the ranking memory pressure compresses by. (0, 0.0) at or under the budget or without a policy.
        Changes nothing."""
        with self._lock:
            blocks, cost = _check(_c.ikv_seq_pressure_estimate(self.handle, seq))
            return int(blocks), float(cost)

    def auto_report(self, seq: int = 0) -> Optional[AutoReport]:
        """What the auto policy chose at the sequence's latest compression, or None before one (and under other
        policies). A fork starts with its source's report; a snapshot keeps it."""
        with self._lock:
            layers, tokens, uniform, loss, max_loss = _check(_c.ikv_seq_auto_report(self.handle, seq))
            if layers == 0:
                return None
            per_layer = []
            for layer in range(layers):
                evidence, budget, alpha, l_loss = _check(_c.ikv_seq_auto_layer(self.handle, seq, layer))
                per_layer.append(AutoLayer(evidence_name(evidence), float(alpha), int(budget), float(l_loss)))
            return AutoReport(per_layer, float(loss), int(tokens), int(uniform), float(max_loss))

    def load_profile(self, path: PathLike) -> None:
        """Loads a tuning profile (from ``infokv tune`` or :meth:`save_profile`): the session's auto compressions
        under a byte budget then start from its per-layer shares and refine it. :class:`WrongModelError` for
        another model's profile, :class:`BadConfigError` for a damaged one; the session is then unchanged."""
        with self._lock:
            _check_path(_c.ikv_session_load_profile(self.handle, os.fspath(path)), os.fspath(path))

    def save_profile(self, path: PathLike) -> None:
        """Writes the session's tuning profile atomically. Without a loaded one, the first auto compression under a
        byte budget starts a record-only profile; before that :class:`BadStateError`."""
        with self._lock:
            _check(_c.ikv_session_save_profile(self.handle, os.fspath(path)))

    def profile_info(self) -> Optional[Dict[str, Any]]:
        """The session's tuning profile in sum (``compressions``, ``layers``, ``guides``: loaded rather than only
        recording, ``tag``), or None without one."""
        with self._lock:
            compressions, layers, guides = _check(_c.ikv_session_profile_info(self.handle))
            if layers == 0:
                return None
            tag = _sized_bytes(_c.ikv_session_profile_tag, self.handle).decode("utf-8", "replace")
            return {"compressions": int(compressions), "layers": int(layers), "guides": bool(guides), "tag": tag}

    def kv_stat(self, stat: Union[str, int]) -> int:
        """One pool statistic: 'blocks_total', 'blocks_used', 'blocks_free', 'block_bytes', 'bytes_used', ..."""
        with self._lock:
            return int(_check(_c.ikv_kv_stat(self.handle, _member(KvStat, "kv_stat", stat))))

    def kv_stats(self) -> Dict[str, int]:
        """All pool statistics the C header defines."""
        return {m.name.lower(): self.kv_stat(m) for m in sorted(KvStat, key=lambda m: m.name)}

    # decoding
    def decode(self, tokens: Sequence[int], seq: int = 0) -> None:
        """Appends tokens to a sequence and runs the model (all or nothing). The GIL is released."""
        with self._lock:
            _check(_c.ikv_decode(self.handle, seq, tokens))

    def decode_batch(self, seq_ids: Sequence[int], tokens: Sequence[int]) -> None:
        """Item i appends tokens[i] to seq_ids[i]; every sequence's last item gets logits."""
        with self._lock:
            _check(_c.ikv_decode_batch(self.handle, (seq_ids, tokens)))

    def logits(self, seq: int = 0) -> np.ndarray:
        """The logits of the sequence's latest token, a float32 array of n_vocab."""
        with self._lock:
            arr, n = _check(_c.ikv_get_logits(self.model.n_vocab, self.handle, seq))
            return arr[:n]

    def sample(self, sampler: Sampler, seq: int = 0) -> int:
        with self._lock:
            return int(_check(_c.ikv_sample(sampler.handle, self.handle, seq)))

    # compression
    def protect(self, begin: int, end: int, seq: int = 0, fair: bool = False) -> None:
        """Marks positions [begin, end) as never evicted (or, fair=True, as a fair-share span)."""
        with self._lock:
            _check(_c.ikv_seq_protect(self.handle, seq, begin, end, int(bool(fair))))

    def compress(self, seq: int = 0, budget_tokens: int = 0,
                 question: Union[str, Question, None] = None) -> None:
        """Compresses now (0: the session's budget). ``question`` ("next", "later", "both" or a :class:`Question`;
        None: the session's default, later) says which question the cache must serve: the tokens that follow at once,
        or one asked later (a probe question's queries stand in for it; under policy "auto" with a byte budget, also
        the context replay, as "kvzip": one more pass over the sequence). BadStateError when the session's policy is
        'none'."""
        with self._lock:
            if question is None:
                _check(_c.ikv_seq_compress(self.handle, seq, budget_tokens))
            else:
                q = _member(Question, "question", question)
                _check(_c.ikv_seq_compress_for(self.handle, seq, budget_tokens, int(q)))

    def compression_question(self, seq: int = 0) -> Tuple[Question, float]:
        """What the sequence's latest compression served and the seconds its evidence for a later question took (the
        probe's, or auto's context replay; NEXT and 0 before any compression, under a policy that reads no queries,
        or when the probe did not fit the pool)."""
        with self._lock:
            q, secs = _check(_c.ikv_seq_compression_question(self.handle, seq))
            return Question(q), float(secs)

    # snapshots
    def save(self, path: PathLike, seq: int = 0, sampler: Optional[Sampler] = None) -> None:
        """Saves sequence ``seq`` (-1: every sequence) and, when given, the sampler's state to a file (written
        atomically). Only kept tokens are stored, so a compressed cache gives a smaller snapshot."""
        with self._lock:
            _check(_c.ikv_session_save_file(self.handle, seq, None if sampler is None else sampler.handle,
                                            os.fspath(path)))

    def save_bytes(self, seq: int = 0, sampler: Optional[Sampler] = None) -> bytes:
        """As :meth:`save`, into bytes."""
        smp = None if sampler is None else sampler.handle
        with self._lock:
            return _sized_bytes(_c.ikv_session_save_buffer, self.handle, seq, smp)

    def restore(self, source: Union[PathLike, bytes, bytearray, memoryview],
                sampler: Optional[Sampler] = None) -> List[int]:
        """Restores a snapshot (a file path or bytes) into this session as new sequences and returns their ids, in
        saved order; the sampler, when given, takes the snapshot's sampler state. All or nothing: on
        :class:`BadSnapshotError`, :class:`WrongModelError`, :class:`VersionError`, :class:`KvFullError`, ...
        neither the session nor the sampler changed. Create the session with the snapshot's policy
        (:func:`inspect_snapshot`) to continue exactly."""
        smp = None if sampler is None else sampler.handle
        if isinstance(source, (bytes, bytearray, memoryview)):
            fn: Callable[..., Any] = _c.ikv_session_restore_buffer
            arg: Any = bytes(source) if isinstance(source, memoryview) else source
        else:
            fn, arg = _c.ikv_session_restore_file, os.fspath(source)
        with self._lock:
            cap = 8
            while True:
                r = fn(cap, self.handle, smp, arg)
                if r[0] == _TOO_SMALL and r[2] > cap:
                    cap = r[2]
                    continue
                ids, count = _check(r) if fn is _c.ikv_session_restore_buffer else _check_path(r, arg)
                return [int(i) for i in ids[:count]]

    # generation
    def _prompt_ids(self, prompt: Prompt, add_bos: bool) -> List[int]:
        if prompt is None:
            return []
        if isinstance(prompt, (str, bytes)):
            return self.model.tokenize(prompt, add_bos=add_bos)
        return [int(t) for t in prompt]

    def _run(self, prompt: List[int], max_tokens: int, seq: int, sampler: Sampler,
             callback: Optional[Callable[[int, bytes], int]]) -> List[Any]:
        with self._lock:
            return _c.ikv_generate(max(max_tokens, 0), self.handle, seq, prompt or None, max_tokens,
                                   sampler.handle, callback)

    def complete(self, prompt: Prompt = None, max_tokens: int = 64, *, seq: int = 0, add_bos: bool = True,
                 sampler: Optional[Sampler] = None, on_token: Optional[Callable[[Token], Any]] = None,
                 **sampling: Any) -> Completion:
        """Generates up to max_tokens tokens (stopping at EOS) and returns them with their text. ``on_token`` is
        called with each :class:`Token`; returning ``False`` stops early (the result then has cancelled=True);
        an exception it raises stops generation and propagates. Sampling keywords (temperature, top_k, ...) make
        a fresh :class:`Sampler` when none is given."""
        n = _whole("max_tokens", max_tokens)
        ids = self._prompt_ids(prompt, add_bos)
        return self._streamed(sampler, sampling, on_token, lambda smp, cb: self._run(ids, n, seq, smp, cb))

    def _streamed(self, sampler: Optional[Sampler], sampling: Dict[str, Any], on_token: Optional[Callable[[Token], Any]],
                  run: Callable[[Sampler, Callable[[int, bytes], int]], Any]) -> Completion:
        """Runs a generating C call (ikv_generate, ikv_chat_reply) with on_token behind its callback; a sampler made
        from ``sampling`` when none is given."""
        own = sampler is None
        smp = Sampler(**sampling) if own else sampler
        texts: List[bytes] = []

        def cb(token: int, text: bytes) -> int:
            texts.append(text)
            if on_token is not None and on_token(Token(token, text.decode("utf-8", errors="replace"))) is False:
                return 1
            return 0

        try:
            status, arr, count = run(smp, cb)
        finally:
            if own:
                smp.close()
        cancelled = status == _c.IKV_ERR_CANCELLED
        if not cancelled:
            _check(status)
        return Completion(arr[:min(count, len(arr))].tolist(), b"".join(texts).decode("utf-8", errors="replace"),
                          cancelled)

    # chat
    def chat_add(self, role: str, content: str, seq: int = 0,
                 protect: Union[str, ChatProtect] = ChatProtect.SYSTEM) -> Tuple[int, int]:
        """Appends one message to the sequence in the model's chat template and decodes it; returns the positions
        (begin, end) it took. An empty sequence opens the conversation. ``protect``: "system" (default: the system
        prompt and the template's control tokens are never evicted), "fair" (each message keeps the same fraction)
        or "none". All or nothing."""
        p = _member(ChatProtect, "protect", protect)
        with self._lock:
            begin, end = _check(_c.ikv_chat_add(self.handle, seq, str(role), str(content).encode("utf-8"), p))
        return int(begin), int(end)

    def chat(self, messages: Sequence[Message], max_tokens: int = 256, *, seq: int = 0,
             protect: Union[str, ChatProtect] = ChatProtect.SYSTEM, sampler: Optional[Sampler] = None,
             on_token: Optional[Callable[[Token], Any]] = None, **sampling: Any) -> Completion:
        """Appends ``messages`` (dicts with role and content, or (role, content) pairs) to the conversation in
        ``seq`` and returns the assistant's reply; the reply and its closing markup stay in the sequence, so the next
        call passes only the new messages (earlier turns are never re-read). ``on_token`` streams as in
        :meth:`complete`. Protection as :meth:`chat_add`."""
        p = _member(ChatProtect, "protect", protect)
        items = [_message(m) for m in messages]
        for role, content in items:
            self.chat_add(role, content, seq, p)
        n = max(_whole("max_tokens", max_tokens), 0)

        def run(smp: Sampler, cb: Callable[[int, bytes], int]) -> Any:
            with self._lock:
                return _c.ikv_chat_reply(n, self.handle, seq, n, smp.handle, cb, p)
        return self._streamed(sampler, sampling, on_token, run)

    def chat_stream(self, messages: Sequence[Message], max_tokens: int = 256, *, seq: int = 0,
                    protect: Union[str, ChatProtect] = ChatProtect.SYSTEM, sampler: Optional[Sampler] = None,
                    **sampling: Any) -> Iterator[Token]:
        """:meth:`chat` as an iterator of :class:`Token`, decoding exactly what it yields (as :meth:`generate`).
        The turn is closed when the iterator ends, is closed, or is left by ``break``."""
        p = _member(ChatProtect, "protect", protect)
        items = [_message(m) for m in messages]
        own = sampler is None
        smp = Sampler(**sampling) if own else sampler
        n = max(_whole("max_tokens", max_tokens), 0)

        def steps() -> Iterator[Token]:
            try:
                for role, content in items:
                    self.chat_add(role, content, seq, p)
                with self._lock:
                    _check(_c.ikv_chat_begin_reply(self.handle, seq, p))
                try:
                    yield from self._steps([], n, seq, smp, False)
                finally:
                    with self._lock:
                        _check(_c.ikv_chat_end_reply(self.handle, seq, p))
            finally:
                if own:
                    smp.close()
        return steps()

    def generate(self, prompt: Prompt = None, max_tokens: int = 64, *, seq: int = 0, add_bos: bool = True,
                 sampler: Optional[Sampler] = None, **sampling: Any) -> Iterator[Token]:
        """Streams generated tokens as an iterator of :class:`Token` (id, text), stopping at EOS.

        Each step decodes exactly the token it yields, on the calling thread: leaving the loop after k tokens
        leaves exactly k generated tokens in the sequence (a later call continues from there), and the session may
        be used between iterations (``s.length()``, ``s.save(...)``, ...). The prompt is decoded when the first
        token is asked for. The GIL is released while a step runs; Ctrl-C is seen between steps. Text is split at
        character boundaries: a character spread over several tokens comes with the token that completes it, and
        held-back bytes at the end come as a final ``Token(-1, text)``."""
        n = max(_whole("max_tokens", max_tokens), 0)
        own = sampler is None
        smp = Sampler(**sampling) if own else sampler
        ids = self._prompt_ids(prompt, add_bos)
        return self._steps(ids, n, seq, smp, own)

    def _steps(self, ids: List[int], max_tokens: int, seq: int, smp: Sampler, own: bool) -> Iterator[Token]:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            pending: Optional[List[int]] = ids or None
            if max_tokens == 0 and pending:  # nothing to generate, but the prompt is still decoded
                _check(self._run(pending, 0, seq, smp, None)[0])
            for _ in range(max_tokens):
                status, arr, count = self._run(pending or [], 1, seq, smp, None)
                pending = None
                _check(status)
                if count == 0:  # EOS
                    break
                token = int(arr[0])
                yield Token(token, decoder.decode(self.model.detokenize_bytes([token])))
            tail = decoder.decode(b"", final=True)
            if tail:
                yield Token(-1, tail)
        finally:
            if own:
                smp.close()

    def __repr__(self) -> str:
        return f"<infokv.Session{' closed' if self._h is None else ''}>"
