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
		slot int    // index into the admitted slots (prove, release)
		ok   bool   // admit only
		err  string // admit only: the refusal, when ok is false and this is set
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
		// A stranger on IPv6 holds its whole /64: a fresh address for each
		// connection must not buy a fresh cap.
		{"IPv6 addresses count by their /64", Limits{Unproven: 5, Total: 2}, []op{
			{do: "admit", from: "2001:db8:1:2::1", ok: true},
			{do: "admit", from: "2001:db8:1:2::2", ok: true},
			{do: "admit", from: "2001:db8:1:2:ffff::3", ok: false,
				err: "2001:db8:1:2::/64 already holds 2 connections (the cap per address; an IPv6 one counts with its /64)"},
			{do: "admit", from: "2001:db8:1:3::1", ok: true}, // the next /64 has its own count
			{do: "release", slot: 0},
			{do: "admit", from: "2001:db8:1:2::99", ok: true},
		}, map[string][2]int{"2001:db8:1:2::/64": {2, 2}, "2001:db8:1:3::/64": {1, 1}}},
		{"unproven IPv6 connections count by their /64", Limits{Unproven: 1}, []op{
			{do: "admit", from: "2001:db8::a", ok: true},
			{do: "admit", from: "2001:db8::b", ok: false,
				err: "2001:db8::/64 already holds 1 connections that have not proven membership (the cap per address; an IPv6 one counts with its /64)"},
			{do: "prove", slot: 0},
			{do: "admit", from: "2001:db8::b", ok: true},
		}, map[string][2]int{"2001:db8::/64": {2, 1}}},
		{"an IPv4-mapped address counts as its IPv4 address", Limits{Total: 1}, []op{
			{do: "admit", from: "10.0.0.1", ok: true},
			{do: "admit", from: "::ffff:10.0.0.1", ok: false,
				err: "10.0.0.1 already holds 1 connections (the cap per address)"},
		}, map[string][2]int{"10.0.0.1": {1, 1}}},
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
					if err != nil && o.err != "" && err.Error() != o.err {
						t.Errorf("op %d: admit %s: %q, want %q", i, o.from, err, o.err)
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
