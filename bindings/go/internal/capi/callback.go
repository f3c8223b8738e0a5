// Package capi is the SWIG-generated binding of the infokv C ABI (capi.go and capi_wrap.c are generated from
// bindings/infokv.i and committed; the go_generated_code_is_current test keeps them current). This file adds what SWIG cannot: the cgo flags and the C-callable trampoline that
// streaming callbacks go through.
package capi

/*
#cgo pkg-config: infokv
#include <stddef.h>
#include <stdint.h>
*/
import "C"

import (
	"runtime/cgo"
	"unsafe"
)

// TokenFunc receives each generated token and the UTF-8 text it completed; returning true stops generation.
type TokenFunc func(token int32, text []byte) bool

// NewCallback registers fn for one C call; pass the handle as the callback argument and Delete it afterwards.
func NewCallback(fn TokenFunc) cgo.Handle { return cgo.NewHandle(fn) }

//export ikvGoTokenTrampoline
func ikvGoTokenTrampoline(userData unsafe.Pointer, token C.int32_t, text *C.char, n C.size_t) C.int32_t {
	fn := cgo.Handle(uintptr(userData)).Value().(TokenFunc)
	var b []byte
	if n > 0 {
		b = C.GoBytes(unsafe.Pointer(text), C.int(n))
	}
	if fn(int32(token), b) {
		return 1
	}
	return 0
}
