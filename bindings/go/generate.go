package infokv

import (
	"context"
	"errors"
	"strings"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// Token is one generated token and the text it completed (ID -1: a final flush of held-back bytes).
type Token struct {
	ID   int32
	Text string
}

// Result is what Generate made.
type Result struct {
	Tokens []int32
	Text   string
}

// Generate decodes prompt into seq (may be empty when the sequence has logits), then samples up to maxTokens
// tokens, stopping at EOS. onToken (may be nil) sees each token; returning an error stops generation. When ctx
// is cancelled or onToken fails, the error matches ErrCancelled and unwraps to the cause; the tokens made so far
// are returned and stay in the sequence, and onToken has seen each of them (a token decoded before ctx was found
// cancelled is still reported). onToken runs on the generating goroutine and may call the session, its
// sampler and its model (reading, decoding, forking: the next token is drawn from the sequence as it then is);
// Close of the session or sampler from onToken returns ErrBadState. Other goroutines calling the session wait
// until Generate returns.
func (s *Session) Generate(ctx context.Context, seq int32, prompt []int32, maxTokens int, sampler *Sampler,
	onToken func(Token) error) (Result, error) {
	return s.stream(ctx, maxTokens, sampler, onToken,
		func(out []int32, n *uint64, h capi.Struct_SS_ikv_session, sh capi.Struct_SS_ikv_sampler, cb uintptr) int {
			return capi.Ikv_generate(out, n, h, int(seq), prompt, maxTokens, sh, cb)
		})
}

// stream runs a generating C call (ikv_generate, ikv_chat_reply) with onToken and ctx behind its callback, the
// session and sampler open to onToken (gate), and maps its result.
func (s *Session) stream(ctx context.Context, maxTokens int, sampler *Sampler, onToken func(Token) error,
	run func(out []int32, n *uint64, h capi.Struct_SS_ikv_session, sh capi.Struct_SS_ikv_sampler, cb uintptr) int) (Result, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	if sampler == nil {
		sampler = Greedy()
		defer sampler.Close()
	}
	var text strings.Builder
	var cause error
	cb := capi.NewCallback(func(token int32, b []byte) bool {
		text.Write(b)
		// The token is in the sequence by now: onToken sees it even when ctx was cancelled meanwhile, so that every
		// token the sequence holds was reported.
		if onToken != nil {
			if err := onToken(Token{ID: token, Text: string(b)}); err != nil {
				cause = err
				return true
			}
		}
		if err := ctx.Err(); err != nil {
			cause = err
			return true
		}
		return false
	})
	defer cb.Delete()
	if err := ctx.Err(); err != nil {
		return Result{}, &cancelled{cause: err}
	}
	if maxTokens < 0 {
		maxTokens = 0
	}
	out := make([]int32, maxTokens)
	var n uint64
	sampler.gate.mu.Lock()
	defer sampler.gate.mu.Unlock()
	if sampler.h == nil {
		return Result{}, &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the sampler is closed"}
	}
	s.model.streaming.Add(1)
	defer s.model.streaming.Add(-1)
	err := s.with(func(h capi.Struct_SS_ikv_session) int {
		s.gate.stream.Store(h.Swigcptr())
		sampler.gate.stream.Store(sampler.h.Swigcptr())
		defer s.gate.stream.Store(0)
		defer sampler.gate.stream.Store(0)
		return run(out, &n, h, sampler.h, uintptr(cb))
	})
	if n > uint64(len(out)) {
		n = uint64(len(out))
	}
	res := Result{Tokens: out[:n], Text: text.String()}
	if errors.Is(err, ErrCancelled) {
		return res, &cancelled{cause: cause}
	}
	return res, err
}

// GenerateText tokenizes text (with BOS) and generates into sequence 0.
func (s *Session) GenerateText(ctx context.Context, text string, maxTokens int, sampler *Sampler,
	onToken func(Token) error) (Result, error) {
	prompt, err := s.model.Tokenize(text, true)
	if err != nil {
		return Result{}, err
	}
	return s.Generate(ctx, 0, prompt, maxTokens, sampler, onToken)
}
