package infokv

import (
	"encoding/json"
	"errors"
	"os"
	"runtime"
	"sync"

	"github.com/infokv/infokv/bindings/go/internal/capi"
)

// Config holds settings for models, sessions and samplers (the FlatBuffers schema schemas/config.fbs), made from
// JSON or the binary form and read back in either. It is immutable and may be shared by goroutines; objects made
// from it do not need it any more. Close it when done (a finalizer frees it otherwise).
//
// A malformed config, an unknown field or an out-of-range value gives an error matching ErrBadConfig whose
// message names the field.
type Config struct {
	mu sync.RWMutex
	h  capi.Struct_SS_ikv_config
}

func wrapConfig(p uintptr) *Config {
	c := &Config{h: capi.SwigcptrStruct_SS_ikv_config(p)}
	runtime.SetFinalizer(c, func(c *Config) { c.Close() })
	return c
}

// NewConfig returns a config holding every default.
func NewConfig() (*Config, error) {
	var p uintptr
	if err := call(func() int { return capi.Ikv_config_create(&p) }); err != nil {
		return nil, err
	}
	return wrapConfig(p), nil
}

// ConfigFromJSON parses JSON text (the schema's field names, e.g. {"threads": 4, "compression": {"policy":
// "infokv", "budget_fraction": 0.5}}); absent fields keep their defaults.
func ConfigFromJSON(text string) (*Config, error) {
	var p uintptr
	if err := call(func() int { return capi.Ikv_config_from_json(&p, text) }); err != nil {
		return nil, err
	}
	return wrapConfig(p), nil
}

// ConfigFromMap marshals fields to JSON and parses them.
func ConfigFromMap(fields map[string]any) (*Config, error) {
	b, err := json.Marshal(fields)
	if err != nil {
		return nil, err
	}
	return ConfigFromJSON(string(b))
}

// ConfigFromBinary reads the binary form (a verified FlatBuffer, identifier "IKVC").
func ConfigFromBinary(data []byte) (*Config, error) {
	var p uintptr
	if err := call(func() int { return capi.Ikv_config_from_binary(&p, data) }); err != nil {
		return nil, err
	}
	return wrapConfig(p), nil
}

// Close frees the config. Safe to call more than once.
func (c *Config) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.h != nil {
		capi.Ikv_config_free(c.h)
		c.h = nil
	}
	return nil
}

func (c *Config) with(f func(h capi.Struct_SS_ikv_config) error) error {
	if c == nil {
		return &Error{Status: int32(capi.IKV_ERR_INVALID_ARGUMENT), Message: "nil config"}
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if c.h == nil {
		return &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the config is closed"}
	}
	return f(c.h)
}

// sized runs a C call that follows the size-query protocol and returns the bytes it wrote.
func sized(f func(out []byte, n *uint64) int) ([]byte, error) {
	var n uint64
	err := call(func() int { return f(nil, &n) })
	if err != nil && !errors.Is(err, ErrBufferTooSmall) {
		return nil, err
	}
	if err == nil && n == 0 {
		return []byte{}, nil
	}
	buf := make([]byte, n+1)
	if err := call(func() int { return f(buf, &n) }); err != nil {
		return nil, err
	}
	return buf[:n], nil
}

// bytesOut runs one of the C size-query getters on the config's handle.
func (c *Config) bytesOut(get func(b []byte, n *uint64, h capi.Struct_SS_ikv_config) int) ([]byte, error) {
	var out []byte
	err := c.with(func(h capi.Struct_SS_ikv_config) (err error) {
		out, err = sized(func(b []byte, n *uint64) int { return get(b, n, h) })
		return
	})
	return out, err
}

// JSON is every field of the config as indented JSON.
func (c *Config) JSON() (string, error) {
	out, err := c.bytesOut(capi.Ikv_config_to_json)
	return string(out), err
}

// Binary is the config's binary form.
func (c *Config) Binary() ([]byte, error) { return c.bytesOut(capi.Ikv_config_to_binary) }

// ModelPath is the config's model path ("" when unset).
func (c *Config) ModelPath() (string, error) {
	out, err := c.bytesOut(capi.Ikv_config_get_model_path)
	return string(out), err
}

// LoadWithConfig loads the model named by the config's model_path (ErrBadConfig when it is empty; an error matching
// ErrIO and fs.ErrNotExist when it names no file).
func LoadWithConfig(c *Config) (*Model, error) {
	path, _ := c.ModelPath()
	m, err := loadWithConfig(c, func(p *uintptr, h capi.Struct_SS_ikv_config) int { return capi.Ikv_model_load_with_config(p, h) })
	if err != nil && path != "" {
		return nil, withPath(err, path)
	}
	return m, err
}

// LoadWithConfigConfined loads the config's model_path only when it resolves inside allowedDir (symlinks and ".."
// that escape are refused): otherwise an error matching ErrIO with one fixed message, whatever the reason. See
// ikv_model_load_with_config_confined.
func LoadWithConfigConfined(c *Config, allowedDir string) (*Model, error) {
	return loadWithConfig(c, func(p *uintptr, h capi.Struct_SS_ikv_config) int {
		return capi.Ikv_model_load_with_config_confined(p, h, allowedDir)
	})
}

func loadWithConfig(c *Config, load func(*uintptr, capi.Struct_SS_ikv_config) int) (*Model, error) {
	var p uintptr
	err := c.with(func(h capi.Struct_SS_ikv_config) error {
		return call(func() int { return load(&p, h) })
	})
	if err != nil {
		return nil, err
	}
	m := &Model{h: capi.SwigcptrStruct_SS_ikv_model(p), sessions: map[uintptr]capi.Struct_SS_ikv_session{}}
	runtime.SetFinalizer(m, func(m *Model) { m.Close() })
	return m, nil
}

// NewSessionWithConfig creates a session from the config's threads, KV layout, pool size, compression and
// protection settings.
func (m *Model) NewSessionWithConfig(c *Config) (*Session, error) {
	var s *Session
	err := c.with(func(ch capi.Struct_SS_ikv_config) error {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.h == nil {
			return &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the model is closed"}
		}
		var p uintptr
		if err := call(func() int { return capi.Ikv_session_create_with_config(&p, m.h, ch) }); err != nil {
			return err
		}
		s = &Session{h: capi.SwigcptrStruct_SS_ikv_session(p), model: m}
		m.sessions[p] = s.h
		return nil
	})
	if err != nil {
		return nil, err
	}
	runtime.SetFinalizer(s, func(s *Session) { s.Close() })
	return s, nil
}

// NewSamplerWithConfig creates a sampler from the config's sampler settings.
func NewSamplerWithConfig(c *Config) (*Sampler, error) {
	var p uintptr
	err := c.with(func(h capi.Struct_SS_ikv_config) error {
		return call(func() int { return capi.Ikv_sampler_create_with_config(&p, h) })
	})
	if err != nil {
		return nil, err
	}
	s := &Sampler{h: capi.SwigcptrStruct_SS_ikv_sampler(p)}
	runtime.SetFinalizer(s, func(s *Sampler) { s.Close() })
	return s, nil
}

// ---------------------------------------------------------------------------------------------------------------
// Snapshots

// AllSequences saves every sequence of a session (Save, SaveBytes).
const AllSequences int32 = -1

// withSampler runs f with the sampler locked (nil: no sampler).
func withSampler(smp *Sampler, f func(h capi.Struct_SS_ikv_sampler) error) error {
	if smp == nil {
		return f(nil)
	}
	locked, err := smp.gate.enter(func(h uintptr) error { return f(capi.SwigcptrStruct_SS_ikv_sampler(h)) })
	if !locked {
		return err
	}
	defer smp.gate.mu.Unlock()
	if smp.h == nil {
		return &Error{Status: int32(capi.IKV_ERR_BAD_HANDLE), Message: "the sampler is closed"}
	}
	return f(smp.h)
}

// Save writes sequence seq (AllSequences: every one) and, when sampler is not nil, its state to a file (written
// atomically). Only kept tokens are stored, so a compressed cache gives a smaller snapshot.
func (s *Session) Save(path string, seq int32, sampler *Sampler) error {
	return withSampler(sampler, func(sh capi.Struct_SS_ikv_sampler) error {
		return s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_session_save_file(h, int(seq), sh, path) })
	})
}

// SaveBytes is Save into memory.
func (s *Session) SaveBytes(seq int32, sampler *Sampler) ([]byte, error) {
	var out []byte
	err := withSampler(sampler, func(sh capi.Struct_SS_ikv_sampler) error {
		var n uint64
		err := s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_session_save_buffer(nil, &n, h, int(seq), sh) })
		if err != nil && !errors.Is(err, ErrBufferTooSmall) {
			return err
		}
		out = make([]byte, n)
		err = s.with(func(h capi.Struct_SS_ikv_session) int { return capi.Ikv_session_save_buffer(out, &n, h, int(seq), sh) })
		out = out[:n]
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (s *Session) restore(sampler *Sampler, f func(ids []int32, n *uint64, h capi.Struct_SS_ikv_session, sh capi.Struct_SS_ikv_sampler) int) ([]int32, error) {
	var ids []int32
	err := withSampler(sampler, func(sh capi.Struct_SS_ikv_sampler) error {
		ids = make([]int32, 8)
		for {
			var n uint64
			err := s.with(func(h capi.Struct_SS_ikv_session) int { return f(ids, &n, h, sh) })
			if errors.Is(err, ErrBufferTooSmall) && n > uint64(len(ids)) {
				ids = make([]int32, n)
				continue
			}
			if err == nil {
				ids = ids[:n]
			}
			return err
		}
	})
	if err != nil {
		return nil, err
	}
	return ids, nil
}

// Restore restores a snapshot file into the session as new sequences and returns their ids in saved order; the
// sampler, when not nil, takes the snapshot's sampler state. All or nothing: on ErrBadSnapshot, ErrWrongModel,
// ErrVersion, ErrKVFull, ... neither the session nor the sampler changed. Create the session with the snapshot's
// policy (InspectSnapshot) to continue exactly.
func (s *Session) Restore(path string, sampler *Sampler) ([]int32, error) {
	ids, err := s.restore(sampler, func(ids []int32, n *uint64, h capi.Struct_SS_ikv_session, sh capi.Struct_SS_ikv_sampler) int {
		return capi.Ikv_session_restore_file(ids, n, h, sh, path)
	})
	return ids, withPath(err, path)
}

// RestoreBytes is Restore from memory (the bytes are not retained).
func (s *Session) RestoreBytes(data []byte, sampler *Sampler) ([]int32, error) {
	return s.restore(sampler, func(ids []int32, n *uint64, h capi.Struct_SS_ikv_session, sh capi.Struct_SS_ikv_sampler) int {
		return capi.Ikv_session_restore_buffer(ids, n, h, sh, data)
	})
}

// InspectSnapshotJSON checks a snapshot file without a model and describes it as raw JSON (header, policy, sizes,
// per-layer kept counts).
func InspectSnapshotJSON(path string) (json.RawMessage, error) {
	b, err := sized(func(out []byte, n *uint64) int { return capi.Ikv_snapshot_inspect(out, n, path) })
	return json.RawMessage(b), withPath(err, path)
}

// InspectSnapshot is InspectSnapshotJSON decoded into a map.
func InspectSnapshot(path string) (map[string]any, error) {
	raw, err := InspectSnapshotJSON(path)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	return v, json.Unmarshal(raw, &v)
}

// InspectSnapshotBytes inspects a snapshot held in memory (it is written to a temporary file).
func InspectSnapshotBytes(data []byte) (map[string]any, error) {
	f, err := os.CreateTemp("", "infokv-*.ikvs")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	return InspectSnapshot(f.Name())
}
