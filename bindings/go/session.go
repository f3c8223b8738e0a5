package infokv

import (
	"errors"
	"runtime"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// Session is a KV cache over a model with sequences (sequence 0 exists from the start). Its methods serialise
// on a mutex, so a session may be passed between goroutines; sessions on one model run in parallel.
type Session struct {
	gate  gate
	h     capi.Struct_SS_ikv_session
	model *Model
}

// sessionOptions makes C session options with the defaults and opts applied; the caller deletes them
// (capi.DeleteIkv_session_options) once the C call that reads them has returned.
func sessionOptions(opts []SessionOption) (capi.Ikv_session_options, error) {
	o := capi.NewIkv_session_options()
	if err := call(func() int { return capi.Ikv_session_options_init(o) }); err != nil {
		capi.DeleteIkv_session_options(o)
		return nil, err
	}
	for _, f := range opts {
		if err := f(&SessionSettings{o: o}); err != nil {
			capi.DeleteIkv_session_options(o)
			return nil, err
		}
	}
	return o, nil
}

// NewSession creates a session over the model.
func (m *Model) NewSession(opts ...SessionOption) (*Session, error) {
	o, err := sessionOptions(opts)
	if err != nil {
		return nil, err
	}
	defer capi.DeleteIkv_session_options(o)
	var p uintptr
	m.mu.Lock() // exclusive: the new session joins m.sessions before Close can run
	defer m.mu.Unlock()
	if m.h == nil {
		return nil, &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the model is closed"}
	}
	if err := call(func() int { return capi.Ikv_session_create(&p, m.h, o) }); err != nil {
		return nil, err
	}
	s := &Session{h: capi.SwigcptrStruct_SS_ikv_session(p), model: m}
	m.sessions[p] = s.h
	runtime.SetFinalizer(s, func(s *Session) { s.Close() })
	return s, nil
}

// Close frees the session and its cache. Safe to call more than once.
func (s *Session) Close() error {
	locked, err := s.gate.enter(func(h uintptr) error {
		var v int64 // a read: answered unless another thread is inside a call on the session
		if err := call(func() int {
			return capi.Ikv_kv_stat(&v, capi.SwigcptrStruct_SS_ikv_session(h), capi.IKV_KV_BLOCKS_USED)
		}); errors.Is(err, ErrBusy) {
			return err
		}
		return errInCallback("session")
	})
	if !locked {
		return err
	}
	defer s.gate.mu.Unlock()
	if s.h != nil {
		s.model.mu.Lock()
		if _, open := s.model.sessions[s.h.Swigcptr()]; open { // not already freed by Model.Close
			capi.Ikv_session_free(s.h)
			delete(s.model.sessions, s.h.Swigcptr())
		}
		s.model.mu.Unlock()
		s.h = nil
	}
	return nil
}

// with runs f with the session locked and its handle live (or, from onToken, through the running Generate).
func (s *Session) with(f func(h capi.Struct_SS_ikv_session) int) error {
	locked, err := s.gate.enter(func(h uintptr) error {
		return call(func() int { return f(capi.SwigcptrStruct_SS_ikv_session(h)) })
	})
	if !locked {
		return err
	}
	defer s.gate.mu.Unlock()
	s.model.mu.RLock()
	defer s.model.mu.RUnlock()
	if s.h == nil {
		return &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the session is closed"}
	}
	if _, open := s.model.sessions[s.h.Swigcptr()]; !open {
		return &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the session's model is closed"}
	}
	return call(func() int { return f(s.h) })
}

// Model is the model the session runs.
func (s *Session) Model() *Model { return s.model }

// AddSequence adds an empty sequence and returns its id.
func (s *Session) AddSequence() (int32, error) {
	var id int32
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_add(&id, h) })
	return id, err
}

// Fork makes a sequence that shares src's cache (copy-on-write) and logits.
func (s *Session) Fork(src int32) (int32, error) {
	var id int32
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_fork(&id, h, int(src)) })
	return id, err
}

// Remove removes a sequence and frees its blocks.
func (s *Session) Remove(seq int32) error {
	return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_remove(h, int(seq)) })
}

// Truncate drops positions >= length.
func (s *Session) Truncate(seq int32, length int64) error {
	return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_truncate(h, int(seq), length) })
}

// Length is the sequence's logical length.
func (s *Session) Length(seq int32) (int64, error) {
	var v int64
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_length(&v, h, int(seq)) })
	return v, err
}

// Kept is the number of tokens the sequence keeps in one layer (below Length after compression).
func (s *Session) Kept(seq int32, layer int) (int64, error) {
	var v int64
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_kept(&v, h, int(seq), layer) })
	return v, err
}

// LayerDtype is the dtype one layer holds its K/V in: the session's KV dtype unless PolicyAuto chose a lower
// precision for it (WithLayerPrecision) or a snapshot restored it so. ErrOutOfRange for a layer outside the model.
func (s *Session) LayerDtype(seq int32, layer int) (KVDtype, error) {
	var v int32
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_layer_dtype(&v, h, int(seq), layer) })
	return KVDtype(v), err
}

// KVBytes is the bytes of KV blocks the sequence holds.
func (s *Session) KVBytes(seq int32) (int64, error) {
	var v int64
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_kv_bytes(&v, h, int(seq)) })
	return v, err
}

// KVBytesUncompressed is the bytes of KV blocks the sequence would hold uncompressed (its whole length in every
// layer), counted as KVBytes counts what it holds.
func (s *Session) KVBytesUncompressed(seq int32) (int64, error) {
	var v int64
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_kv_bytes_uncompressed(&v, h, int(seq)) })
	return v, err
}

// Budget is what compression holds the sequence to now, per layer: it is compressed back to budget whenever it
// holds more than budget + slack. Both are 0 without a policy.
func (s *Session) Budget(seq int32) (budget, slack int64, err error) {
	err = s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_budget(&budget, &slack, h, int(seq)) })
	return budget, slack, err
}

// Protection is the sequence's never-evicted tokens now and the protected tokens released so far so that
// protection stays within the budget (oldest spans first, the first span last).
func (s *Session) Protection(seq int32) (protected, released int64, err error) {
	err = s.with(func(h capi.Struct_SS_ikv_session) int {
		return capi.Ikv_seq_protection(&protected, &released, h, int(seq))
	})
	return protected, released, err
}

// PressureEstimate is what compressing the sequence to its budget now would free (KV blocks returned to the pool)
// and its estimated loss per freed block (the share of the policy's score mass evicted, over the blocks): the
// ranking memory pressure compresses by. Both are 0 at or under the budget or without a policy. Changes nothing.
func (s *Session) PressureEstimate(seq int32) (blocks int64, cost float64, err error) {
	err = s.with(func(h capi.Struct_SS_ikv_session) int {
		return capi.Ikv_seq_pressure_estimate(&blocks, &cost, h, int(seq))
	})
	return blocks, cost, err
}

// AutoLayer is one layer of what PolicyAuto chose.
type AutoLayer struct {
	Evidence int     // the Evidence* value that ranked the layer's tokens (EvidenceName gives its name)
	Alpha    float64 // attention weight of the InfoKV mix when Evidence is EvidenceInfoKV; 1 otherwise
	Budget   int32   // tokens the layer kept
	Loss     float64 // the layer's proxy loss at that budget
}

// AutoReport is what PolicyAuto chose at a sequence's latest compression.
type AutoReport struct {
	Layers        []AutoLayer // one per model layer
	Loss          float64     // mean proxy loss (relative error of the observation window's attention output)
	Tokens        int64       // tokens kept, all layers together
	UniformTokens int64       // what a uniform budget would have kept; 0 under a quality target
	MaxLoss       float64     // the quality target it was held to; 0: a byte budget
}

// AutoReport is what PolicyAuto chose at the sequence's latest compression; nil (and no error) before one, and under
// other policies. A fork starts with its source's report; a snapshot keeps it.
func (s *Session) AutoReport(seq int32) (*AutoReport, error) {
	var r AutoReport
	var layers int32
	err := s.with(func(h capi.Struct_SS_ikv_session) int {
		st := capi.Ikv_seq_auto_report(&layers, &r.Tokens, &r.UniformTokens, &r.Loss, &r.MaxLoss, h, int(seq))
		if st < 0 {
			return st
		}
		r.Layers = make([]AutoLayer, layers)
		for l := range r.Layers {
			var ev int32
			x := &r.Layers[l]
			if st = capi.Ikv_seq_auto_layer(&ev, &x.Budget, &x.Alpha, &x.Loss, h, int(seq), l); st < 0 {
				return st
			}
			x.Evidence = int(ev)
		}
		return st
	})
	if err != nil || layers == 0 {
		return nil, err
	}
	return &r, nil
}

// ProfileInfo is the session's tuning profile in sum (Session.ProfileInfo).
type ProfileInfo struct {
	Compressions int64  // byte-budget auto compressions it has seen
	Layers       int32  // the model's layer count
	Guides       bool   // loaded (it sets auto's floors), not only recording
	Tag          string // empty when it has none
}

// LoadProfile loads a tuning profile (from `infokv tune` or SaveProfile): the session's auto compressions under a
// byte budget then start from its per-layer shares and refine it. ErrWrongModel for another model's profile,
// ErrBadConfig for a damaged one; the session is then unchanged.
func (s *Session) LoadProfile(path string) error {
	return withPath(s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_session_load_profile(h, path) }), path)
}

// SaveProfile writes the session's tuning profile atomically; ErrBadState before it has one (none loaded and no
// auto compression under a byte budget yet).
func (s *Session) SaveProfile(path string) error {
	return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_session_save_profile(h, path) })
}

// ProfileInfo describes the session's tuning profile; nil (and no error) without one.
func (s *Session) ProfileInfo() (*ProfileInfo, error) {
	var p ProfileInfo
	var guides int32
	var tag []byte
	err := s.with(func(h capi.Struct_SS_ikv_session) int {
		st := capi.Ikv_session_profile_info(&p.Compressions, &p.Layers, &guides, h)
		if st < 0 || p.Layers == 0 {
			return st
		}
		var e error
		tag, e = sized(func(b []byte, n *uint64) int { return capi.Ikv_session_profile_tag(b, n, h) })
		if e != nil {
			var ie *Error
			if errors.As(e, &ie) {
				return int(ie.Status)
			}
			return int(capi.IKV_ERR_INTERNAL)
		}
		return st
	})
	if err != nil || p.Layers == 0 {
		return nil, err
	}
	p.Guides = guides != 0
	p.Tag = string(tag)
	return &p, nil
}

// KVStat reads one pool statistic (KVBlocksTotal, KVBytesUsed, ...).
func (s *Session) KVStat(stat int) (int64, error) {
	var v int64
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_kv_stat(&v, h, stat) })
	return v, err
}

// Decode appends tokens to a sequence and runs the model (all or nothing).
func (s *Session) Decode(seq int32, tokens []int32) error {
	return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_decode(h, int(seq), tokens) })
}

// DecodeBatch appends tokens[i] to seqIDs[i] in one batch.
func (s *Session) DecodeBatch(seqIDs, tokens []int32) error {
	if len(seqIDs) != len(tokens) {
		return &Error{Status: int32(capi.IKV_ERR_INVALID_ARGUMENT), Message: "seqIDs and tokens differ in length"}
	}
	pairs := make([]int32, 0, 2*len(tokens))
	for i := range tokens {
		pairs = append(pairs, seqIDs[i], tokens[i])
	}
	return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_decode_batch(h, pairs) })
}

// Logits returns the logits of the sequence's latest token.
func (s *Session) Logits(seq int32) ([]float32, error) {
	out := make([]float32, s.model.NVocab())
	var n uint64
	err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_get_logits(out, &n, h, int(seq)) })
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

// Protect marks positions [begin, end) as never evicted (fair: a fair-share span instead).
func (s *Session) Protect(seq int32, begin, end int64, fair bool) error {
	f := 0
	if fair {
		f = 1
	}
	return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_protect(h, int(seq), begin, end, f) })
}

// Compress compresses the sequence now to budgetTokens per layer (0: the session's budget).
func (s *Session) Compress(seq int32, budgetTokens int) error {
	return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_seq_compress(h, int(seq), budgetTokens) })
}

// CompressFor is Compress for a stated question (Compress serves the session's default, QuestionLater unless its
// config says otherwise). Under PolicyAuto with a byte budget, QuestionLater also replays the context as PolicyKVzip
// does (one more pass over the sequence).
func (s *Session) CompressFor(seq int32, budgetTokens int, q Question) error {
	return s.with(func(h capi.Struct_SS_ikv_session) int {
		return capi.Ikv_seq_compress_for(h, int(seq), budgetTokens, int(q))
	})
}

// CompressionQuestion is what the sequence's latest compression served and the seconds its evidence for a later
// question took (the probe's, or auto's context replay; QuestionNext and 0 before any compression, under a policy
// that reads no queries, or when the probe did not fit the pool).
func (s *Session) CompressionQuestion(seq int32) (q Question, probeSeconds float64, err error) {
	var v int32
	err = s.with(func(h capi.Struct_SS_ikv_session) int {
		return capi.Ikv_seq_compression_question(&v, &probeSeconds, h, int(seq))
	})
	return Question(v), probeSeconds, err
}

// Sample draws the next token from the sequence's logits.
func (s *Session) Sample(sampler *Sampler, seq int32) (int32, error) {
	var tok int32
	locked, err := sampler.gate.enter(func(sh uintptr) error {
		return s.with(func(h capi.Struct_SS_ikv_session) int {
			return capi.Ikv_sample(&tok, capi.SwigcptrStruct_SS_ikv_sampler(sh), h, int(seq))
		})
	})
	if !locked {
		return tok, err
	}
	defer sampler.gate.mu.Unlock()
	if sampler.h == nil {
		return 0, &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the sampler is closed"}
	}
	err = s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_sample(&tok, sampler.h, h, int(seq)) })
	return tok, err
}
