package actor

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestOwnCloseIsNotAnError: protoactor's "EndpointWriter lost connection"
// for a connection this node closed itself (gRPC Canceled, after the peer
// left) is dropped from the node's log; it was an ERROR line at the end
// of every run. A connection lost otherwise is still logged.
func TestOwnCloseIsNotAnError(t *testing.T) {
	for _, c := range []struct {
		msg    string
		err    error
		logged bool
	}{
		{"EndpointWriter lost connection", status.Error(codes.Canceled, "grpc: the client connection is closing"), false},
		{"EndpointWriter lost connection", status.Error(codes.Unavailable, "error reading from server: EOF"), true},
		{"EndpointWriter lost connection", errors.New("not a gRPC status"), true},
		{"EndpointWriter got invalid connect response", status.Error(codes.Canceled, "closing"), true},
	} {
		var buf bytes.Buffer
		log := slog.New(levelFilter{h: slog.NewTextHandler(&buf, nil), min: slog.LevelWarn})
		log.Error(c.msg, slog.String("address", "127.0.0.1:1"), slog.Any("error", c.err))
		if got := strings.Contains(buf.String(), c.msg); got != c.logged {
			t.Errorf("%q with %v: logged %v, want %v (%q)", c.msg, c.err, got, c.logged, buf.String())
		}
	}
}

// TestLeavingPeerCloseIsNotAnError: the same line for a connection to a
// node that said it is leaving in order (SetPeerLeaving), which its
// process closed as it exited, is dropped too: a failed run's driver
// exits at once, and every node that hosted its actors logged "ERROR
// EndpointWriter lost connection ... error reading from server: EOF".
// A connection to any other node lost so is still logged.
func TestLeavingPeerCloseIsNotAnError(t *testing.T) {
	var leaving atomic.Pointer[func(addr string) bool]
	f := func(addr string) bool { return addr == "127.0.0.1:1" }
	leaving.Store(&f)
	eof := status.Error(codes.Unavailable, "error reading from server: EOF")
	for _, c := range []struct {
		msg, addr string
		logged    bool
	}{
		{"EndpointWriter lost connection", "127.0.0.1:1", false},
		{"EndpointWriter lost connection", "127.0.0.1:2", true},
		{"EndpointWriter failed to connect", "127.0.0.1:1", true},
	} {
		var buf bytes.Buffer
		log := slog.New(levelFilter{h: slog.NewTextHandler(&buf, nil), min: slog.LevelWarn, leaving: &leaving}).With("component", "protoactor")
		log.Error(c.msg, slog.String("address", c.addr), slog.Any("error", eof))
		if got := strings.Contains(buf.String(), c.msg); got != c.logged {
			t.Errorf("%q to %s: logged %v, want %v (%q)", c.msg, c.addr, got, c.logged, buf.String())
		}
	}
}
