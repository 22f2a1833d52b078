package addrgroup

import (
	"net"
	"testing"
)

// pipeAddr is a net.Addr that is neither TCP nor UDP, as a Unix socket's
// or a proxy's own address type is.
type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }

func TestOf(t *testing.T) {
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.7").To4(), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("192.0.2.8"), Port: 1}, "192.0.2.8"},
		{&net.TCPAddr{IP: net.ParseIP("::ffff:192.0.2.7"), Port: 1}, "192.0.2.7"},
		{&net.TCPAddr{IP: net.ParseIP("127.0.0.1"), Port: 1}, "127.0.0.1"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2::1"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:2:ffff:ffff:ffff:ffff"), Port: 2}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("2001:db8:1:3::1"), Port: 1}, "2001:db8:1:3::/64"},
		{&net.UDPAddr{IP: net.ParseIP("2001:db8:1:2:a:b:c:d"), Port: 1}, "2001:db8:1:2::/64"},
		{&net.TCPAddr{IP: net.ParseIP("::1"), Port: 1}, "::1"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth0"}, "fe80::/64%eth0"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::2:3"), Port: 1, Zone: "eth0"}, "fe80::/64%eth0"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1, Zone: "eth1"}, "fe80::/64%eth1"},
		{&net.TCPAddr{IP: net.ParseIP("fe80::1"), Port: 1}, "fe80::/64"},
		{pipeAddr("[2001:db8:1:2::9]:443"), "2001:db8:1:2::/64"},
		{pipeAddr("10.0.0.1:80"), "10.0.0.1"},
		{pipeAddr("/run/rlnode.sock"), "/run/rlnode.sock"},
		{pipeAddr("@"), "@"},
		{&net.TCPAddr{}, "<nil>"},
		{nil, ""},
	} {
		if got := Of(tc.addr); got != tc.want {
			t.Errorf("Of(%v) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}

func TestOfHostPort(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7:5000":                  "192.0.2.7",
		"[::ffff:192.0.2.7]:5000":         "192.0.2.7",
		"[2001:db8:1:2::1]:5000":          "2001:db8:1:2::/64",
		"[2001:db8:1:2:dead:beef::]:6000": "2001:db8:1:2::/64",
		"[::1]:5000":                      "::1",
		"[fe80::1%eth0]:5000":             "fe80::/64%eth0",
		"2001:db8:1:2::1":                 "2001:db8:1:2::/64",
		"pipe":                            "pipe",
		"":                                "",
	} {
		if got := OfHostPort(in); got != want {
			t.Errorf("OfHostPort(%q) = %q, want %q", in, got, want)
		}
	}
}
