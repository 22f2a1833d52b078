package cpu

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/learner/backend"
)

// TestCachedAttentionMatchesReference appends chunks of new tokens to
// per-sequence caches with WriteKV and checks CachedAttention against the
// float64 full-sequence reference: decoding steps (one token), prompt
// chunks longer than one query block, and a sequence with no new rows, in
// one batch, for multi-head, grouped and multi-query layouts, on both loop
// paths.
func TestCachedAttentionMatchesReference(t *testing.T) {
	for _, pureGo := range []bool{false, true} {
		for _, c := range []struct{ H, KV int }{{2, 2}, {6, 2}, {3, 1}} {
			t.Run(fmt.Sprintf("go=%v/H%d_KV%d", pureGo, c.H, c.KV), func(t *testing.T) {
				run := func(fn func()) { fn() }
				if pureGo {
					run = withGo
				}
				run(func() { checkCachedAttention(t, c.H, c.KV) })
			})
		}
	}
}

func checkCachedAttention(t *testing.T, H, KV int) {
	t.Helper()
	b := New()
	rng := rand.New(rand.NewPCG(uint64(H), uint64(KV)))
	const D = 16
	qd, kd := H*D, KV*D
	// Sequence i already holds before[i] tokens and gets news[i] new ones.
	before := []int{0, 5, 130, 7, 1, 0}
	news := []int{1, 1, 1, 150, 70, 0}
	n := len(before)
	// Whole-sequence q, k, v: the reference sees all of them.
	full := make([][3][]float32, n)
	caches := make([][2]backend.Tensor, n)
	rows := []int32{0}
	for i := range before {
		L := before[i] + news[i]
		full[i] = [3][]float32{randVec(rng, L*qd), randVec(rng, L*kd), randVec(rng, L*kd)}
		caches[i] = [2]backend.Tensor{b.Alloc(L * kd), b.Alloc(L * kd)}
		// The earlier tokens are in the cache already.
		copy(caches[i][0].(Tensor), full[i][1][:before[i]*kd])
		copy(caches[i][1].(Tensor), full[i][2][:before[i]*kd])
		rows = append(rows, rows[i]+int32(news[i]))
	}
	N := int(rows[n])
	q, k, v := make(Tensor, N*qd), make(Tensor, N*kd), make(Tensor, N*kd)
	kc, vc := make([]backend.Tensor, n), make([]backend.Tensor, n)
	at, lens := make([]int32, n), make([]int32, n)
	for i := range before {
		r0, L0, L := int(rows[i]), before[i], before[i]+news[i]
		copy(q[r0*qd:], full[i][0][L0*qd:L*qd])
		copy(k[r0*kd:], full[i][1][L0*kd:L*kd])
		copy(v[r0*kd:], full[i][2][L0*kd:L*kd])
		kc[i], vc[i] = caches[i][0], caches[i][1]
		at[i], lens[i] = int32(L0), int32(L)
	}
	b.WriteKV(kc, at, k, rows, kd)
	b.WriteKV(vc, at, v, rows, kd)
	for i := range before {
		near(t, fmt.Sprintf("sequence %d: keys", i), kc[i].(Tensor), full[i][1], 0)
		near(t, fmt.Sprintf("sequence %d: values", i), vc[i].(Tensor), full[i][2], 0)
	}
	out := make(Tensor, N*qd)
	b.CachedAttention(out, q, kc, vc, rows, lens, H, KV, D)
	for i := range before {
		L := before[i] + news[i]
		if L == 0 {
			continue
		}
		want := refAttention(full[i][0], full[i][1], full[i][2], make([]int32, L), 1, L, H, KV, D)
		for r := 0; r < news[i]; r++ {
			for x := 0; x < qd; x++ {
				got, w := out[(int(rows[i])+r)*qd+x], want[(before[i]+r)*qd+x]
				if d := math.Abs(float64(got) - w); d > 2e-5*(1+math.Abs(w)) {
					t.Fatalf("sequence %d new token %d: out[%d] = %v, want %v", i, r, x, got, w)
				}
			}
		}
	}
}

func TestViewSharesStorage(t *testing.T) {
	b := New()
	x := b.Alloc(10)
	b.Upload(x, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9})
	w := b.View(x, 3, 4)
	if w.Len() != 4 {
		t.Fatalf("view of 4 has length %d", w.Len())
	}
	got := make([]float32, 4)
	b.Download(got, w)
	near(t, "view", got, []float32{3, 4, 5, 6}, 0)
	b.Scale(w, 10)
	all := make([]float32, 10)
	b.Download(all, x)
	near(t, "parent after a write through the view", all, []float32{0, 1, 2, 30, 40, 50, 60, 7, 8, 9}, 0)
}

// TestKVOpsRefuseBadShapes checks that shape errors, programming errors in
// the caller, panic with a message naming the op and what is wrong rather
// than writing out of bounds.
func TestKVOpsRefuseBadShapes(t *testing.T) {
	b := New()
	small := []backend.Tensor{b.Alloc(8)}
	tests := []struct {
		name string
		fn   func()
		want string
	}{
		{"view past the end", func() { b.View(b.Alloc(4), 2, 3) }, "View [2, 5) of a tensor of 4"},
		{"cache too small", func() { b.WriteKV(small, []int32{1}, b.Alloc(8), []int32{0, 4}, 2) }, "rows [1, 5) do not fit a cache of 4 rows"},
		{"src longer than its rows", func() { b.WriteKV(small, []int32{0}, b.Alloc(16), []int32{0, 4}, 2) }, "4 rows of 2 in a source of 16 elements"},
		{"row cuts", func() { b.WriteKV(small, []int32{0}, b.Alloc(16), []int32{0}, 2) }, "1 row cuts"},
		{"rows past src", func() { b.WriteKV(small, []int32{0}, b.Alloc(4), []int32{0, 3}, 2) }, "3 rows of 2 exceed a tensor of 4"},
		{"cache shorter than lens", func() {
			b.CachedAttention(b.Alloc(4), b.Alloc(4), small, small, []int32{0, 1}, []int32{5}, 2, 1, 2)
		}, "sequence 0: 1 new tokens, 5 cached"},
		{"heads", func() {
			b.CachedAttention(b.Alloc(6), b.Alloc(6), small, small, []int32{0, 1}, []int32{1}, 3, 2, 2)
		}, "3 heads over 2 kv heads"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil || !strings.Contains(fmt.Sprint(r), tc.want) {
					t.Errorf("panic %v, want one containing %q", r, tc.want)
				}
			}()
			tc.fn()
		})
	}
}
