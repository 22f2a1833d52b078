package cluster

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

func TestParseNvidiaSMI(t *testing.T) {
	out := "0, NVIDIA H100 80GB HBM3, 81559\n1, NVIDIA H200, 143771\n"
	got, err := parseNvidiaSMI(out)
	want := []GPUInfo{{0, "NVIDIA H100 80GB HBM3", 81559}, {1, "NVIDIA H200", 143771}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if g, err := parseNvidiaSMI(""); err != nil || len(g) != 0 {
		t.Fatalf("empty output: %+v, %v", g, err)
	}
	for _, bad := range []string{"0, H100", "x, H100, 10", "0, H100, lots"} {
		if _, err := parseNvidiaSMI(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A node that detects its GPUs runs nvidia-smi once, at start: not again
// for every record it publishes (each reservation, each actor's death),
// which ran it inside the node actor's loop, up to its 15 s timeout each,
// on a host where it finds no GPU. The nvidia-smi here is a script that
// counts its runs and reports no GPU.
func TestGPUsDetectedOnce(t *testing.T) {
	bin := t.TempDir()
	runs := filepath.Join(bin, "runs")
	script := "#!/bin/sh\necho run >> " + runs + "\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	n, err := Start(context.Background(), Config{NodeID: "gpu-auto", GPUs: -1, CPUs: 2, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 3 {
		g, err := n.CreatePlacementGroup(ctx, []Bundle{{Resources: Resources{CPU: 1}}}, Pack)
		if err != nil {
			t.Fatal(err)
		}
		if err := n.RemovePlacementGroup(ctx, g.ID); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(runs)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "run"); got != 1 {
		t.Errorf("nvidia-smi ran %d times, want once (at start)", got)
	}
}
