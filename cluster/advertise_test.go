package cluster

import (
	"net"
	"strings"
	"testing"
)

func TestFamilyMismatch(t *testing.T) {
	cases := []struct{ advertise, join, want string }{
		{"10.0.0.5", "10.0.0.1:7946", ""},
		{"fd00::5", "[fd00::1]:7946", ""},
		{"fd00::5", "10.0.0.1:7946", "this node advertises fd00::5 (IPv6) but joins 10.0.0.1 (IPv4)"},
		{"10.0.0.5", "[fd00::1]:7946", "this node advertises 10.0.0.5 (IPv4) but joins fd00::1 (IPv6)"},
		{"10.0.0.5", "head.example:7946", ""}, // a name: either family
		{"node1", "10.0.0.1:7946", ""},
	}
	for _, c := range cases {
		got := familyMismatch(c.advertise, c.join)
		if c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("familyMismatch(%q, %q) = %q, want %q", c.advertise, c.join, got, c.want)
		}
	}
}

// A wildcard-bound node that joins advertises the address on the route to
// the member it joins: 127.0.0.1 for a loopback member, of its family.
func TestAdvertiseHostFollowsTheJoinedAddress(t *testing.T) {
	got, err := advertiseHost("0.0.0.0", []string{"127.0.0.1:7946"})
	if err != nil || got != "127.0.0.1" {
		t.Errorf("advertiseHost joining 127.0.0.1 = %q, %v; want 127.0.0.1", got, err)
	}
	if l, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
		l.Close()
		if got, err := advertiseHost("::", []string{"[::1]:7946"}); err != nil || got != "::1" {
			t.Errorf("advertiseHost joining [::1] = %q, %v; want ::1", got, err)
		}
	}
	// Starting a cluster on 0.0.0.0: an IPv4 address when the host has one.
	if privateIPv4() != "" {
		got, err := advertiseHost("0.0.0.0", nil)
		if ip := net.ParseIP(got); err != nil || ip == nil || ip.To4() == nil {
			t.Errorf("advertiseHost for 0.0.0.0 = %q, %v; want an IPv4 address", got, err)
		}
	}
}
