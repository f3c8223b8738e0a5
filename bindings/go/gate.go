package infokv

import (
	"errors"
	"sync"
	"sync/atomic"
)

// gate serialises the calls on one C object (a session or a sampler) and lets the onToken callback of a running
// Generate call back into that object.
//
// Generate holds the object's mutex while the C library streams tokens to onToken, and onToken runs on the
// generating goroutine's own OS thread. A method called from onToken would wait for that mutex forever. The C
// library lets the thread that is inside a call on a session or sampler re-enter it and answers any other thread
// with IKV_ERR_BUSY before doing anything. So while a Generate streams through the object, a caller that finds the
// mutex taken calls the C library directly: from onToken that works; from another goroutine it gets ErrBusy and
// then waits for the mutex as it always did.
type gate struct {
	mu     sync.Mutex
	stream atomic.Uintptr // the C handle while a Generate streams through it; 0 otherwise
}

// enter takes the mutex and returns true (the caller unlocks it), or, while a Generate streams and the C library
// admits this thread, runs through(handle) without the mutex and returns false with its error.
func (g *gate) enter(through func(h uintptr) error) (bool, error) {
	if g.mu.TryLock() {
		return true, nil
	}
	if h := g.stream.Load(); h != 0 {
		if err := through(h); !errors.Is(err, ErrBusy) {
			return false, err
		}
	}
	g.mu.Lock()
	return true, nil
}

// errInCallback is what Close returns when called from onToken: the object is in use by the Generate that called
// onToken, which must return first.
func errInCallback(what string) error {
	return &Error{Status: int32(ErrBadState.Status), Message: "Close of the " + what +
		" called from onToken while its Generate is running: return from the callback first"}
}
