//go:build !linux

package actor

import (
	"context"
	"io"
	"net"
	"time"
)

// Without Linux (memfd, SO_PEERCRED) every bulk transfer uses TCP.

type localState struct{}

type offerSeg struct{}

// PayloadLender is implemented by the reader a PushHandler gets when the
// payload lies in shared memory (Linux only).
type PayloadLender interface {
	Lend() (p []byte, release func(), ok bool)
}

const (
	localQueryMagic = "RLBL"
	localViewMagic  = "RLBM"
)

// HostID is empty where the same-host path does not exist.
func HostID() string { return "" }

func (b *Bulk) startLocal()                          {}
func (b *Bulk) closeLocal()                          {}
func (b *Bulk) LocalPath() string                    { return "" }
func (b *Bulk) newOfferShared(readers int) *offerSeg { return nil }
func (b *Bulk) freeOffer(*offer)                     {}
func (b *Bulk) sweepLocalIdle(time.Time) []func()    { return nil }
func (b *Bulk) localIdleConns() int                  { return 0 }

func (b *Bulk) serveLocalQuery(c net.Conn, r io.Reader) bool {
	if _, err := readString16(r); err != nil {
		return false
	}
	_, err := c.Write([]byte{bulkStatusAbsent})
	return err == nil
}

func (b *Bulk) fetchLocal(context.Context, BulkRef, int64, []byte, []byte, func()) (bool, error) {
	return false, nil
}

func (b *Bulk) viewLocal(context.Context, BulkRef, []byte, func()) ([]byte, func(), bool, error) {
	return nil, nil, false, nil
}

func (b *Bulk) pushLocal(context.Context, string, string, []byte, []byte, func()) (bool, error) {
	return false, nil
}
