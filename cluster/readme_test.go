package cluster_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"
)

// README's "Programmatic use (Go)" block, put in a program of its own
// that imports rlnode as another module would, builds and answers its
// call and its task on the one-process cluster it starts.
func TestReadmeProgramRuns(t *testing.T) {
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## Programmatic use \\(Go\\)\n+```go\n(.*?)```").FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md: no go block under \"Programmatic use (Go)\"")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	gomod, err := os.ReadFile("../go.mod")
	if err != nil {
		t.Fatal(err)
	}
	gosum, err := os.ReadFile("../go.sum")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// The module's own requirements, so that nothing is fetched.
	mod := regexp.MustCompile(`(?m)^module .*$`).ReplaceAllString(string(gomod), "module example.com/readme") +
		"\nrequire github.com/rlnode/rlnode v0.0.0\n\nreplace github.com/rlnode/rlnode => " + root + "\n"
	prog := `package main

import (
	"context"
	"fmt"
	"log"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/cluster"
)

type Greet struct{ Name string }
type Greeting struct{ Text string }
type greeter struct{}

func (g *greeter) Receive(ctx *actor.Context, msg any) (any, error) {
	return Greeting{Text: "hello " + msg.(Greet).Name}, nil
}

func main() {
	ctx := context.Background()
` + string(m[1]) + `
	fmt.Printf("reply %q, square %d, error %v\n", g.Text, sq, err)
	node.Stop()
}
`
	for name, b := range map[string]string{"go.mod": mod, "go.sum": string(gosum), "main.go": prog} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(runtime.GOROOT(), "bin", "go"), "run", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOWORK=off")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), `reply "hello ada", square 49, error <nil>`) {
		t.Fatalf("README's program: %v\n%s\n%s", err, out, prog)
	}
}
