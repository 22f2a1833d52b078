package cuda

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Dim3 is a grid or block shape.
type Dim3 struct{ X, Y, Z int }

// D1 is the one-dimensional shape n.
func D1(n int) Dim3 { return Dim3{n, 1, 1} }

// Null is a null pointer argument (an optional input left out).
type Null struct{}

// Launcher runs one kernel of kernels/ by name over grid×block threads.
// Arguments are []float32, []uint16 (bf16 bits), []int32, []int64, []float64 for the
// kernel's pointers (copied in before the launch and back after it), Null,
// and int32, int64, float32, float64 for its scalars, in the kernel's
// order; they are checked against its declaration first. Launch returns
// when the kernel has finished. Implementations: the CPU emulation
// (Emulator) and a GPU (Device).
type Launcher interface {
	Launch(kernel string, grid, block Dim3, args ...any) error
}

// paramKind is what a kernel parameter takes: 'f' float*, 'h' bf16*, 'i'
// int*, 'l' long*, 'd' double*, or a scalar 'I' int, 'L' long, 'F' float, 'D' double.
type paramKind byte

var (
	signaturesOnce sync.Once
	signatures     map[string][]paramKind
	sigDecl        = regexp.MustCompile(`extern "C" __global__ void (\w+)\(([^)]*)\)`)
)

// Signatures parses every kernel's parameter list out of the sources.
func kernelSignatures() map[string][]paramKind {
	signaturesOnce.Do(func() {
		signatures = map[string][]paramKind{}
		for _, s := range Sources() {
			for _, m := range sigDecl.FindAllStringSubmatch(s.Text, -1) {
				var kinds []paramKind
				for _, p := range strings.Split(m[2], ",") {
					kinds = append(kinds, classifyParam(strings.Join(strings.Fields(p), " ")))
				}
				signatures[m[1]] = kinds
			}
		}
	})
	return signatures
}

func classifyParam(p string) paramKind {
	ptr := strings.Contains(p, "*")
	f := strings.Fields(strings.ReplaceAll(strings.ReplaceAll(p, "*", " "), "const", " "))
	if len(f) == 0 {
		return 0
	}
	switch t := f[0]; {
	case ptr && t == "float":
		return 'f'
	case ptr && t == "bf16":
		return 'h'
	case ptr && t == "int":
		return 'i'
	case ptr && t == "long":
		return 'l'
	case ptr && t == "double":
		return 'd'
	case t == "int":
		return 'I'
	case t == "long":
		return 'L'
	case t == "float":
		return 'F'
	case t == "double":
		return 'D'
	}
	return 0
}

// checkArgs checks args against the kernel's declaration and the launch
// shape against the limits every launcher shares.
func checkArgs(kernel string, grid, block Dim3, args []any) error {
	sig, ok := kernelSignatures()[kernel]
	if !ok {
		return fmt.Errorf("launch %s: no such kernel", kernel)
	}
	if len(args) != len(sig) {
		return fmt.Errorf("launch %s: %d arguments, the kernel takes %d", kernel, len(args), len(sig))
	}
	threads := block.X * block.Y * block.Z
	if block.X <= 0 || block.Y <= 0 || block.Z <= 0 || threads > 1024 || threads%32 != 0 {
		return fmt.Errorf("launch %s: block %v: want 1..1024 threads, a multiple of 32", kernel, block)
	}
	if grid.X <= 0 || grid.Y <= 0 || grid.Z <= 0 || grid.X > 1<<31-1 || grid.Y > 65535 || grid.Z > 65535 {
		return fmt.Errorf("launch %s: grid %v out of range", kernel, grid)
	}
	for i, a := range args {
		want := sig[i]
		var got paramKind
		switch a.(type) {
		case []float32:
			got = 'f'
		case []uint16:
			got = 'h'
		case []int32:
			got = 'i'
		case []int64:
			got = 'l'
		case []float64:
			got = 'd'
		case int32:
			got = 'I'
		case int64:
			got = 'L'
		case float32:
			got = 'F'
		case float64:
			got = 'D'
		case Null, Ptr: // a device address: its element type is the caller's to get right
			if want == 'f' || want == 'h' || want == 'i' || want == 'l' || want == 'd' {
				continue
			}
		}
		if got != want {
			return fmt.Errorf("launch %s: argument %d is %T, the kernel takes %s", kernel, i, a, kindName(want))
		}
	}
	return nil
}

func kindName(k paramKind) string {
	return map[paramKind]string{'f': "float*", 'h': "bf16*", 'i': "int*", 'l': "long*", 'd': "double*", 'I': "int", 'L': "long", 'F': "float", 'D': "double"}[k]
}
