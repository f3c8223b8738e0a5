package infokv

import (
	"encoding/json"
	"runtime"
	"sync"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// Strategy says what an Engine does when a step does not fit its pool (the C IKV_STRATEGY_* values).
type Strategy int

const (
	StrategyAuto      Strategy = Strategy(capi.IKV_STRATEGY_AUTO)      // the cheapest of compress, move, recompute
	StrategyFail      Strategy = Strategy(capi.IKV_STRATEGY_FAIL)      // fail the turn that does not fit
	StrategyRecompute Strategy = Strategy(capi.IKV_STRATEGY_RECOMPUTE) // drop a victim, prefill it again later
	StrategyMove      Strategy = Strategy(capi.IKV_STRATEGY_MOVE)      // move a victim to the spill directory and back
	StrategyCompress  Strategy = Strategy(capi.IKV_STRATEGY_COMPRESS)  // compress victims further, then fail
)

// TurnState is the state of a conversation's latest turn (IKV_TURN_*).
type TurnState int

const (
	TurnQueued  TurnState = TurnState(capi.IKV_TURN_QUEUED)
	TurnRunning TurnState = TurnState(capi.IKV_TURN_RUNNING)
	TurnDone    TurnState = TurnState(capi.IKV_TURN_DONE)
	TurnFailed  TurnState = TurnState(capi.IKV_TURN_FAILED)
)

// EngineEvent is one token a step produced for one conversation.
type EngineEvent struct {
	Conversation int64
	Token        int32
}

// Engine runs many conversations over one KV pool in continuous batches. When a step does not fit, conversations
// are compressed further, moved to a spill directory and back, or dropped and recomputed from their tokens, as the
// Strategy says; moved and recomputed conversations continue exactly. Its methods serialise on a mutex.
type Engine struct {
	mu    sync.Mutex
	h     capi.Struct_SS_ikv_engine
	model *Model
}

// NewEngine makes an engine over a new session with the given options; spillDir "" is a private temp directory.
func (m *Model) NewEngine(strategy Strategy, spillDir string, opts ...SessionOption) (*Engine, error) {
	o, err := sessionOptions(opts)
	if err != nil {
		return nil, err
	}
	defer capi.DeleteIkv_session_options(o)
	var p uintptr
	err = m.with(func(h capi.Struct_SS_ikv_model) error {
		return call(func() int { return capi.Ikv_engine_create(&p, h, o, int(strategy), spillDir) })
	})
	if err != nil {
		return nil, err
	}
	e := &Engine{h: capi.SwigcptrStruct_SS_ikv_engine(p), model: m}
	runtime.SetFinalizer(e, func(e *Engine) { e.Close() })
	return e, nil
}

// Close frees the engine, its conversations and their spill files. Safe to call more than once.
func (e *Engine) Close() error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h != nil {
		capi.Ikv_engine_free(e.h)
		e.h = nil
	}
	return nil
}

func (e *Engine) with(f func(h capi.Struct_SS_ikv_engine) int) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.h == nil {
		return &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the engine is closed"}
	}
	return call(func() int { return f(e.h) })
}

// PrefixCache turns the prefix cache on with these tiers (memoryBytes of this process's memory, a directory, a
// Redis/Valkey "host:port"; "" for none), or off when none is given.
func (e *Engine) PrefixCache(memoryBytes int64, diskDir, redisAddress string) error {
	return e.with(func(h capi.Struct_SS_ikv_engine) int {
		return capi.Ikv_engine_prefix_cache(h, memoryBytes, diskDir, redisAddress)
	})
}

// Open starts a conversation (greedy) and returns its id; priority: higher runs first and is preempted last;
// memoryLimitTokens > 0 compresses it to that many tokens when it holds more (needs a compression policy).
func (e *Engine) Open(priority int, memoryLimitTokens int64) (int64, error) {
	var id int64
	err := e.with(func(h capi.Struct_SS_ikv_engine) int {
		return capi.Ikv_engine_open(&id, h, priority, memoryLimitTokens, nil)
	})
	return id, err
}

// Submit queues a turn: tokens appended to the conversation, then up to maxTokens generated.
func (e *Engine) Submit(conversation int64, tokens []int32, maxTokens int) error {
	return e.with(func(h capi.Struct_SS_ikv_engine) int {
		return capi.Ikv_engine_submit(h, conversation, tokens, maxTokens)
	})
}

// Pending is the number of queued and running turns.
func (e *Engine) Pending() (int64, error) {
	var n int64
	err := e.with(func(h capi.Struct_SS_ikv_engine) int { return capi.Ikv_engine_pending(&n, h) })
	return n, err
}

// Step runs one scheduling step and returns the tokens it produced.
func (e *Engine) Step() ([]EngineEvent, error) {
	var out []EngineEvent
	err := e.with(func(h capi.Struct_SS_ikv_engine) int {
		var pending int64
		if st := capi.Ikv_engine_pending(&pending, h); st < 0 {
			return st
		}
		buf := make([]int64, 2*pending+2)
		var n uint64
		st := capi.Ikv_engine_step(buf, &n, h)
		for i := uint64(0); i+1 < n; i += 2 {
			out = append(out, EngineEvent{Conversation: buf[i], Token: int32(buf[i+1])})
		}
		return st
	})
	return out, err
}

// Run steps until no turn is pending and returns every token produced, in order.
func (e *Engine) Run() ([]EngineEvent, error) {
	var all []EngineEvent
	for {
		n, err := e.Pending()
		if err != nil || n == 0 {
			return all, err
		}
		ev, err := e.Step()
		all = append(all, ev...)
		if err != nil {
			return all, err
		}
	}
}

// State is the state of the conversation's latest turn.
func (e *Engine) State(conversation int64) (TurnState, error) {
	var st int32
	err := e.with(func(h capi.Struct_SS_ikv_engine) int { return capi.Ikv_engine_turn_state(&st, h, conversation) })
	return TurnState(st), err
}

// Where says where the conversation's cache is (capi IKV_WHERE_* values).
func (e *Engine) Where(conversation int64) (int, error) {
	var w int32
	err := e.with(func(h capi.Struct_SS_ikv_engine) int { return capi.Ikv_engine_where(&w, h, conversation) })
	return int(w), err
}

// Generated is the tokens the conversation's latest turn generated.
func (e *Engine) Generated(conversation int64) ([]int32, error) {
	var out []int32
	err := e.with(func(h capi.Struct_SS_ikv_engine) int {
		var n uint64
		st := capi.Ikv_engine_generated(nil, &n, h, conversation)
		if st < 0 && st != int(capi.IKV_ERR_BUFFER_TOO_SMALL) {
			return st
		}
		out = make([]int32, n)
		if n == 0 {
			return 0
		}
		return capi.Ikv_engine_generated(out, &n, h, conversation)
	})
	return out, err
}

func (e *Engine) text(get func(buf []byte, n *uint64, h capi.Struct_SS_ikv_engine) int) (string, error) {
	var out string
	err := e.with(func(h capi.Struct_SS_ikv_engine) int {
		var n uint64
		st := get(nil, &n, h)
		if st < 0 && st != int(capi.IKV_ERR_BUFFER_TOO_SMALL) {
			return st
		}
		buf := make([]byte, n+1)
		st = get(buf, &n, h)
		out = string(buf[:n])
		return st
	})
	return out, err
}

// Failure says why the conversation's latest turn failed ("" when it did not).
func (e *Engine) Failure(conversation int64) (string, error) {
	return e.text(func(buf []byte, n *uint64, h capi.Struct_SS_ikv_engine) int {
		return capi.Ikv_engine_failure(buf, n, h, conversation)
	})
}

// CloseConversation frees a conversation's memory wherever it is.
func (e *Engine) CloseConversation(conversation int64) error {
	return e.with(func(h capi.Struct_SS_ikv_engine) int { return capi.Ikv_engine_close(h, conversation) })
}

// Stat reads one counter (capi IKV_ENGINE_STAT_* values).
func (e *Engine) Stat(stat int) (int64, error) {
	var v int64
	err := e.with(func(h capi.Struct_SS_ikv_engine) int { return capi.Ikv_engine_stat(&v, h, stat) })
	return v, err
}

// Report is the cost model's rates and every decision so far (see ikv_engine_report_json).
func (e *Engine) Report() (map[string]any, error) {
	s, err := e.text(func(buf []byte, n *uint64, h capi.Struct_SS_ikv_engine) int {
		return capi.Ikv_engine_report_json(buf, n, h)
	})
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := json.Unmarshal([]byte(s), &out); err != nil {
		return nil, &Error{Status: int32(capi.IKV_ERR_INTERNAL), Message: "engine report is not JSON: " + err.Error()}
	}
	return out, nil
}
