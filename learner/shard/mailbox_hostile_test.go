package shard

import (
	"bytes"
	"context"
	"encoding/binary"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/rlnode/rlnode/actor"
	"github.com/rlnode/rlnode/internal/proctest"
)

// TestMailboxPushLengths: a push to a rank's mailbox that declares more
// bytes than it brings (a hostile member, or a corrupted stream) costs the
// receiving node what arrives, not what is declared: a length over the
// host's memory is refused before anything is made, and a large one that
// stops short holds no more than the bytes that came. The mailbox takes
// an honest chunk after either. Before, the mailbox made a buffer of the
// declared length at once: a 512 GiB length in a 48-byte preamble killed
// the node's process ("fatal error: runtime: out of memory"), and 4 GiB
// announced and 1 MiB sent left 4 GiB mapped.
func TestMailboxPushLengths(t *testing.T) {
	if proctest.Isolated(t) {
		return
	}
	sys, err := actor.Start(actor.Config{Logger: actor.DiscardLogger(), BulkTCPOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer sys.Stop()
	mb, err := OpenMailbox(sys, "mb")
	if err != nil {
		t.Fatal(err)
	}
	defer mb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var hdr [pushHdr]byte
	for _, c := range []struct {
		name     string
		declared uint64
		sent     int
	}{
		{"512 GiB declared", 512 << 30, 1 << 10},
		{"4 GiB declared, 1 MiB sent", 4 << 30, 1 << 20},
	} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", sys.Bulk().Addr())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			// A hello as this node's own address, then the push.
			from := sys.Address()
			req := append([]byte("RLBH"), byte(len(from)>>8), byte(len(from)))
			req = append(req, from...)
			if _, err := conn.Write(req); err != nil {
				t.Fatal(err)
			}
			var st [1]byte
			if _, err := io.ReadFull(conn, st[:]); err != nil || st[0] != 0 {
				t.Fatalf("hello: status %d, %v", st[0], err)
			}
			req = append([]byte("RLBP"), 0, 2, 'm', 'b')
			req = binary.BigEndian.AppendUint32(req, pushHdr)
			req = append(req, hdr[:]...)
			req = binary.BigEndian.AppendUint64(req, c.declared)
			req = append(req, bytes.Repeat([]byte{1}, c.sent)...)
			if _, err := conn.Write(req); err != nil {
				t.Logf("write: %v (the receiver may have refused it already)", err)
			}
			conn.Close()
			// An honest chunk after it arrives whole.
			payload := bytes.Repeat([]byte{7}, 1000)
			if err := sys.Bulk().Push(ctx, sys.Bulk().Addr(), "mb", hdr[:], payload); err != nil {
				t.Fatalf("an honest push after it: %v", err)
			}
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			t.Logf("heap mapped: %d MiB", ms.HeapSys>>20)
			if ms.HeapSys > 1<<30 {
				t.Errorf("%d MiB of heap mapped after a push that sent %d bytes", ms.HeapSys>>20, c.sent)
			}
		})
	}
}
