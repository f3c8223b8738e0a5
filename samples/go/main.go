// Generate with an InfoKV-compressed KV cache and print how many bytes the cache holds.
//
//	INFOKV_MODELS_DIR=/path/to/models go run . [model.gguf]
//
// TODO(snapshots): save the session to a snapshot, restore it into a fresh session and continue, once the C ABI
// has ikv_session_save/restore.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"path/filepath"

	infokv "github.com/infokv/infokv/bindings/go"
)

func main() {
	path := filepath.Join(os.Getenv("INFOKV_MODELS_DIR"), "stories260K", "stories260K.gguf")
	if len(os.Args) > 1 {
		path = os.Args[1]
	}
	model, err := infokv.Load(path)
	if err != nil {
		log.Fatal(err)
	}
	defer model.Close()
	session, err := model.NewSession(infokv.WithPolicy(infokv.PolicyInfoKV), infokv.WithBudgetFraction(0.5))
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	prompt := "Once upon a time, there was a little girl named Lily. She loved to play outside in the park. " +
		"One day, she saw a big, red ball. She wanted to play with it."
	_, err = session.GenerateText(context.Background(), prompt, 48, infokv.Greedy(), func(t infokv.Token) error {
		fmt.Print(t.Text)
		return nil
	})
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
}
