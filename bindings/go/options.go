package infokv

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// Policy is a compression policy (the C IKV_POLICY_* values).
type Policy int32

// String is the policy's name as the CLI and configs spell it ("snapkv"); Policy(N) for an unknown value.
func (p Policy) String() string { return enumName(policyNames, p, "Policy") }

// ParsePolicy reads a policy name ("infokv", "SnapKV", ...); ErrInvalidArgument names the known ones.
func ParsePolicy(name string) (Policy, error) { return parseEnum(policyNames, name, "policy") }

// Question is which question a compression serves (the C IKV_QUESTION_* values).
type Question int32

// Questions: the tokens that follow at once (QuestionNext), a question not yet asked, for which a probe question's
// queries stand in (QuestionLater, the default: a chat's history, a document, a cache about to be saved), or both.
const (
	QuestionBoth  Question = Question(capi.IKV_QUESTION_BOTH)
	QuestionNext  Question = Question(capi.IKV_QUESTION_NEXT)
	QuestionLater Question = Question(capi.IKV_QUESTION_LATER)
)

var questionNames = map[Question]string{QuestionBoth: "both", QuestionNext: "next", QuestionLater: "later"}

// String is the question's name ("later"); Question(N) for an unknown value.
func (q Question) String() string { return enumName(questionNames, q, "Question") }

// ParseQuestion reads "both", "next" or "later"; ErrInvalidArgument names them otherwise.
func ParseQuestion(name string) (Question, error) { return parseEnum(questionNames, name, "question") }

// KVDtype is a KV cache element type (the C IKV_KV_F32 ... values).
type KVDtype int32

// KV cache element types.
const (
	KVF32  KVDtype = KVDtype(capi.IKV_KV_F32)
	KVF16  KVDtype = KVDtype(capi.IKV_KV_F16)
	KVBF16 KVDtype = KVDtype(capi.IKV_KV_BF16)
	KVQ8_0 KVDtype = KVDtype(capi.IKV_KV_Q8_0)
	KVQ4_0 KVDtype = KVDtype(capi.IKV_KV_Q4_0)
)

var dtypeNames = map[KVDtype]string{KVF32: "f32", KVF16: "f16", KVBF16: "bf16", KVQ8_0: "q8_0", KVQ4_0: "q4_0"}

// String is the dtype's name ("f16"); KVDtype(N) for an unknown value.
func (t KVDtype) String() string { return enumName(dtypeNames, t, "KVDtype") }

// ParseKVDtype reads a dtype name ("f32", "f16", "bf16", "q8_0", "q4_0"); ErrInvalidArgument names the known ones.
func ParseKVDtype(name string) (KVDtype, error) { return parseEnum(dtypeNames, name, "KV dtype") }

func enumName[T ~int32](names map[T]string, v T, kind string) string {
	if n, ok := names[v]; ok {
		return n
	}
	return fmt.Sprintf("%s(%d)", kind, int32(v))
}

func parseEnum[T ~int32](names map[T]string, name string, what string) (T, error) {
	var known []string
	for v, n := range names {
		if strings.EqualFold(n, strings.TrimSpace(name)) {
			return v, nil
		}
		known = append(known, n)
	}
	sort.Strings(known)
	return 0, &Error{Status: int32(capi.IKV_ERR_INVALID_ARGUMENT),
		Message: fmt.Sprintf("unknown %s %q; one of %s", what, name, strings.Join(known, ", "))}
}

// ---------------------------------------------------------------------------------------------------------------

// SessionOption changes one session setting (fields of the C ikv_session_options).
type SessionOption func(s *SessionSettings) error

// SessionSettings is what a SessionOption edits: the settings of a session being created, starting from the
// library's defaults. Write your own option with Set:
//
//	func WithInterval(n int) infokv.SessionOption {
//		return func(s *infokv.SessionSettings) error { return s.Set("interval", float64(n)) }
//	}
type SessionSettings struct{ o capi.Ikv_session_options }

// Set sets a numeric field of the C ikv_session_options by its C name (see WithField).
func (s *SessionSettings) Set(name string, value float64) error { return setField(s.o, name, value) }

// SetDevice sets the device name (see WithDevice).
func (s *SessionSettings) SetDevice(device string) { s.o.SetDevice(device) }

func WithThreads(n int) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetN_threads(n); return nil }
}

// WithKVDtype sets the KV cache element type (KVF16, the default; KVF32; KVBF16; KVQ8_0 and KVQ4_0, blocks of 32
// values with an f16 scale, on the CPU for models whose head size is a multiple of 32).
func WithKVDtype(t KVDtype) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetKv_dtype(int(t)); return nil }
}
func WithBlockSize(n int) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetBlock_size(n); return nil }
}
func WithKVPoolBlocks(n int64) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetKv_pool_blocks(n); return nil }
}
func WithKVPoolBytes(n int64) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetKv_pool_bytes(n); return nil }
}

// WithMaxSequences bounds the sequences the session holds, [1, 2^20] (0: 4096); AddSequence and Fork beyond it
// fail with an error matching ErrOutOfRange.
func WithMaxSequences(n int) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetMax_sequences(n); return nil }
}

// WithMaxLoss gives PolicyAuto a quality target instead of a budget: each compression keeps, per layer, as few tokens
// as hold the proxy loss at or under it (0: compress to the budget). NewSession fails with ErrInvalidArgument for a
// negative or non-finite value, or a positive one with another policy.
func WithMaxLoss(maxLoss float64) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetMax_loss(maxLoss); return nil }
}

// WithLayerPrecision: true (the default) lets PolicyAuto under a byte budget hold a layer at q8_0 where the bytes
// keep more than rounding loses (CPU, heads a multiple of 32; Session.LayerDtype says which); false keeps every layer
// in the session's KV dtype.
func WithLayerPrecision(auto bool) SessionOption {
	return func(s *SessionSettings) error {
		o := s.o
		if auto {
			o.SetLayer_precision(capi.IKV_LAYER_PRECISION_AUTO)
		} else {
			o.SetLayer_precision(capi.IKV_LAYER_PRECISION_OFF)
		}
		return nil
	}
}

// WithPolicy selects the compression policy (PolicyInfoKV, PolicySnapKV, ...); it needs a budget.
func WithPolicy(p Policy) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetPolicy(int(p)); return nil }
}

// WithBudgetFraction keeps this fraction of a sequence's tokens per layer when compressing, (0, 1].
func WithBudgetFraction(f float64) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetBudget_fraction(f); o.SetBudget_tokens(0); return nil }
}

// WithBudgetTokens keeps this many tokens per layer when compressing.
func WithBudgetTokens(n int) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetBudget_tokens(n); o.SetBudget_fraction(0); return nil }
}

// WithDevice chooses where the session runs: "auto" (the default; so is "": the runtime's choice, the CPU for now), "cpu",
// "cuda" or "cuda:N". NewSession then fails with an error matching ErrNoDevice when there is no such CUDA device (its
// Message says why) and ErrInvalidArgument for any other name.
func WithDevice(device string) SessionOption {
	return func(s *SessionSettings) error { o := s.o; o.SetDevice(device); return nil }
}

// WithField sets any numeric field of the C ikv_session_options by its C name ("interval", "alpha", "window",
// ...), so options added to the C ABI are usable before they get a named helper. An integer field takes only a
// whole number its C type holds (no silent truncation or wrap-around); an unknown name, a string field (use
// WithDevice) or an unfit value makes NewSession fail with ErrInvalidArgument.
func WithField(name string, value float64) SessionOption {
	return func(s *SessionSettings) error { o := s.o; return setField(o, name, value) }
}

func setField(o any, name string, value float64) error {
	bad := func(msg string) error { return &Error{Status: int32(capi.IKV_ERR_INVALID_ARGUMENT), Message: msg} }
	if name == "" || name == "struct_size" || name == "version" {
		return bad("unknown option " + strconv.Quote(name))
	}
	mth := reflect.ValueOf(o).MethodByName("Set" + strings.ToUpper(name[:1]) + name[1:])
	if !mth.IsValid() || mth.Type().NumIn() != 1 {
		return bad("unknown option " + strconv.Quote(name))
	}
	arg := reflect.New(mth.Type().In(0)).Elem()
	// SWIG gives C int fields as Go int and (u)int64_t as (u)int64: an integer must be whole and inside the C type,
	// and inside 2^53 for 64-bit fields, where a float64 stops holding every integer.
	lo, hi := 0.0, 0.0
	switch arg.Kind() {
	case reflect.Float32, reflect.Float64:
		arg.SetFloat(value)
		mth.Call([]reflect.Value{arg})
		return nil
	case reflect.Int, reflect.Int32:
		lo, hi = math.MinInt32, math.MaxInt32
	case reflect.Int64:
		lo, hi = -(1 << 53), 1<<53
	case reflect.Uint, reflect.Uint32:
		hi = math.MaxUint32
	case reflect.Uint64:
		hi = 1 << 53
	default:
		return bad("option " + name + " is not numeric (the device has WithDevice)")
	}
	if value != math.Trunc(value) || value < lo || value > hi {
		return bad(fmt.Sprintf("option %s takes a whole number in [%.0f, %.0f], not %v", name, lo, hi, value))
	}
	if arg.CanInt() {
		arg.SetInt(int64(value))
	} else {
		arg.SetUint(uint64(value))
	}
	mth.Call([]reflect.Value{arg})
	return nil
}

// SamplerOption changes one sampling setting (fields of the C ikv_sampler_options).
type SamplerOption func(s *SamplerSettings) error

// SamplerSettings is what a SamplerOption edits: the settings of a sampler being created, starting from the
// library's defaults (see SessionSettings for writing your own option).
type SamplerSettings struct{ o capi.Ikv_sampler_options }

// Set sets a numeric field of the C ikv_sampler_options by its C name (see SamplerField).
func (s *SamplerSettings) Set(name string, value float64) error { return setField(s.o, name, value) }

// Temperature <= 0 samples greedily.
func Temperature(t float32) SamplerOption {
	return func(s *SamplerSettings) error { o := s.o; o.SetTemperature(t); return nil }
}
func TopK(k int) SamplerOption {
	return func(s *SamplerSettings) error { o := s.o; o.SetTop_k(k); return nil }
}
func TopP(p float32) SamplerOption {
	return func(s *SamplerSettings) error { o := s.o; o.SetTop_p(p); return nil }
}
func MinP(p float32) SamplerOption {
	return func(s *SamplerSettings) error { o := s.o; o.SetMin_p(p); return nil }
}
func RepeatPenalty(p float32) SamplerOption {
	return func(s *SamplerSettings) error { o := s.o; o.SetRepeat_penalty(p); return nil }
}
func Seed(seed uint64) SamplerOption {
	return func(s *SamplerSettings) error { o := s.o; o.SetSeed(seed); return nil }
}

// SamplerField sets any numeric field of the C ikv_sampler_options by its C name.
func SamplerField(name string, value float64) SamplerOption {
	return func(s *SamplerSettings) error { o := s.o; return setField(o, name, value) }
}

// Sampler holds sampling settings and state (the repetition penalty's history).
type Sampler struct {
	gate gate
	h    capi.Struct_SS_ikv_sampler
}
