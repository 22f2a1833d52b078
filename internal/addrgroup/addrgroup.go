// Package addrgroup names the group of remote addresses that a cap "per
// address" counts together. A stranger on IPv4 holds one address; on IPv6
// it usually holds a whole /64 and may take a fresh address for each
// connection, so a cap keyed on the exact IPv6 address would bind nothing.
// Every per-address cap of rlnode keys on Of (or OfHostPort); the package
// owns that rule only, no counting.
package addrgroup

import (
	"net"
	"net/netip"
	"strings"
)

// IPv6Prefix is the prefix length an IPv6 address is grouped by.
const IPv6Prefix = 64

// Of returns the key of addr's group, which is also how it is named in
// errors and logs:
//
//   - an IPv4 address is its own group ("192.0.2.7"), and so is an
//     IPv4-mapped IPv6 address ("::ffff:192.0.2.7" counts as "192.0.2.7"),
//     as a dual-stack listener sees IPv4 peers;
//   - an IPv6 address counts with its /64 ("2001:db8:1:2::/64");
//   - a link-local IPv6 address counts with its /64 on its interface
//     ("fe80::/64%eth0"): a neighbour may pick any interface id too;
//   - the IPv6 loopback address is its own group ("::1"): no other
//     address of its /64 can reach the node;
//   - anything else (a Unix socket, an address that is not an IP) is
//     its host part as written, or the whole string without one.
func Of(addr net.Addr) string {
	if addr == nil {
		return ""
	}
	var ip net.IP
	var zone string
	switch a := addr.(type) {
	case *net.TCPAddr:
		ip, zone = a.IP, a.Zone
	case *net.UDPAddr:
		ip, zone = a.IP, a.Zone
	default:
		return OfHostPort(addr.String())
	}
	ap, ok := netip.AddrFromSlice(ip)
	if !ok {
		return ip.String()
	}
	return ofIP(ap.WithZone(zone))
}

// OfHostPort is Of for an address written "host:port" (an
// http.Request's RemoteAddr) or a bare host.
func OfHostPort(s string) string {
	host := s
	if h, _, err := net.SplitHostPort(s); err == nil {
		host = h
	}
	ap, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	return ofIP(ap)
}

func ofIP(a netip.Addr) string {
	a = a.Unmap()
	if a.Is4() || a.IsLoopback() {
		return a.WithZone("").String()
	}
	zone := a.Zone()
	p := netip.PrefixFrom(a.WithZone(""), IPv6Prefix).Masked().String()
	if zone != "" && a.IsLinkLocalUnicast() {
		return p + "%" + zone
	}
	return p
}

// IsGroup reports whether key (from Of) names a group of several
// addresses rather than one.
func IsGroup(key string) bool { return strings.Contains(key, "/") }
