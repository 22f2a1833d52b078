package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
)

const gib = 1 << 30

func TestParseSize(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
	}{
		{"1073741824", 1 << 30}, {"64GiB", 64 << 30}, {"64gib", 64 << 30}, {"500MB", 500e6}, {"1.5G", 3 << 29},
		{"2T", 2 << 40}, {"2TB", 2e12}, {"512K", 512 << 10}, {"100B", 100}, {" 8 GiB ", 8 << 30}, {"0", 0},
	} {
		if got, err := ParseSize(c.in); err != nil || got != c.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "GiB", "-1G", "1.5x", "1..5G", "NaN", "inf", "1e3", "99999999999T", "64 GiBs"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %d; want an error", in, got)
		}
	}
}

func TestFormatBytes(t *testing.T) {
	for v, want := range map[float64]string{0: "0 B", 512: "512 B", 1536: "1.5 KiB", 40 * gib: "40.0 GiB", 23.4 * gib: "23.4 GiB", 3 << 40: "3.0 TiB"} {
		if got := FormatBytes(v); got != want {
			t.Errorf("FormatBytes(%v) = %q; want %q", v, got, want)
		}
	}
	need, has := Resources{Memory: 40 * gib, CPU: 1}, Resources{Memory: 23.4 * gib, CPU: 4}
	if got := strings.Join(has.Missing(need), ", "); got != "memory 40.0 GiB (has 23.4 GiB)" {
		t.Errorf("Missing = %q", got)
	}
	if got := need.String(); got != "{CPU:1 memory:40.0 GiB}" {
		t.Errorf("String = %q", got)
	}
}

// Detection reads MemTotal and lowers it to the cgroup's limit: v2's
// memory.max along the group's path (the lowest, "max" none), v1's
// memory.limit_in_bytes; a limit above the host's memory is none.
func TestDetectMemory(t *testing.T) {
	write := func(root, rel, body string) {
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	meminfo := "MemFree:         1000 kB\nMemTotal:       16777216 kB\n" // 16 GiB
	for _, c := range []struct {
		name   string
		files  map[string]string // under the test's root: proc/… and cg/…
		want   int64
		source string
	}{
		{"no cgroup", map[string]string{}, 16 * gib, "MemTotal"},
		{"v2 max", map[string]string{"proc/self/cgroup": "0::/job\n", "cg/job/memory.max": "max\n"}, 16 * gib, "MemTotal"},
		{"v2 limit", map[string]string{"proc/self/cgroup": "0::/slurm/job1/step0\n", "cg/slurm/job1/step0/memory.max": "max\n",
			"cg/slurm/job1/memory.max": strconv.Itoa(4*gib) + "\n"}, 4 * gib, "job1/memory.max"},
		{"v2 container root", map[string]string{"proc/self/cgroup": "0::/host/path\n", "cg/memory.max": strconv.Itoa(2*gib) + "\n"}, 2 * gib, "cg/memory.max"},
		{"v2 above host", map[string]string{"proc/self/cgroup": "0::/a\n", "cg/a/memory.max": strconv.Itoa(64*gib) + "\n"}, 16 * gib, "MemTotal"},
		{"v1 limit", map[string]string{"proc/self/cgroup": "4:cpu,cpuacct:/x\n3:memory:/docker/abc\n",
			"cg/memory/docker/abc/memory.limit_in_bytes": strconv.Itoa(3*gib) + "\n"}, 3 * gib, "memory.limit_in_bytes"},
		{"v1 unlimited", map[string]string{"proc/self/cgroup": "3:memory:/\n", "cg/memory/memory.limit_in_bytes": "9223372036854771712\n"}, 16 * gib, "MemTotal"},
	} {
		root := t.TempDir()
		write(root, "proc/meminfo", meminfo)
		for rel, body := range c.files {
			write(root, rel, body)
		}
		got, src, err := detectMemoryAt(filepath.Join(root, "proc"), filepath.Join(root, "cg"))
		if err != nil || got != c.want || !strings.Contains(src, c.source) {
			t.Errorf("%s: got %d from %q, %v; want %d from …%s", c.name, got, src, err, c.want, c.source)
		}
	}
	root := t.TempDir()
	write(root, "proc/meminfo", "MemFree: 1 kB\n")
	if _, _, err := detectMemoryAt(filepath.Join(root, "proc"), root); err == nil || !strings.Contains(err.Error(), "no MemTotal") {
		t.Errorf("meminfo without MemTotal: %v", err)
	}
}

// A node offers the memory it is given, none with NoMemory, and refuses
// "memory" as a custom resource.
func TestNodeMemory(t *testing.T) {
	n, err := Start(context.Background(), Config{Bind: "127.0.0.1:0", Memory: 3 * gib, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	total, _ := n.Resources()
	n.Stop()
	if total[Memory] != 3*gib {
		t.Errorf("Memory 3 GiB: node offers %v", total)
	}
	n, err = Start(context.Background(), Config{Bind: "127.0.0.1:0", Memory: NoMemory, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	total, _ = n.Resources()
	n.Stop()
	if total[Memory] != 0 {
		t.Errorf("NoMemory: node offers %v", total)
	}
	_, err = Start(context.Background(), Config{Bind: "127.0.0.1:0", Resources: Resources{Memory: 5}, Logger: actor.DiscardLogger()})
	if err == nil || !strings.Contains(err.Error(), "--memory") {
		t.Errorf("memory as a custom resource: %v", err)
	}
}

// Memory decides the node: of three nodes with free CPUs, offering 2, 4
// and 8 GiB, an actor reserving 6 GiB goes to the 8 GiB one, one of
// 3 GiB then to the 4 GiB one (the 8 GiB one has 2 left), and a second of
// 6 GiB fits nowhere, the error saying so in GiB.
func TestMemoryDecidesNode(t *testing.T) {
	key := testKey(t)
	a, err := Start(context.Background(), Config{NodeID: "a-2g", Bind: "127.0.0.1:0", Key: key, CPUs: 2, Memory: 2 * gib, Logger: actor.DiscardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Stop)
	startNodeProcess(t, "s-4g", key, a.GossipAddress(), 0, "", "RLNODE_TEST_MEMORY="+strconv.Itoa(4*gib))
	startNodeProcess(t, "b-8g", key, a.GossipAddress(), 0, "", "RLNODE_TEST_MEMORY="+strconv.Itoa(8*gib))
	waitFor(t, "3 nodes", 10*time.Second, func() bool { return nodeCount(a) == 3 })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, c := range []struct {
		name string
		mem  float64
		want string
	}{{"six", 6 * gib, "b-8g"}, {"three", 3 * gib, "s-4g"}} {
		h, err := a.Spawn(ctx, "test.counter", SpawnOptions{Name: c.name, Resources: Resources{CPU: 1, Memory: c.mem}})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if rec, _ := h.Record(); rec.Node != c.want {
			t.Errorf("%s GiB actor placed on %s; want %s", c.name, rec.Node, c.want)
		}
	}
	_, err = a.Spawn(ctx, "test.counter", SpawnOptions{Name: "six-again", Resources: Resources{CPU: 1, Memory: 6 * gib}})
	if err == nil || !strings.Contains(err.Error(), "memory:6.0 GiB") || !strings.Contains(err.Error(), "2.0 GiB") {
		t.Errorf("a second 6 GiB actor: %v; want it refused, in GiB", err)
	}
}

// CPU, GPU and memory are the node's own resources: given as custom ones
// (--resource CPU=8) they were copied over --cpus/--gpus without a word.
func TestBuiltInResourcesAreNotCustom(t *testing.T) {
	for name, flag := range map[string]string{CPU: "--cpus", GPU: "--gpus", Memory: "--memory"} {
		_, err := Start(context.Background(), Config{Bind: "127.0.0.1:0", CPUs: 2, Resources: Resources{name: 8}, Logger: actor.DiscardLogger()})
		if err == nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("resource %s=8: err %v, want a refusal naming %s", name, err, flag)
		}
	}
}
