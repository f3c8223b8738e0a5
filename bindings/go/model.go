package infokv

import (
	"encoding/json"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// Model is a loaded GGUF model: immutable, memory-mapped, shareable by goroutines and sessions.
type Model struct {
	// mu is held for reading during every call on the model or its sessions and for writing by Close, so Close
	// waits for calls in progress
	mu sync.RWMutex
	h  capi.Struct_SS_ikv_model
	// the C handles of the model's open sessions (addresses, not *Session: a reference back to the sessions would
	// make a cycle that keeps finalizers from running)
	sessions map[uintptr]capi.Struct_SS_ikv_session
	// how many Generates on the model's sessions are running (Close refuses to wait for them: it may be called
	// from their onToken)
	streaming atomic.Int32
}

// Load loads a GGUF model. Close it when done (a finalizer frees it otherwise).
func Load(path string) (*Model, error) {
	var p uintptr
	if err := call(func() int { return capi.Ikv_model_load(&p, path) }); err != nil {
		return nil, withPath(err, path)
	}
	m := &Model{h: capi.SwigcptrStruct_SS_ikv_model(p), sessions: map[uintptr]capi.Struct_SS_ikv_session{}}
	runtime.SetFinalizer(m, func(m *Model) { m.Close() })
	return m, nil
}

// Close frees the model, closing its open sessions first. Safe to call more than once.
func (m *Model) Close() error {
	if !m.mu.TryLock() {
		if m.streaming.Load() > 0 {
			return &Error{Status: int32(ErrBusy.Status), Message: "Close of the model while a Generate on one of its sessions is running (from its onToken, or another goroutine): close after Generate returns"}
		}
		m.mu.Lock()
	}
	defer m.mu.Unlock()
	for k, h := range m.sessions {
		capi.Ikv_session_free(h)
		delete(m.sessions, k)
	}
	if m.h != nil {
		capi.Ikv_model_free(m.h)
		m.h = nil
	}
	return nil
}

// with runs f with the model open; Close waits until f returns.
func (m *Model) with(f func(h capi.Struct_SS_ikv_model) error) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.h == nil {
		return &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the model is closed"}
	}
	return f(m.h)
}

// Int reads an integer property (capi IKV_MODEL_* values; see the named accessors).
func (m *Model) Int(property int) (int64, error) {
	var v int64
	err := m.with(func(h capi.Struct_SS_ikv_model) error {
		return call(func() int { return capi.Ikv_model_get_int(&v, h, property) })
	})
	return v, err
}

func (m *Model) mustInt(p int) int64 {
	v, err := m.Int(p)
	if err != nil {
		return -1
	}
	return v
}

// NVocab is the vocabulary size (-1 if the model is closed); the other accessors work alike.
func (m *Model) NVocab() int        { return int(m.mustInt(capi.IKV_MODEL_N_VOCAB)) }
func (m *Model) NLayer() int        { return int(m.mustInt(capi.IKV_MODEL_N_LAYER)) }
func (m *Model) NEmbd() int         { return int(m.mustInt(capi.IKV_MODEL_N_EMBD)) }
func (m *Model) NCtxTrain() int     { return int(m.mustInt(capi.IKV_MODEL_N_CTX_TRAIN)) }
func (m *Model) BOS() int32         { return int32(m.mustInt(capi.IKV_MODEL_BOS)) }
func (m *Model) EOS() int32         { return int32(m.mustInt(capi.IKV_MODEL_EOS)) }
func (m *Model) NParams() int64     { return m.mustInt(capi.IKV_MODEL_N_PARAMS) }
func (m *Model) WeightBytes() int64 { return m.mustInt(capi.IKV_MODEL_WEIGHT_BYTES) }

// Describe returns the model's description (architecture, sizes, tokenizer, tensor types) as raw JSON.
func (m *Model) Describe() (json.RawMessage, error) {
	var out json.RawMessage
	err := m.with(func(h capi.Struct_SS_ikv_model) error {
		var n uint64
		err := call(func() int { return capi.Ikv_model_describe(nil, &n, h) })
		if err != nil && !errors.Is(err, ErrBufferTooSmall) {
			return err
		}
		buf := make([]byte, n+1)
		if err := call(func() int { return capi.Ikv_model_describe(buf, &n, h) }); err != nil {
			return err
		}
		out = json.RawMessage(buf[:n])
		return nil
	})
	return out, err
}

// Info decodes Describe into a map.
func (m *Model) Info() (map[string]any, error) {
	raw, err := m.Describe()
	if err != nil {
		return nil, err
	}
	var v map[string]any
	return v, json.Unmarshal(raw, &v)
}

// Tokenize turns text into token ids; addBOS prepends the model's BOS token. Text is text: "<|im_start|>" in it
// is tokenised as those characters, never as the control token, so user input cannot forge a chat turn
// (TokenizeSpecial parses such texts).
func (m *Model) Tokenize(text string, addBOS bool) ([]int32, error) {
	return m.tokenize(text, addBOS, false)
}

// TokenizeSpecial is Tokenize with the texts of control tokens ("<|im_start|>") turned into those tokens: only for
// text the program trusts (chats should use ChatTokenize or Session.Chat).
func (m *Model) TokenizeSpecial(text string, addBOS bool) ([]int32, error) {
	return m.tokenize(text, addBOS, true)
}

func (m *Model) tokenize(text string, addBOS, parseSpecial bool) ([]int32, error) {
	var flags uint
	if addBOS {
		flags |= capi.IKV_TOKENIZE_ADD_BOS
	}
	if parseSpecial {
		flags |= capi.IKV_TOKENIZE_PARSE_SPECIAL
	}
	out := make([]int32, len(text)+2)
	var n uint64
	err := m.with(func(h capi.Struct_SS_ikv_model) error {
		err := call(func() int { return capi.Ikv_tokenize_ex(out, &n, h, text, flags) })
		if errors.Is(err, ErrBufferTooSmall) {
			out = make([]int32, n)
			err = call(func() int { return capi.Ikv_tokenize_ex(out, &n, h, text, flags) })
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

// Detokenize turns token ids into text.
func (m *Model) Detokenize(tokens []int32) (string, error) {
	buf := make([]byte, 8*len(tokens)+16)
	var n uint64
	err := m.with(func(h capi.Struct_SS_ikv_model) error {
		err := call(func() int { return capi.Ikv_detokenize(buf, &n, h, tokens) })
		if errors.Is(err, ErrBufferTooSmall) {
			buf = make([]byte, n+1)
			err = call(func() int { return capi.Ikv_detokenize(buf, &n, h, tokens) })
		}
		return err
	})
	if err != nil {
		return "", err
	}
	return string(buf[:n]), nil
}
