package cuda

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestOpProfile runs the small Qwen2's forward, backward and two steps on
// the device backend with a profile and without: the figures are the same
// bits, and the profile names the step's kernels, products and copies
// with their calls.
func TestOpProfile(t *testing.T) {
	for name, d := range accels(t) {
		t.Run(name, func(t *testing.T) {
			plain := NewDeviceBackend(d, F32)
			plain.Block = 32
			want := trainStep(t, plain)
			must(t, plain.Sync())
			plain.A.Release()

			db := NewDeviceBackend(d, F32)
			db.Block = 32
			db.Prof = NewOpProfile()
			defer db.A.Release()
			got := trainStep(t, db)
			must(t, db.Sync())
			if got.loss != want.loss || !slices.Equal(got.logp, want.logp) {
				t.Errorf("profiled run: loss %v, want %v; logp equal: %v", got.loss, want.loss, slices.Equal(got.logp, want.logp))
			}
			ops := map[string]OpTime{}
			for _, o := range db.Prof.Ops() {
				ops[o.Name] = o
				if o.Calls <= 0 || o.Total <= 0 {
					t.Errorf("op %+v: no calls or no time", o)
				}
			}
			// trainStep runs the forward pass four times (twice alone, once
			// in each of the two steps) over the model's one layer, and the
			// backward three times.
			for name, calls := range map[string]int{"flash_fwd_f32_d32": 4, "flash_bwd_dq_f32_d32": 3, "adamw_multi": 2} {
				if ops[name].Calls != calls {
					t.Errorf("%s: %d calls, want %d", name, ops[name].Calls, calls)
				}
			}
			var gemms, uploads int
			for n, o := range ops {
				if strings.HasPrefix(n, "gemm ") && strings.HasSuffix(n, " fp32") {
					gemms += o.Calls
				}
				if n == "upload" {
					uploads = o.Calls
				}
			}
			if gemms == 0 || uploads == 0 || ops["download"].Calls == 0 {
				t.Errorf("products %d, uploads %d, downloads %d: want some of each", gemms, uploads, ops["download"].Calls)
			}
			var rep bytes.Buffer
			db.Prof.Report(&rep, 5)
			if lines := strings.Split(strings.TrimSpace(rep.String()), "\n"); len(lines) != 8 || !strings.HasPrefix(lines[6], "(") || !strings.HasPrefix(lines[7], "all device ops") {
				t.Errorf("report of the top 5:\n%s", rep.String())
			}
			t.Logf("profile:\n%s", rep.String())
		})
	}
}
