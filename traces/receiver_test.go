package traces

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rlnode/rlnode/internal/bodyslot"
	"github.com/rlnode/rlnode/internal/bodyslot/bodyslottest"
	"github.com/rlnode/rlnode/internal/logbuf"
)

// postWithin posts a small valid OTLP body and returns the status; the
// guard only turns a hang into a failure.
func postWithin(t *testing.T, url string) int {
	t.Helper()
	client := &http.Client{Timeout: time.Minute}
	resp, err := client.Post(url+OTLPPath, "application/json", strings.NewReader(`{"resourceSpans":[]}`))
	if err != nil {
		t.Fatalf("a normal sender got no answer while slow senders are connected: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestOTLPReceiverSlowSendersFromOneAddress: senders from one address that
// trickle their bodies hold only that address's share of the body slots,
// so a normal sender from another still gets its 200. (Before, five slow
// senders took every slot, and everyone else waited for them.)
func TestOTLPReceiverSlowSendersFromOneAddress(t *testing.T) {
	url := serve(t, &OTLPReceiver{Sink: &collect{}, Bodies: bodyslot.Gate{Total: 2, Grace: time.Hour, MaxTime: time.Hour}})
	for range 5 {
		bodyslottest.Trickle(t, url, OTLPPath, "127.0.0.2", `{"resourc`)
	}
	if code := postWithin(t, url); code != 200 {
		t.Errorf("normal sender: %d, want 200", code)
	}
}

// TestOTLPReceiverCutsOffTricklingBodies: slow senders from many addresses
// are cut off once they fall behind the minimum rate (answered 408 and
// logged), so a normal sender still gets its 200. (Before, they held every
// slot until the client or the server's read timeout gave up.)
func TestOTLPReceiverCutsOffTricklingBodies(t *testing.T) {
	var log logbuf.Buffer
	url := serve(t, &OTLPReceiver{Sink: &collect{}, Bodies: bodyslot.Gate{Total: 2, Grace: time.Second, MinRate: 1 << 10},
		Log: slog.New(slog.NewTextHandler(&log, nil))})
	var slow []net.Conn
	for i := range 5 {
		slow = append(slow, bodyslottest.Trickle(t, url, OTLPPath, fmt.Sprintf("127.0.0.%d", 2+i), `{"resourc`))
	}
	if code := postWithin(t, url); code != 200 {
		t.Errorf("normal sender: %d, want 200", code)
	}
	for i, c := range slow {
		code, b, err := bodyslottest.Answer(c)
		if err != nil {
			t.Errorf("slow sender %d: no answer: %v", i, err)
			continue
		}
		if code != http.StatusRequestTimeout || !strings.Contains(string(b), "too slowly") {
			t.Errorf("slow sender %d: %d %q, want 408 saying the body arrives too slowly", i, code, b)
		}
	}
	if !strings.Contains(log.String(), "refusing a request") || !strings.Contains(log.String(), "peer=127.0.0.") {
		t.Errorf("refusals not logged: %q", log.String())
	}
}
