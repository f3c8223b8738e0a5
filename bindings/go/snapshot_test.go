package infokv_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	infokv "github.com/infokv/infokv/bindings/go"
)

const snapPrompt = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park."

func greedyTokens(t *testing.T, s *infokv.Session, seq int32, prompt []int32, n int) []int32 {
	t.Helper()
	g := infokv.Greedy()
	defer g.Close()
	res, err := s.Generate(context.Background(), seq, prompt, n, g, nil)
	noErr(t, err)
	return res.Tokens
}

func TestSnapshotContinuesExactlyInAFreshSessionAndModel(t *testing.T) {
	cases := map[string][]infokv.SessionOption{
		"infokv-0.5": {infokv.WithPolicy(infokv.PolicyInfoKV), infokv.WithBudgetFraction(0.5)},
		"no-policy":  nil,
	}
	for name, opts := range cases {
		for _, form := range []string{"file", "bytes"} {
			t.Run(name+"/"+form, func(t *testing.T) {
				const nFirst, nRest = 12, 20
				m := load(t)
				prompt, err := m.Tokenize(snapPrompt, true)
				noErr(t, err)
				s, err := m.NewSession(opts...)
				noErr(t, err)
				whole := greedyTokens(t, s, 0, prompt, nFirst+nRest)
				s.Close()
				s, err = m.NewSession(opts...)
				noErr(t, err)
				first := greedyTokens(t, s, 0, prompt, nFirst)
				path := filepath.Join(t.TempDir(), "snap.ikvs")
				var data []byte
				if form == "file" {
					err = s.Save(path, 0, nil)
				} else {
					data, err = s.SaveBytes(0, nil)
				}
				noErr(t, err)
				s.Close()
				m.Close()

				m2 := load(t) // a fresh Model too
				s2, err := m2.NewSession(opts...)
				noErr(t, err)
				defer s2.Close()
				var ids []int32
				if form == "file" {
					ids, err = s2.Restore(path, nil)
				} else {
					ids, err = s2.RestoreBytes(data, nil)
				}
				if err != nil || len(ids) != 1 {
					t.Fatalf("restore: %v %v", ids, err)
				}
				rest := greedyTokens(t, s2, ids[0], nil, nRest)
				if got := append(append([]int32{}, first...), rest...); !reflect.DeepEqual(got, whole) {
					t.Fatalf("continued %v, uninterrupted %v", got, whole)
				}
				var info map[string]any
				if form == "file" {
					info, err = infokv.InspectSnapshot(path)
				} else {
					info, err = infokv.InspectSnapshotBytes(data)
				}
				if err != nil || len(info) == 0 {
					t.Fatalf("inspect: %v %v", info, err)
				}
			})
		}
	}
}

// greedySnapshot decodes "Once upon a time" and n greedy tokens into sequence 0 of a new session on m and returns
// the prompt's tokens and the sequence's snapshot.
func greedySnapshot(t *testing.T, m *infokv.Model, n int) ([]int32, []byte) {
	t.Helper()
	s := newSession(t, m)
	prompt, _ := m.Tokenize("Once upon a time", true)
	greedyTokens(t, s, 0, prompt, n)
	data, err := s.SaveBytes(0, nil)
	noErr(t, err)
	return prompt, data
}

func TestCorruptSnapshotIsErrBadSnapshotAndTheSessionStaysUsable(t *testing.T) {
	m := load(t)
	prompt, data := greedySnapshot(t, m, 8)
	data[len(data)/2] ^= 0xFF
	s2 := newSession(t, m)
	if _, err := s2.RestoreBytes(data, nil); !errors.Is(err, infokv.ErrBadSnapshot) {
		t.Fatalf("want ErrBadSnapshot, got %v", err)
	}
	path := filepath.Join(t.TempDir(), "bad.ikvs")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Restore(path, nil); !errors.Is(err, infokv.ErrBadSnapshot) {
		t.Fatalf("want ErrBadSnapshot from the file, got %v", err)
	}
	if _, err := infokv.InspectSnapshot(path); !errors.Is(err, infokv.ErrBadSnapshot) {
		t.Fatalf("inspect: want ErrBadSnapshot, got %v", err)
	}
	if _, err := s2.Restore(filepath.Join(t.TempDir(), "missing.ikvs"), nil); !errors.Is(err, infokv.ErrIO) {
		t.Fatalf("want ErrIO, got %v", err)
	}
	if got := greedyTokens(t, s2, 0, prompt, 40); !reflect.DeepEqual(got, referenceIDs(t)) {
		t.Fatalf("after a failed restore: %v", got)
	}
}

func TestConfigUnknownFieldIsErrBadConfigNamingIt(t *testing.T) {
	_, err := infokv.ConfigFromJSON(`{"threads": 2, "no_such_field_xyz": 1}`)
	if !errors.Is(err, infokv.ErrBadConfig) || !strings.Contains(err.Error(), "no_such_field_xyz") {
		t.Fatalf("want ErrBadConfig naming the field, got %v", err)
	}
	if _, err := infokv.ConfigFromBinary([]byte("not a config at all")); !errors.Is(err, infokv.ErrBadConfig) {
		t.Fatalf("want ErrBadConfig, got %v", err)
	}
}

func TestConfigRoundTripJSONBinaryJSON(t *testing.T) {
	c, err := infokv.ConfigFromMap(map[string]any{"model_path": modelPath(t), "threads": 2,
		"compression": map[string]any{"policy": "infokv", "budget_fraction": 0.25}})
	noErr(t, err)
	defer c.Close()
	j1, err := c.JSON()
	noErr(t, err)
	b, err := c.Binary()
	noErr(t, err)
	c2, err := infokv.ConfigFromBinary(b)
	noErr(t, err)
	defer c2.Close()
	j2, _ := c2.JSON()
	if j1 != j2 {
		t.Fatalf("round trip changed the config:\n%s\n%s", j1, j2)
	}
	var v struct {
		Threads     int `json:"threads"`
		Compression struct {
			BudgetFraction float64 `json:"budget_fraction"`
		} `json:"compression"`
	}
	if err := json.Unmarshal([]byte(j2), &v); err != nil || v.Threads != 2 || v.Compression.BudgetFraction != 0.25 {
		t.Fatalf("%+v %v", v, err)
	}
	if p, _ := c2.ModelPath(); p != modelPath(t) {
		t.Fatalf("model path %q", p)
	}
}

func TestModelSessionSamplerFromConfig(t *testing.T) {
	c, err := infokv.ConfigFromMap(map[string]any{"model_path": modelPath(t),
		"compression": map[string]any{"policy": "infokv", "budget_fraction": 0.5},
		"sampler":     map[string]any{"temperature": 0}})
	noErr(t, err)
	defer c.Close()
	m, err := infokv.LoadWithConfig(c)
	noErr(t, err)
	defer m.Close()
	s, err := m.NewSessionWithConfig(c)
	noErr(t, err)
	defer s.Close()
	smp, err := infokv.NewSamplerWithConfig(c)
	noErr(t, err)
	defer smp.Close()
	res, err := s.GenerateText(context.Background(), "Once upon a time", 40, smp, nil)
	if err != nil || len(res.Tokens) != 40 {
		t.Fatalf("%v %v", res.Tokens, err)
	}
	empty, _ := infokv.NewConfig()
	defer empty.Close()
	if _, err := infokv.LoadWithConfig(empty); !errors.Is(err, infokv.ErrBadConfig) {
		t.Fatalf("want ErrBadConfig for a config without a model path, got %v", err)
	}
}

// otherModel writes a copy of the model with slightly different weights (another weights fingerprint).
func otherModel(t *testing.T) string {
	data, err := os.ReadFile(modelPath(t))
	noErr(t, err)
	mid := len(data) / 2
	for i := mid; i < mid+4096; i++ {
		data[i] ^= 0x01
	}
	p := filepath.Join(t.TempDir(), "other.gguf")
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSnapshotOfAnotherModelIsErrWrongModel(t *testing.T) {
	_, data := greedySnapshot(t, load(t), 5)
	other, err := infokv.Load(otherModel(t))
	noErr(t, err)
	defer other.Close()
	s2 := newSession(t, other)
	if _, err := s2.RestoreBytes(data, nil); !errors.Is(err, infokv.ErrWrongModel) {
		t.Fatalf("want ErrWrongModel, got %v", err)
	}
	if n, _ := s2.Length(0); n != 0 {
		t.Fatalf("a failed restore changed the session: length %d", n)
	}
}

func TestSavedSamplerStateContinuesASampledRunExactly(t *testing.T) {
	m := load(t)
	prompt, _ := m.Tokenize("Once upon a time", true)
	newSampler := func(opts ...infokv.SamplerOption) *infokv.Sampler {
		smp, err := infokv.NewSampler(opts...)
		noErr(t, err)
		t.Cleanup(func() { smp.Close() })
		return smp
	}
	gen := func(s *infokv.Session, seq int32, p []int32, n int, smp *infokv.Sampler) []int32 {
		res, err := s.Generate(context.Background(), seq, p, n, smp, nil)
		noErr(t, err)
		return res.Tokens
	}
	opts := []infokv.SamplerOption{infokv.Temperature(0.9), infokv.TopK(40), infokv.Seed(1234)}
	s, _ := m.NewSession()
	whole := gen(s, 0, prompt, 30, newSampler(opts...))
	s.Close()
	s, _ = m.NewSession()
	smp := newSampler(opts...)
	first := gen(s, 0, prompt, 10, smp)
	data, err := s.SaveBytes(0, smp)
	noErr(t, err)
	s.Close()
	s2, _ := m.NewSession()
	defer s2.Close()
	smp2 := newSampler(infokv.Temperature(0.1), infokv.Seed(7)) // takes the saved state
	ids, err := s2.RestoreBytes(data, smp2)
	noErr(t, err)
	rest := gen(s2, ids[0], nil, 20, smp2)
	if got := append(append([]int32{}, first...), rest...); !reflect.DeepEqual(got, whole) {
		t.Fatalf("continued %v, uninterrupted %v", got, whole)
	}
}

func TestConfinedModelPathAndSessionLimits(t *testing.T) {
	root := t.TempDir()
	raw, err := os.ReadFile(modelPath(t))
	noErr(t, err)
	if err := os.WriteFile(filepath.Join(root, "m.gguf"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
	loadIn := func(p string) (*infokv.Model, error) {
		c, err := infokv.ConfigFromMap(map[string]any{"model_path": p})
		noErr(t, err)
		defer c.Close()
		return infokv.LoadWithConfigConfined(c, root)
	}
	m, err := loadIn("m.gguf")
	noErr(t, err)
	defer m.Close()
	for _, escape := range []string{modelPath(t), "../nothing.gguf"} {
		if _, err := loadIn(escape); !errors.Is(err, infokv.ErrIO) {
			t.Fatalf("%s: want ErrIO, got %v", escape, err)
		}
	}

	s, err := m.NewSession(infokv.WithMaxSequences(2))
	noErr(t, err)
	defer s.Close()
	if err := s.Decode(0, []int32{1, 5, 9}); err != nil {
		t.Fatal(err)
	}
	before, err := s.KVStat(infokv.KVHostBytes)
	if err != nil || before <= 0 {
		t.Fatalf("host bytes %d %v", before, err)
	}
	if _, err := s.Fork(0); err != nil {
		t.Fatal(err)
	}
	if after, _ := s.KVStat(infokv.KVHostBytes); after <= before {
		t.Fatalf("host bytes %d -> %d after a fork", before, after)
	}
	if _, err := s.Fork(0); !errors.Is(err, infokv.ErrOutOfRange) {
		t.Fatalf("want ErrOutOfRange past max_sequences, got %v", err)
	}
}
