package infokv

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"runtime"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// Error is a failed infokv call: the C status code and the library's message. Compare with the sentinels using
// errors.Is (errors.Is(err, infokv.ErrKVFull)); use errors.As to read the message.
type Error struct {
	Status  int32
	Message string
	cause   error // for ErrIO about a file that does not exist: an *fs.PathError wrapping fs.ErrNotExist
}

// Unwrap gives the underlying cause where there is one: an I/O error about a missing file unwraps to an
// *fs.PathError, so errors.Is(err, fs.ErrNotExist) holds as for os.Open.
func (e *Error) Unwrap() error { return e.cause }

// withPath makes an ErrIO about a path that does not exist also match fs.ErrNotExist.
func withPath(err error, path string) error {
	var e *Error
	if errors.As(err, &e) && e.Status == int32(capi.IKV_ERR_IO) {
		if _, st := os.Lstat(path); errors.Is(st, fs.ErrNotExist) {
			e.cause = &fs.PathError{Op: "open", Path: path, Err: fs.ErrNotExist}
		}
	}
	return err
}

func (e *Error) Error() string {
	text := capi.Ikv_status_string(int(e.Status))
	if e.Message == "" {
		return "infokv: " + text
	}
	return fmt.Sprintf("infokv: %s: %s", text, e.Message)
}

// Is reports whether target is an *Error with the same status (the sentinels carry no message).
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Status == e.Status
}

func sentinel(status int) *Error { return &Error{Status: int32(status)} }

// Sentinels, one per status of the C ABI.
var (
	ErrInvalidArgument = sentinel(capi.IKV_ERR_INVALID_ARGUMENT)
	ErrIO              = sentinel(capi.IKV_ERR_IO)
	ErrBadModel        = sentinel(capi.IKV_ERR_BAD_MODEL)
	ErrUnsupported     = sentinel(capi.IKV_ERR_UNSUPPORTED)
	ErrOutOfMemory     = sentinel(capi.IKV_ERR_OUT_OF_MEMORY)
	ErrKVFull          = sentinel(capi.IKV_ERR_KV_FULL)
	ErrOutOfRange      = sentinel(capi.IKV_ERR_OUT_OF_RANGE)
	ErrCancelled       = sentinel(capi.IKV_ERR_CANCELLED)
	ErrBadSnapshot     = sentinel(capi.IKV_ERR_BAD_SNAPSHOT)
	ErrWrongModel      = sentinel(capi.IKV_ERR_WRONG_MODEL)
	ErrVersion         = sentinel(capi.IKV_ERR_VERSION)
	ErrBadConfig       = sentinel(capi.IKV_ERR_BAD_CONFIG)
	ErrNoDevice        = sentinel(capi.IKV_ERR_NO_DEVICE)
	ErrBufferTooSmall  = sentinel(capi.IKV_ERR_BUFFER_TOO_SMALL)
	ErrNotFound        = sentinel(capi.IKV_ERR_NOT_FOUND)
	ErrBadState        = sentinel(capi.IKV_ERR_BAD_STATE)
	ErrBadHandle       = sentinel(capi.IKV_ERR_BAD_HANDLE)
	ErrBusy            = sentinel(capi.IKV_ERR_BUSY)
	ErrInternal        = sentinel(capi.IKV_ERR_INTERNAL)
)

// call runs one C call on a locked OS thread, so that the thread-local error message read after a failure is
// the message of this call (goroutines may otherwise move between threads between two cgo calls).
func call(f func() int) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	st := f()
	if st >= 0 {
		return nil
	}
	return &Error{Status: int32(st), Message: capi.Ikv_last_error_message()}
}

// cancelled is returned when a context or a callback stopped generation: it matches ErrCancelled and unwraps to
// the cause (context.Canceled, context.DeadlineExceeded, or the callback's error).
type cancelled struct{ cause error }

func (c *cancelled) Error() string {
	if c.cause == nil {
		return "infokv: cancelled"
	}
	return "infokv: cancelled: " + c.cause.Error()
}
func (c *cancelled) Unwrap() error        { return c.cause }
func (c *cancelled) Is(target error) bool { return target == ErrCancelled }
