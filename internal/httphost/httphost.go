// Package httphost checks the Host header of requests to rlnode's local
// HTTP endpoints (the control endpoint, the dashboard): a page on another
// site can make a browser send requests to them under a DNS name it
// controls (DNS rebinding), never under an address or "localhost".
package httphost

import (
	"net"
	"net/netip"
	"strings"
)

// ByAddress reports whether host (a request's Host, with or without a
// port) names the server by IP address or as localhost, not by a name
// some page controls.
func ByAddress(host string) bool {
	h, _, err := net.SplitHostPort(host)
	if err != nil {
		h = host
	}
	h = strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
	if _, err := netip.ParseAddr(h); err == nil {
		return true
	}
	return strings.EqualFold(h, "localhost")
}
