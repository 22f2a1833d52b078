package cuda

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the kernel table in docs/cuda.md")

// The architectures every kernel must compile for: A100 and H100/H200.
var testArchs = []string{"sm_80", "sm_90"}

// openNVRTC returns NVRTC, or skips (fails under RLNODE_REQUIRE_GPU=1)
// where it is not installed.
func openNVRTC(t *testing.T) *NVRTC {
	t.Helper()
	n, err := OpenNVRTC()
	if errors.Is(err, ErrNoLibrary) {
		skipOrFail(t, "NVRTC not installed (Debian: apt-get install libnvrtc11.2 from non-free): "+err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestKernelsCompile compiles every kernel file for sm_80 and sm_90,
// requires that no kernel spills registers, and keeps docs/cuda.md's
// table of registers and shared memory in step (rewritten with -update).
func TestKernelsCompile(t *testing.T) {
	n := openNVRTC(t)
	var rows []KernelStats
	for _, s := range Sources() {
		for _, arch := range testArchs {
			c, err := n.CompileSource(s, arch)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Cubin) == 0 {
				t.Errorf("%s for %s: empty cubin", s.Name, arch)
			}
			for _, k := range c.Kernels {
				if k.SpillStores != 0 || k.SpillLoads != 0 {
					t.Errorf("%s for %s: %d bytes spill stores, %d bytes spill loads", k.Name, arch, k.SpillStores, k.SpillLoads)
				}
				rows = append(rows, k)
			}
		}
	}
	table := kernelTable(n.Version(), rows)
	doc := filepath.Join("..", "..", "docs", "cuda.md")
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i, j := strings.Index(text, tableBegin), strings.Index(text, tableEnd)
	if i < 0 || j < i {
		t.Fatalf("%s lacks the %q ... %q markers", doc, tableBegin, tableEnd)
	}
	cur := text[i+len(tableBegin) : j]
	if *update {
		if err := os.WriteFile(doc, []byte(text[:i+len(tableBegin)]+table+text[j:]), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if cur != table {
		if !strings.Contains(cur, "NVRTC "+n.Version().String()+" ") {
			t.Logf("docs/cuda.md's table is from another NVRTC; this one (%s) gives:\n%s", n.Version(), table)
			return
		}
		t.Errorf("docs/cuda.md's kernel table is out of date; run go test ./learner/cuda -run TestKernelsCompile -update. Now:\n%s", table)
	}
}

const (
	tableBegin = "<!-- kernel table: go test ./learner/cuda -run TestKernelsCompile -update -->\n"
	tableEnd   = "<!-- end of kernel table -->"
)

// kernelTable is the markdown table of every kernel's registers and
// static shared memory per architecture, kernels in source order.
func kernelTable(v Version, rows []KernelStats) string {
	type key struct{ name, arch string }
	byKey := map[key]KernelStats{}
	var names []string
	for _, r := range rows {
		if _, ok := byKey[key{r.Name, testArchs[0]}]; !ok && r.Arch == testArchs[0] {
			names = append(names, r.Name)
		}
		byKey[key{r.Name, r.Arch}] = r
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nCompiled by NVRTC %s with --ptxas-options=-v; no kernel spills.\n\n", v)
	b.WriteString("| kernel |")
	for _, a := range testArchs {
		fmt.Fprintf(&b, " %s regs | %s smem B |", a, a)
	}
	b.WriteString("\n|---|")
	for range testArchs {
		b.WriteString("--:|--:|")
	}
	b.WriteString("\n")
	for _, name := range names {
		fmt.Fprintf(&b, "| `%s` |", name)
		for _, a := range testArchs {
			k := byKey[key{name, a}]
			fmt.Fprintf(&b, " %d | %d |", k.Registers, k.SharedBytes)
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	return b.String()
}

func TestParsePtxasLog(t *testing.T) {
	log := `ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'a' for 'sm_90'
ptxas info    : Function properties for a
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, 1024 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function 'b' for 'sm_80'
ptxas info    : Function properties for b
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, 384 bytes cmem[0]
ptxas info    : Compiling entry function 'c' for 'sm_90'
ptxas info    : Function properties for c
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 8192 bytes smem, 400 bytes cmem[0]
`
	got := ParsePtxasLog(log)
	want := []KernelStats{
		{Name: "a", Arch: "sm_90", Registers: 255, SharedBytes: 1024, StackBytes: 8, SpillStores: 4, SpillLoads: 12},
		{Name: "b", Arch: "sm_80", Registers: 10},
		{Name: "c", Arch: "sm_90", Registers: 40, SharedBytes: 8192}, // CUDA 12's form
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("got %+v\nwant %+v", got, want)
	}
}

func TestCompileErrorCarriesLog(t *testing.T) {
	n := openNVRTC(t)
	_, err := n.Compile(`extern "C" __global__ void k(float *x) { x[0] = undefined_name; }`, "broken.cu", "sm_90")
	if err == nil || !strings.Contains(err.Error(), "broken.cu") || !strings.Contains(err.Error(), "undefined_name") {
		t.Errorf("compile error %v does not name the file and the undefined identifier", err)
	}
	if _, err := n.Compile("x", "notcuda.cu", "sm_90"); err == nil {
		t.Error("a source that is not CUDA C compiled")
	}
}
