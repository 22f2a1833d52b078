//go:build !linux

package shard

import (
	"errors"
	"time"
	"unsafe"
)

// Elsewhere than Linux no segment is offered: the ring's chunks go
// through the Transport.

type mapping struct {
	data  []float32
	words unsafe.Pointer
}

func (m *mapping) close() {}

type segment struct {
	mapping *mapping
	offer   offer
}

func (s *segment) closeFD() {}
func (s *segment) release() {}
func newSharedSegment(floats, bucket int) (*segment, error) {
	return nil, errors.New("shared buffers need Linux")
}
func mapPeerSegment(o offer) (*mapping, error) { return nil, errors.New("shared buffers need Linux") }

type peerProc struct{ pid int }

func watchProcess(o, mine offer) peerProc { return peerProc{} }
func (p peerProc) gone() bool             { return false }
func (p peerProc) close()                 {}

func futexWait(p *uint32, v uint32, d time.Duration) { time.Sleep(d) }
func futexWake(p *uint32)                            {}

type view struct {
	data  []float32
	fixes [][]ownedSpan
}

func (v *view) close() {}
func (s *shmGroup) newView(total int) (*view, error) {
	return nil, errors.New("views need Linux")
}
