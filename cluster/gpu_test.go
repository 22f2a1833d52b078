package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

func TestParseNvidiaSMI(t *testing.T) {
	out := "0, GPU-aa11, NVIDIA H100 80GB HBM3, 81559\n1, GPU-bb22, NVIDIA H200, 143771\n"
	got, err := parseNvidiaSMI(out)
	want := []smiGPU{{GPUInfo{0, "NVIDIA H100 80GB HBM3", 81559}, "GPU-aa11"}, {GPUInfo{1, "NVIDIA H200", 143771}, "GPU-bb22"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, %v", got, err)
	}
	if g, err := parseNvidiaSMI(""); err != nil || len(g) != 0 {
		t.Fatalf("empty output: %+v, %v", g, err)
	}
	for _, bad := range []string{"0, GPU-1, H100", "x, GPU-1, H100, 10", "0, GPU-1, H100, lots"} {
		if _, err := parseNvidiaSMI(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// A node offers the GPUs CUDA_VISIBLE_DEVICES leaves its process, by the
// ordinals the process opens them at. Before, --gpus auto offered every
// GPU of the host: a node limited to devices 2,3 offered four, and a task
// told "device 0" would have opened physical device 2 while another node
// process used it.
func TestVisibleGPUs(t *testing.T) {
	all := []smiGPU{
		{GPUInfo{0, "A", 1}, "GPU-aa11"}, {GPUInfo{1, "B", 1}, "GPU-bb22"},
		{GPUInfo{2, "C", 1}, "GPU-cc33"}, {GPUInfo{3, "D", 1}, "GPU-cc44"},
	}
	names := func(g []GPUInfo) string {
		var s []string
		for _, x := range g {
			s = append(s, fmt.Sprintf("%d=%s", x.Index, x.Name))
		}
		return strings.Join(s, " ")
	}
	for _, c := range []struct {
		env  string
		set  bool
		want string
	}{
		{"", false, "0=A 1=B 2=C 3=D"},
		{"2,3", true, "0=C 1=D"},
		{"3,1", true, "0=D 1=B"},
		{"GPU-bb22,0", true, "0=B 1=A"},
		{"GPU-cc", true, ""}, // an ambiguous prefix ends the list
		{"1,7,2", true, "0=B"},
		{"1,1", true, "0=B"},
		{"", true, ""},
		{"-1", true, ""},
		{"NoDevFiles", true, ""},
		{"MIG-0a1b", true, ""},
	} {
		if got := names(visibleGPUs(all, c.env, c.set)); got != c.want {
			t.Errorf("CUDA_VISIBLE_DEVICES=%q (set %v): %q; want %q", c.env, c.set, got, c.want)
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
