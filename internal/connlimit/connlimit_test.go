package connlimit

import (
	"net"
	"testing"
)

func addr(ip string) net.Addr { return &net.TCPAddr{IP: net.ParseIP(ip), Port: 40000} }

func TestGate(t *testing.T) {
	type op struct {
		do   string // "admit", "prove", "release"
		from string
		slot int  // index into the admitted slots (prove, release)
		ok   bool // admit only
	}
	for _, tc := range []struct {
		name string
		lim  Limits
		ops  []op
		want map[string][2]int // host -> total, unproven
	}{
		{"unproven cap, then a proven one frees a place", Limits{Unproven: 2, Total: 5}, []op{
			{do: "admit", from: "10.0.0.1", ok: true}, {do: "admit", from: "10.0.0.1", ok: true},
			{do: "admit", from: "10.0.0.1", ok: false},
			{do: "admit", from: "10.0.0.2", ok: true}, // another address has its own count
			{do: "prove", slot: 0},
			{do: "admit", from: "10.0.0.1", ok: true},
		}, map[string][2]int{"10.0.0.1": {3, 2}, "10.0.0.2": {1, 1}}},
		{"total cap counts proven ones", Limits{Unproven: 5, Total: 2}, []op{
			{do: "admit", from: "10.0.0.1", ok: true}, {do: "prove", slot: 0},
			{do: "admit", from: "10.0.0.1", ok: true}, {do: "prove", slot: 1},
			{do: "admit", from: "10.0.0.1", ok: false},
			{do: "release", slot: 0}, {do: "release", slot: 0}, // twice is harmless
			{do: "admit", from: "10.0.0.1", ok: true},
		}, map[string][2]int{"10.0.0.1": {2, 1}}},
		{"released addresses are forgotten", Limits{Unproven: 1}, []op{
			{do: "admit", from: "10.0.0.1", ok: true}, {do: "release", slot: 0},
		}, map[string][2]int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := New(tc.lim)
			var slots []*Slot
			for i, o := range tc.ops {
				switch o.do {
				case "admit":
					s, err := g.Admit(addr(o.from))
					if (err == nil) != o.ok {
						t.Fatalf("op %d: admit %s: %v, want ok=%v", i, o.from, err, o.ok)
					}
					if s != nil {
						slots = append(slots, s)
					}
				case "prove":
					slots[o.slot].Proven()
				case "release":
					slots[o.slot].Release()
				}
			}
			for host, w := range tc.want {
				if total, unproven := g.Count(host); total != w[0] || unproven != w[1] {
					t.Errorf("%s: %d open, %d unproven; want %d, %d", host, total, unproven, w[0], w[1])
				}
			}
			if len(g.byAddr) != len(tc.want) {
				t.Errorf("%d addresses tracked, want %d", len(g.byAddr), len(tc.want))
			}
		})
	}
}
