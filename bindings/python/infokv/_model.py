"""The model: a loaded GGUF file or Hugging Face directory, its tokenizer and chat template."""
from __future__ import annotations

import json
import os
import threading
import weakref
from typing import TYPE_CHECKING, Any, Dict, Iterable, List, Optional, Sequence, Union

import numpy as np

from . import capi as _c
from ._common import Message, PathLike, _Owner, _TOO_SMALL, _check_path, _constant, _message
from ._config import Config
from ._errors import InvalidArgumentError, check as _check

if TYPE_CHECKING:
    from ._session import Session


class Model(_Owner):
    """A loaded GGUF model (memory-mapped, immutable, shareable by any number of sessions and threads).

    ``Model(path)`` loads a file; ``Model(config=cfg)`` (or :meth:`from_config`) loads the config's model_path,
    confined to a directory with ``allowed_dir=`` (see ikv_model_load_with_config_confined)."""

    _what = "model"

    def __init__(self, path: Optional[PathLike] = None, *, config: Optional[Config] = None,
                 allowed_dir: Optional[PathLike] = None) -> None:
        self._h = None
        self._sessions: "weakref.WeakSet[Session]" = weakref.WeakSet()
        self._lock = threading.Lock()
        if (path is None) == (config is None):
            raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, "give a path or a config (one of them)")
        if allowed_dir is not None and config is None:
            raise InvalidArgumentError(_c.IKV_ERR_INVALID_ARGUMENT, "allowed_dir confines a config's model_path")
        if config is not None and allowed_dir is not None:
            d = os.fspath(allowed_dir)
            self._h = _check(config._use(lambda h: _c.ikv_model_load_with_config_confined(h, d)))
            self.path = config.model_path
        elif config is not None:
            # Read before the load: a later size query would overwrite the load's error message.
            where = config.model_path
            self._h = _check_path(config._use(_c.ikv_model_load_with_config), where)
            self.path = where
        else:
            self._h = _check_path(_c.ikv_model_load(os.fspath(path)), os.fspath(path))  # type: ignore[arg-type]
            self.path = os.fspath(path)  # type: ignore[arg-type]

    @classmethod
    def load(cls, path: Optional[PathLike] = None, *, config: Optional[Config] = None,
             allowed_dir: Optional[PathLike] = None) -> "Model":
        """Loads a model from a path or from a config's model_path (confined to allowed_dir when given)."""
        return cls(path, config=config, allowed_dir=allowed_dir)

    @classmethod
    def from_config(cls, config: Config, allowed_dir: Optional[PathLike] = None) -> "Model":
        """Loads the model named by the config's model_path (BadConfigError when it is empty); with allowed_dir,
        only a model inside that directory (IOError with one fixed message otherwise)."""
        return cls(config=config, allowed_dir=allowed_dir)

    # lifetime
    def close(self) -> None:
        """Frees the model (closing its sessions first). Idempotent."""
        with self._lock:
            for s in list(self._sessions):
                s.close()
            h, self._h = self._h, None
        if h is not None:
            _c.ikv_model_free(h)


    # info
    def get_int(self, prop: Union[str, int]) -> int:
        """An integer property: 'n_vocab', 'n_layer', 'bos', ... (the IKV_MODEL_* constants)."""
        return int(_check(_c.ikv_model_get_int(self.handle, _constant("IKV_MODEL_", prop))))

    n_vocab = property(lambda self: self.get_int("n_vocab"))
    n_embd = property(lambda self: self.get_int("n_embd"))
    n_layer = property(lambda self: self.get_int("n_layer"))
    n_head = property(lambda self: self.get_int("n_head"))
    n_head_kv = property(lambda self: self.get_int("n_head_kv"))
    head_dim = property(lambda self: self.get_int("head_dim"))
    n_ff = property(lambda self: self.get_int("n_ff"))
    n_ctx_train = property(lambda self: self.get_int("n_ctx_train"))
    bos = property(lambda self: self.get_int("bos"))
    eos = property(lambda self: self.get_int("eos"))
    n_params = property(lambda self: self.get_int("n_params"))
    weight_bytes = property(lambda self: self.get_int("weight_bytes"))

    def describe(self) -> Dict[str, Any]:
        """The model's description (architecture, sizes, tokenizer, tensor types) as a dict."""
        r = _c.ikv_model_describe(0, self.handle)
        if r[0] == _TOO_SMALL:
            r = _c.ikv_model_describe(r[2] + 1, self.handle)
        buf, n = _check(r)
        return json.loads(buf[:n].decode("utf-8"))

    @property
    def info(self) -> Dict[str, Any]:
        return self.describe()

    # text
    def tokenize(self, text: Union[str, bytes], add_bos: bool = True, parse_special: bool = False) -> List[int]:
        """Text (str or UTF-8 bytes) to token ids; add_bos prepends the model's BOS token.

        Text is text: "<|im_start|>" in it is tokenised as those characters, never as the control token, so user
        input cannot forge a chat turn. parse_special=True turns such texts into their tokens: only for text the
        program trusts (chats should use chat_tokenize or Session.chat).
        """
        flags = (_c.IKV_TOKENIZE_ADD_BOS if add_bos else 0) | (_c.IKV_TOKENIZE_PARSE_SPECIAL if parse_special else 0)
        n = len(text) + 2
        r = _c.ikv_tokenize_ex(n, self.handle, text, flags)
        if r[0] == _TOO_SMALL:
            r = _c.ikv_tokenize_ex(r[2], self.handle, text, flags)
        arr, count = _check(r)
        return arr[:count].tolist()

    def detokenize_bytes(self, tokens: Iterable[int]) -> bytes:
        toks = np.asarray(list(tokens) if not isinstance(tokens, np.ndarray) else tokens, dtype=np.int32)
        r = _c.ikv_detokenize(4 * len(toks) + 16, self.handle, toks)
        if r[0] == _TOO_SMALL:
            r = _c.ikv_detokenize(r[2] + 1, self.handle, toks)
        buf, n = _check(r)
        return bytes(buf[:n])

    def detokenize(self, tokens: Iterable[int]) -> str:
        """Token ids to text (invalid UTF-8 from partial pieces is replaced)."""
        return self.detokenize_bytes(tokens).decode("utf-8", errors="replace")

    @property
    def chat_format(self) -> str:
        """The model's chat format: "chatml", "llama3", or "none" (chat calls then raise UnsupportedError)."""
        f = int(_check(_c.ikv_chat_format(self.handle)))
        return {_c.IKV_CHAT_FORMAT_CHATML: "chatml", _c.IKV_CHAT_FORMAT_LLAMA3: "llama3"}.get(f, "none")

    def chat_tokenize(self, messages: Sequence[Message], add_generation_prompt: bool = True,
                      first: bool = True) -> List[int]:
        """The token ids of a conversation as the model's template writes it (what :meth:`Session.chat` decodes):
        ``first`` opens a conversation (BOS, the template's default system turn); ``add_generation_prompt`` ends
        with the assistant's header."""
        ids: List[int] = []
        items = [_message(m) for m in messages]
        for i, (role, content) in enumerate(items):
            last = i == len(items) - 1
            ids += self._chat_ids(role, content, first and i == 0, add_generation_prompt and last)
        if not items:
            ids += self._chat_ids("", "", first, add_generation_prompt)
        return ids

    def _chat_ids(self, role: str, content: str, first: bool, gen: bool) -> List[int]:
        data = content.encode("utf-8")
        cap = len(data) + 64
        while True:
            status, arr, count = _c.ikv_chat_tokenize(cap, self.handle, role, data, int(first), int(gen))
            if status == _TOO_SMALL and count > cap:
                cap = int(count)
                continue
            _check(status)
            return arr[:count].tolist()

    def session(self, *, config: Optional[Config] = None, **options: Any) -> "Session":
        """A new session over this model; see :class:`Session` for the options, or pass a :class:`Config`."""
        from ._session import Session  # imported here: the session module needs the model's type only for hints
        return Session(self, config=config, **options)

    def __repr__(self) -> str:
        return f"<infokv.Model {self.path!r}{' closed' if self._h is None else ''}>"
