package actor

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
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
