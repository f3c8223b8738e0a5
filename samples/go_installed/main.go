// A program outside the repository that uses the installed infokv: its go.mod requires the module by version with
// no replace line. Build it against an installed prefix P (cmake --install build --prefix P):
//
//	GOPROXY=file://P/share/infokv/go-proxy GOSUMDB=off GOFLAGS=-mod=mod PKG_CONFIG_PATH=P/lib/pkgconfig go run . MODEL.gguf
package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"

	infokv "github.com/infokv/infokv/bindings/go"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: go run . MODEL.gguf")
		os.Exit(2)
	}
	model, err := infokv.Load(os.Args[1])
	if errors.Is(err, fs.ErrNotExist) {
		fmt.Fprintln(os.Stderr, "no such model file:", os.Args[1])
		os.Exit(1)
	} else if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer model.Close()
	session, err := model.NewSession(infokv.WithPolicy(infokv.PolicyAuto), infokv.WithBudgetFraction(0.5))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer session.Close()
	res, err := session.GenerateText(context.Background(), "Once upon a time", 40, nil, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kv, _ := session.KVBytes(0)
	fmt.Printf("Once upon a time%s\ninfokv %s, policy %v, KV bytes %d\n", res.Text, infokv.Version(), infokv.PolicyAuto, kv)
}
