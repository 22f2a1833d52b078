package actor

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeze stops process pid (SIGSTOP) and waits until it is stopped.
func freeze(t *testing.T, pid int) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("/proc/%d/stat", pid)
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(stat)
		i := bytes.LastIndexByte(b, ')')
		if err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T' {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %d not stopped 10 s after SIGSTOP", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestBulkFetchFromAStuckPeer: a fetch from a peer that stops sending
// (frozen here; a stuck process or a path that drops packets looks the
// same: the connection stays open and no byte comes) fails with
// ErrBulkStalled once Config.BulkStall passes without a byte, naming the
// peer, whether it stalls before its answer or mid-payload; before, it
// waited for the caller's context, forever under context.Background.
func TestBulkFetchFromAStuckPeer(t *testing.T) {
	const size = 48 << 20
	for _, c := range []struct {
		name     string
		tcp      bool
		midway   bool // freeze after the first chunk, else before the fetch
		sameHost bool
	}{
		{name: "TCP, before the answer", tcp: true},
		{name: "TCP, mid-payload", tcp: true, midway: true},
		{name: "same host, before the answer"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, p := stallPair(t, c.tcp)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			off, err := CallAs[Offered](ctx, s, bulkerRef(p), OfferPattern{Size: size, Seed: 3, Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			if c.midway {
				fetchedChunk = func(got int) {
					if got == bulkChunk {
						freeze(t, p.Cmd.Process.Pid)
					}
				}
				defer func() { fetchedChunk = nil }()
			} else {
				freeze(t, p.Cmd.Process.Pid)
			}
			_, err = s.Bulk().Fetch(ctx, off.Refs[0])
			t.Logf("Fetch: %v", err)
			if !errors.Is(err, ErrBulkStalled) || !strings.Contains(err.Error(), off.Refs[0].Addr) {
				t.Errorf("fetch from a frozen peer: %v; want ErrBulkStalled naming %s", err, off.Refs[0].Addr)
			}
			if ctx.Err() != nil {
				t.Error("the fetch did not end before the test's context")
			}
		})
	}
}

// TestBulkSlowFetchIsNotCut: a fetch that takes longer in all than
// Config.BulkStall, its bytes coming all along (the reader takes a
// pause after each chunk, as a slow link would), arrives whole.
func TestBulkSlowFetchIsNotCut(t *testing.T) {
	const size = 12 * bulkChunk
	stall := 2 * time.Second
	s, err := Start(Config{Logger: DiscardLogger(), BulkTCPOnly: true, BulkStall: stall})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	p := startPeer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	off, err := CallAs[Offered](ctx, s, bulkerRef(p), OfferPattern{Size: size, Seed: 5, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	fetchedChunk = func(int) { time.Sleep(stall / 8) }
	defer func() { fetchedChunk = nil }()
	// 12 pauses of stall/8: the fetch takes at least 1.5 × BulkStall.
	got, err := s.Bulk().Fetch(ctx, off.Refs[0])
	if err != nil {
		t.Fatalf("a slow fetch (BulkStall %s): %v", stall, err)
	}
	if sha256.Sum256(got) != sha256.Sum256(pattern(size, 5)) {
		t.Error("the slow fetch brought other bytes")
	}
}

// TestBulkPushToAStuckReceiver: a push to a node that took the
// connection and then reads nothing more (frozen here, after a first push
// proved the connection; a stuck process looks the same) fails with
// ErrBulkStalled once Config.BulkStall passes without the receiver taking
// a byte or answering, naming the peer, over TCP and on the same-host
// path; before, the sender's write (or its wait for the answer) held it
// until the caller's context ended, forever under context.Background.
func TestBulkPushToAStuckReceiver(t *testing.T) {
	const size = 48 << 20
	for _, c := range []struct {
		name string
		tcp  bool
	}{
		{name: "TCP", tcp: true},
		{name: "same host"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, p := stallPair(t, c.tcp)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			off, err := CallAs[Offered](ctx, s, bulkerRef(p), OfferPattern{Size: 1, Seed: 1, Count: 1})
			if err != nil {
				t.Fatal(err)
			}
			addr := off.Refs[0].Addr
			// A first push opens (and keeps) the connection: the peer has no
			// receiver of that name, and says so.
			if err := s.Bulk().Push(ctx, addr, "nobody", nil, []byte("hello")); !errors.Is(err, ErrBulkAbsent) {
				t.Fatalf("first push: %v, want ErrBulkAbsent", err)
			}
			freeze(t, p.Cmd.Process.Pid)
			err = s.Bulk().Push(ctx, addr, "nobody", nil, pattern(size, 4))
			t.Logf("Push: %v", err)
			if !errors.Is(err, ErrBulkStalled) || !strings.Contains(err.Error(), addr) {
				t.Errorf("push to a frozen receiver: %v; want ErrBulkStalled naming %s", err, addr)
			}
			if ctx.Err() != nil {
				t.Error("the push did not end before the test's context")
			}
		})
	}
}

// stallPair is a system whose bulk transfers stall after 2 s of silence
// (over TCP only, or the same-host path too) and a peer process the test
// may freeze; the peer is killed, then let run to be reaped, at cleanup.
func stallPair(t *testing.T, tcpOnly bool) (*System, *peerProc) {
	t.Helper()
	s, err := Start(Config{Logger: DiscardLogger(), BulkTCPOnly: tcpOnly, BulkStall: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	p := startPeer(t)
	t.Cleanup(func() {
		_ = p.Cmd.Process.Signal(syscall.SIGKILL)
		_ = p.Cmd.Process.Signal(syscall.SIGCONT)
	})
	return s, p
}
