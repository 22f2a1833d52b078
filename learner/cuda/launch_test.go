package cuda

import (
	"strings"
	"testing"
	"time"
)

func TestLaunchChecksArguments(t *testing.T) {
	x := make([]float32, 64)
	cases := []struct {
		name   string
		kernel string
		grid   Dim3
		block  Dim3
		args   []any
		want   string
	}{
		{"unknown kernel", "no_such_kernel", D1(1), D1(32), nil, "no such kernel"},
		{"too few arguments", "softmax_f32", D1(1), D1(32), []any{x, x}, "2 arguments, the kernel takes 4"},
		{"wrong pointer type", "softmax_f32", D1(1), D1(32), []any{x, make([]uint16, 64), int32(1), int32(64)}, "argument 1 is []uint16, the kernel takes float*"},
		{"wrong scalar type", "softmax_f32", D1(1), D1(32), []any{x, x, int64(1), int32(64)}, "argument 2 is int64, the kernel takes int"},
		{"null scalar", "softmax_f32", D1(1), D1(32), []any{x, x, Null{}, int32(64)}, "argument 2 is cuda.Null"},
		{"partial warp", "softmax_f32", D1(1), D1(48), []any{x, x, int32(1), int32(64)}, "a multiple of 32"},
		{"block too large", "softmax_f32", D1(1), D1(2048), []any{x, x, int32(1), int32(64)}, "1..1024 threads"},
		{"empty grid", "softmax_f32", D1(0), D1(32), []any{x, x, int32(1), int32(64)}, "grid"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := checkArgs(c.kernel, c.grid, c.block, c.args)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %v, want one containing %q", err, c.want)
			}
		})
	}
	if err := checkArgs("logprobs_bwd_f32", D1(1), D1(32), []any{x, x, x, x, Null{}, make([]int32, 1), int32(1), int32(64)}); err != nil {
		t.Errorf("a null optional input: %v", err)
	}
}

func TestKernelSignatures(t *testing.T) {
	sig := kernelSignatures()
	want := map[string]string{
		"rmsnorm_fwd_bf16":    "hfhhIIF",
		"rope_f32":            "fiIIIDF",
		"attn_decode_f32":     "fffflii" + "IIII",
		"attn_decode_tab_f32": "ffllii" + "IIII",
		"kv_write_f32":        "lifi" + "II",
		"swiglu_fwd_f32":      "fffL",
		"sumsq_finish":        "ddII",
		"adamw_multi":         "llllll" + "FFFFFFFFF",
	}
	for name, w := range want {
		if got := string(sig[name]); got != w {
			t.Errorf("%s: parameter kinds %q, want %q", name, got, w)
		}
	}
	n := 0
	for _, s := range Sources() {
		for _, k := range s.Kernels {
			n++
			for i, p := range sig[k] {
				if p == 0 {
					t.Errorf("%s: parameter %d has a type launches cannot pass", k, i)
				}
			}
		}
	}
	if len(sig) != n {
		t.Errorf("%d signatures for %d kernels", len(sig), n)
	}
}

func TestEmulatorTimeoutStopsIt(t *testing.T) {
	e := emulator(t)
	if e == nil {
		t.Skip("no C++ compiler for the emulation")
	}
	const rows, cols = 2000, 512
	x := make([]float32, rows*cols)
	e.Timeout = time.Nanosecond // no launch of 2000 blocks can be this quick
	err := e.Launch("softmax_f32", D1(rows), D1(64), x, x, int32(rows), int32(cols))
	if err == nil || !strings.Contains(err.Error(), "ran over") {
		t.Fatalf("launch past the timeout: %v", err)
	}
	e.Timeout = time.Minute
	if err := e.Launch("softmax_f32", D1(1), D1(32), x[:cols], x[:cols], int32(1), int32(cols)); err == nil || !strings.Contains(err.Error(), "ran over") {
		t.Errorf("launch after a timed-out one: %v, want the timeout's error", err)
	}
}
