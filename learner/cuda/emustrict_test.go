package cuda

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// emuProgram builds main (C++ after cuda_emu.h, common.cuh, flash.cuh
// and flash_tc.cu) with the emulation's compiler and returns the
// program's path; it skips without a compiler.
func emuProgram(t *testing.T, main string) string {
	t.Helper()
	cxx := os.Getenv("CXX")
	if cxx == "" {
		cxx = "g++"
	}
	if _, err := exec.LookPath(cxx); err != nil {
		t.Skipf("no C++ compiler: %v", err)
	}
	dir := t.TempDir()
	emuH, err := emuFS.ReadFile("emu/cuda_emu.h")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"cuda_emu.h": string(emuH), "main.cpp": main}
	for _, h := range []string{"common.cuh", "flash.cuh"} {
		text, err := Header(h)
		if err != nil {
			t.Fatal(err)
		}
		files[h] = text
	}
	for _, s := range Sources() {
		if s.Name == "flash_tc.cu" {
			files[s.Name] = s.Text
		}
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(dir, "prog")
	cmd := exec.Command(cxx, "-std=c++20", "-O0", "-pthread", "-o", bin, "main.cpp")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// TestEmulationIsStrictWhereTheGPUIs: what passes under the emulation but
// fails on a GPU. Blocks of one launch run in no set order on a GPU, so a
// block that reads what a neighbouring block wrote must see it unwritten
// here, whichever neighbour it is; a shuffle that reads a lane which has
// exited gets an undefined value on a GPU, and ftc_pair's 32-bit load of
// a misaligned shared address faults there: the emulation stops on both.
func TestEmulationIsStrictWhereTheGPUIs(t *testing.T) {
	bin := emuProgram(t, `#include "cuda_emu.h"
#include "flash_tc.cu"
#include <string>

static int done[8], sawPrev[8], sawNext[8];
static float out[32];

__global__ void neighbours() {
	int b = blockIdx.x;
	if (threadIdx.x != 0) return;
	sawPrev[b] = b == 0 || done[b - 1];
	sawNext[b] = b == 7 || done[b + 1];
	done[b] = 1;
}

__global__ void exitedLane() {
	if (threadIdx.x >= 16) return;
	out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 16);
}

int main(int argc, char **argv) {
	setvbuf(stdout, NULL, _IONBF, 0);
	std::string what = argv[1];
	if (what == "order") {
		emu::run(dim3(8), dim3(32), [] { neighbours(); });
		int prev = 1, next = 1;
		for (int b = 0; b < 8; b++) prev &= sawPrev[b], next &= sawNext[b];
		printf("prev %d next %d\n", prev, next);
	} else if (what == "exited") {
		emu::run(dim3(1), dim3(32), [] { exitedLane(); });
		printf("shuffled\n");
	} else if (what == "pair") {
		alignas(16) static bf16 s[8] = {1, 2, 3, 4, 5, 6, 7, 8};
		printf("aligned %08x\n", ftc_pair(&s[2]));
		printf("misaligned %08x\n", ftc_pair(&s[1]));
	}
	return 0;
}
`)
	run := func(arg string) (string, error) {
		out, err := exec.Command(bin, arg).CombinedOutput()
		return string(out), err
	}
	out, err := run("order")
	if err != nil {
		t.Fatalf("order: %v\n%s", err, out)
	}
	// Each says whether every block saw that neighbour's write: 1 is
	// what running the blocks in one direction shows for one of them.
	if strings.TrimSpace(out) != "prev 0 next 0" {
		t.Errorf("order: %q, want some block to see each kind of neighbour unwritten (prev 0 next 0)", out)
	}
	out, err = run("exited")
	if err == nil || !strings.Contains(out, "a shuffle reads a lane that has exited") {
		t.Errorf("exited: err %v, output %q: want the emulation to stop on a shuffle from an exited lane", err, out)
	}
	out, err = run("pair")
	if !strings.Contains(out, "aligned 00040003") {
		t.Errorf("pair: output %q: want the aligned pair 00040003 read first", out)
	}
	if err == nil || !strings.Contains(out, "misaligned load") || strings.Contains(out, "misaligned 0") {
		t.Errorf("pair: err %v, output %q: want the emulation to stop on a misaligned 32-bit load", err, out)
	}
}
