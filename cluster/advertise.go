package cluster

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-sockaddr"
)

// advertiseHost picks the host a node bound to a wildcard address (bind
// host "0.0.0.0", "::" or "") tells others to reach it at: the local
// address that routes to the first join address that resolves, so the
// node speaks the family and the network of the cluster it joins; else,
// starting a cluster or when no route is found, a private IP of the bind
// host's family (IPv4 for "0.0.0.0").
func advertiseHost(bindHost string, join []string) (string, error) {
	for _, j := range join {
		if ip := routeSource(j); ip != nil {
			return ip.String(), nil
		}
	}
	if bindHost == "0.0.0.0" {
		if ip := privateIPv4(); ip != "" {
			return ip, nil
		}
	}
	ip, err := sockaddr.GetPrivateIP()
	if err != nil || ip == "" {
		return "", fmt.Errorf("no private IP to advertise found (%v); pass an advertise address", err)
	}
	return ip, nil
}

// routeSource is the local address the kernel would send from to addr
// (HOST:PORT), or nil when addr does not resolve or has no route. A UDP
// "connection" sends nothing.
func routeSource(addr string) net.IP {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	c, err := (&net.Dialer{}).DialContext(ctx, "udp", addr)
	if err != nil {
		return nil
	}
	defer c.Close()
	ua, ok := c.LocalAddr().(*net.UDPAddr)
	if !ok || ua.IP.IsUnspecified() {
		return nil
	}
	return ua.IP
}

// privateIPv4 is the first private (RFC 1918 or shared) IPv4 address of
// an interface that is up, or "".
func privateIPv4() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsPrivate() {
			return ipn.IP.String()
		}
	}
	return ""
}

// familyMismatch says, when advertise and the join address join
// (HOST:PORT) are IP literals of different families, how they differ;
// "" when they agree or either is a name.
func familyMismatch(advertise, join string) string {
	host, _, err := net.SplitHostPort(join)
	if err != nil {
		host = join
	}
	a, j := net.ParseIP(advertise), net.ParseIP(host)
	if a == nil || j == nil || (a.To4() != nil) == (j.To4() != nil) {
		return ""
	}
	return fmt.Sprintf("this node advertises %s (%s) but joins %s (%s): other nodes may not reach it; pass an advertise address of the cluster's family",
		advertise, family(a), host, family(j))
}

func family(ip net.IP) string {
	if ip.To4() != nil {
		return "IPv4"
	}
	return "IPv6"
}
