package cuda

import (
	"cmp"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// OpProfile times a DeviceBackend's device work by name: each kernel by
// its name, each matrix product by its shape and operand type, and the
// copies (upload, download, copy, zero). With a profile set the backend
// waits for the device before and after each op, so every figure is that
// op alone and they add up to the device's share of a step; the step
// itself runs slower than without (nothing overlaps). What a step takes
// beyond their sum is the host's: the model's Go code, launches' argument
// packing, the waits themselves.
type OpProfile struct {
	ops map[string]*OpTime
}

// OpTime is one op's count and total time.
type OpTime struct {
	Name  string
	Calls int
	Total time.Duration
}

// NewOpProfile returns an empty profile.
func NewOpProfile() *OpProfile { return &OpProfile{ops: map[string]*OpTime{}} }

// Ops returns the ops, the longest total first.
func (p *OpProfile) Ops() []OpTime {
	out := make([]OpTime, 0, len(p.ops))
	for _, o := range p.ops {
		out = append(out, *o)
	}
	slices.SortFunc(out, func(a, b OpTime) int {
		if c := cmp.Compare(b.Total, a.Total); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Total is the sum of every op's time.
func (p *OpProfile) Total() time.Duration {
	var t time.Duration
	for _, o := range p.ops {
		t += o.Total
	}
	return t
}

// Report writes the top n ops (all when n ≤ 0) with calls, total
// milliseconds and share of the ops' sum, and a line for the rest.
func (p *OpProfile) Report(w io.Writer, n int) {
	ops, total := p.Ops(), p.Total()
	if n <= 0 || n > len(ops) {
		n = len(ops)
	}
	share := func(d time.Duration) float64 {
		if total == 0 {
			return 0
		}
		return 100 * float64(d) / float64(total)
	}
	fmt.Fprintf(w, "%-44s %7s %10s %6s\n", "op", "calls", "ms", "%")
	for _, o := range ops[:n] {
		fmt.Fprintf(w, "%-44s %7d %10.3f %6.1f\n", o.Name, o.Calls, float64(o.Total.Microseconds())/1e3, share(o.Total))
	}
	var rest OpTime
	for _, o := range ops[n:] {
		rest.Calls += o.Calls
		rest.Total += o.Total
	}
	if rest.Calls > 0 {
		fmt.Fprintf(w, "%-44s %7d %10.3f %6.1f\n", fmt.Sprintf("(%d more ops)", len(ops)-n), rest.Calls, float64(rest.Total.Microseconds())/1e3, share(rest.Total))
	}
	fmt.Fprintf(w, "%-44s %7s %10.3f\n", "all device ops", "", float64(total.Microseconds())/1e3)
}

func (p *OpProfile) add(name string, d time.Duration) {
	o := p.ops[name]
	if o == nil {
		o = &OpTime{Name: name}
		p.ops[name] = o
	}
	o.Calls++
	o.Total += d
}

// run does one op of the backend: directly, or with a profile between two
// waits for the device, adding its time under name (made only then).
func (b *DeviceBackend) run(name func() string, op func() error) {
	if !b.ok() {
		return
	}
	if b.Prof == nil {
		b.fail(op())
		return
	}
	if b.fail(b.D.Sync()); !b.ok() {
		return
	}
	start := time.Now()
	if b.fail(op()); b.ok() {
		b.fail(b.D.Sync())
	}
	b.Prof.add(name(), time.Since(start))
}

func named(s string) func() string { return func() string { return s } }
