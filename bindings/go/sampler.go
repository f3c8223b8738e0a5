package infokv

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// NewSampler creates a sampler (defaults: temperature 0.8, top-k 40, top-p 0.95, min-p 0.05).
func NewSampler(opts ...SamplerOption) (*Sampler, error) {
	o := capi.NewIkv_sampler_options()
	defer capi.DeleteIkv_sampler_options(o)
	if err := call(func() int { return capi.Ikv_sampler_options_init(o) }); err != nil {
		return nil, err
	}
	for _, f := range opts {
		if err := f(&SamplerSettings{o: o}); err != nil {
			return nil, err
		}
	}
	var p uintptr
	if err := call(func() int { return capi.Ikv_sampler_create(&p, o) }); err != nil {
		return nil, err
	}
	s := &Sampler{h: capi.SwigcptrStruct_SS_ikv_sampler(p)}
	runtime.SetFinalizer(s, func(s *Sampler) { s.Close() })
	return s, nil
}

// Greedy is a sampler that always takes the most likely token.
func Greedy() *Sampler {
	s, err := NewSampler(Temperature(0))
	if err != nil {
		panic(fmt.Sprintf("infokv: greedy sampler: %v", err))
	}
	return s
}

// Close frees the sampler. Safe to call more than once.
func (s *Sampler) Close() error {
	locked, err := s.gate.enter(func(h uintptr) error {
		// ikv_sample checks the sampler before the session: BUSY when another thread is inside a call on the
		// sampler, BAD_HANDLE (for the NULL session) when this thread is
		var tok int32
		if err := call(func() int {
			return capi.Ikv_sample(&tok, capi.SwigcptrStruct_SS_ikv_sampler(h), nil, 0)
		}); errors.Is(err, ErrBusy) {
			return err
		}
		return errInCallback("sampler")
	})
	if !locked {
		return err
	}
	defer s.gate.mu.Unlock()
	if s.h != nil {
		capi.Ikv_sampler_free(s.h)
		s.h = nil
	}
	return nil
}
