// Generate with an InfoKV-compressed KV cache (policy infokv, budget 0.5), save a snapshot, restore it into a
// new session and continue generating; print the KV bytes and the snapshot's size.
//
//	INFOKV_MODELS_DIR=/path/to/models go run . [model.gguf]
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"reflect"

	infokv "github.com/infokv/infokv/bindings/go"
)

func main() {
	path := filepath.Join(os.Getenv("INFOKV_MODELS_DIR"), "stories260K", "stories260K.gguf")
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	// A config holds every setting; JSON here, the binary form (cfg.Binary()) works as well.
	cfg, err := infokv.ConfigFromJSON(fmt.Sprintf(`{"model_path": %q, "compression": {"policy": "infokv",
		"budget_fraction": 0.5}, "sampler": {"temperature": 0}}`, path))
	if err != nil {
		log.Fatal(err)
	}
	defer cfg.Close()
	model, err := infokv.LoadWithConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	session, err := model.NewSessionWithConfig(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
		"One day, she saw a big, red ball. She wanted to play with it."
	show := func(t infokv.Token) error { fmt.Print(t.Text); return nil }
	_, err = session.GenerateText(context.Background(), prompt, 24, infokv.Greedy(), show)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	length, _ := session.Length(0)
	kept, _ := session.Kept(0, 0)
	before, _ := session.KVBytes(0)
	fmt.Printf("length: %d  kept in layer 0: %d\nkv_bytes before compression: %d\n", length, kept, before)
	if err := session.Compress(0, 0); err != nil { // to the session's budget: half of the sequence
		log.Fatal(err)
	}
	after, _ := session.KVBytes(0)
	fmt.Printf("kv_bytes after compression: %d\n", after)

	// Snapshot: only the kept tokens are stored, so the compressed cache gives a small file.
	snap := filepath.Join(os.TempDir(), fmt.Sprintf("infokv-sample-go-%d.ikvs", os.Getpid()))
	defer os.Remove(snap)
	if err := session.Save(snap, 0, nil); err != nil {
		log.Fatal(err)
	}
	st, err := os.Stat(snap)
	if err != nil {
		log.Fatal(err)
	}
	info, err := infokv.InspectSnapshot(snap)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("snapshot bytes: %d  (inspect: %d fields)\n", st.Size(), len(info))

	// Continue in the original session and, from the snapshot, in a new one: the tokens must match.
	want, err := session.Generate(context.Background(), 0, nil, 24, infokv.Greedy(), nil)
	if err != nil {
		log.Fatal(err)
	}
	restored, err := model.NewSessionWithConfig(cfg) // the snapshot's policy, to continue exactly
	if err != nil {
		log.Fatal(err)
	}
	defer restored.Close()
	seqs, err := restored.Restore(snap, nil)
	if err != nil {
		log.Fatal(err)
	}
	rkv, _ := restored.KVBytes(seqs[0])
	fmt.Printf("restored sequence %d, kv_bytes: %d\n", seqs[0], rkv)
	fmt.Print("continued: ")
	got, err := restored.Generate(context.Background(), seqs[0], nil, 24, infokv.Greedy(), show)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println()
	if !reflect.DeepEqual(got.Tokens, want.Tokens) {
		log.Fatalf("restored continuation differs: %v vs %v", got.Tokens, want.Tokens)
	}
	fmt.Printf("continuation matches the uninterrupted session: %d tokens\n", len(got.Tokens))
}
