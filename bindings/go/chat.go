package infokv

import (
	"context"
	"errors"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// ChatMessage is one chat message: a role ("system", "user", "assistant", ...) and its text.
type ChatMessage struct {
	Role    string
	Content string
}

// ChatProtect says what chat calls protect from eviction (the C IKV_CHAT_PROTECT_* values).
type ChatProtect int32

const (
	// ChatProtectSystem (the default) keeps the system prompt and the template's control tokens in every layer.
	ChatProtectSystem ChatProtect = ChatProtect(capi.IKV_CHAT_PROTECT_SYSTEM)
	// ChatProtectNone protects nothing.
	ChatProtectNone ChatProtect = ChatProtect(capi.IKV_CHAT_PROTECT_NONE)
	// ChatProtectFair keeps the control tokens and makes each message a fair span (each keeps the same fraction).
	ChatProtectFair ChatProtect = ChatProtect(capi.IKV_CHAT_PROTECT_FAIR)
)

func (p ChatProtect) String() string {
	return enumName(map[ChatProtect]string{ChatProtectSystem: "system", ChatProtectNone: "none", ChatProtectFair: "fair"},
		p, "ChatProtect")
}

// ChatFormat is the model's chat format: "chatml", "llama3", or "none" (chat calls then fail with ErrUnsupported).
func (m *Model) ChatFormat() (string, error) {
	var f int32
	err := m.with(func(h capi.Struct_SS_ikv_model) error { return call(func() int { return capi.Ikv_chat_format(&f, h) }) })
	switch {
	case err != nil:
		return "", err
	case f == int32(capi.IKV_CHAT_FORMAT_CHATML):
		return "chatml", nil
	case f == int32(capi.IKV_CHAT_FORMAT_LLAMA3):
		return "llama3", nil
	}
	return "none", nil
}

// ChatTokenize gives the token ids of a conversation as the model's template writes it (what Chat decodes): the
// first message opens it (BOS, the template's default system turn); addGenerationPrompt ends with the assistant's
// header.
func (m *Model) ChatTokenize(messages []ChatMessage, addGenerationPrompt bool) ([]int32, error) {
	var ids []int32
	if len(messages) == 0 {
		return m.chatIDs("", "", true, addGenerationPrompt)
	}
	for i, msg := range messages {
		part, err := m.chatIDs(msg.Role, msg.Content, i == 0, addGenerationPrompt && i == len(messages)-1)
		if err != nil {
			return nil, err
		}
		ids = append(ids, part...)
	}
	return ids, nil
}

func (m *Model) chatIDs(role, content string, first, gen bool) ([]int32, error) {
	b := func(v bool) int {
		if v {
			return 1
		}
		return 0
	}
	out := make([]int32, len(content)+64)
	var n uint64
	err := m.with(func(h capi.Struct_SS_ikv_model) error {
		err := call(func() int { return capi.Ikv_chat_tokenize(out, &n, h, role, content, b(first), b(gen)) })
		if errors.Is(err, ErrBufferTooSmall) {
			out = make([]int32, n)
			err = call(func() int { return capi.Ikv_chat_tokenize(out, &n, h, role, content, b(first), b(gen)) })
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return out[:n], nil
}

// ChatAdd appends one message to seq in the model's template and decodes it; it returns the positions [begin, end)
// the message took. An empty sequence opens the conversation. All or nothing.
func (s *Session) ChatAdd(seq int32, msg ChatMessage, protect ChatProtect) (begin, end int64, err error) {
	err = s.with(func(h capi.Struct_SS_ikv_session) int {
		return capi.Ikv_chat_add(&begin, &end, h, int(seq), msg.Role, msg.Content, int(protect))
	})
	return begin, end, err
}

// Chat appends messages to the conversation in seq and generates the assistant's reply (streamed to onToken, which
// may be nil, and stopped by ctx), with the system prompt and the template's control tokens protected. The reply
// and its closing markup stay in the sequence, so the next call passes only the new messages. A nil sampler is
// greedy.
func (s *Session) Chat(ctx context.Context, seq int32, messages []ChatMessage, maxTokens int, sampler *Sampler,
	onToken func(Token) error) (Result, error) {
	return s.ChatWith(ctx, seq, messages, maxTokens, sampler, onToken, ChatProtectSystem)
}

// ChatWith is Chat with the given protection.
func (s *Session) ChatWith(ctx context.Context, seq int32, messages []ChatMessage, maxTokens int, sampler *Sampler,
	onToken func(Token) error, protect ChatProtect) (Result, error) {
	for _, msg := range messages {
		if _, _, err := s.ChatAdd(seq, msg, protect); err != nil {
			return Result{}, err
		}
	}
	return s.stream(ctx, maxTokens, sampler, onToken,
		func(out []int32, n *uint64, h capi.Struct_SS_ikv_session, sh capi.Struct_SS_ikv_sampler, cb uintptr) int {
			return capi.Ikv_chat_reply(out, n, h, int(seq), maxTokens, sh, cb, int(protect))
		})
}
