// Package mpcheck checks that msgpack bytes from another node declare no
// more than they hold, before a decoder allocates what they declare.
//
// github.com/vmihailenco/msgpack/v5 (v5.4.1) makes a slice at the length
// its array header declares before it reads one element (its allocation
// limit is never applied: decode_slice.go tests the flag against 1), so
// 11 bytes declaring 2³²−1 pointers ask for 32 GiB and the process dies
// with "fatal error: runtime: out of memory", which no recover catches.
// Check walks the bytes first: every array, map, string, binary and
// extension must fit in what is left, and containers may nest only
// MaxDepth deep. What a decoder then allocates is bounded by the bytes'
// length times the size of the largest element type it decodes into.
package mpcheck

import (
	"encoding/binary"
	"fmt"
)

// MaxDepth bounds the nesting of arrays and maps (a decoder recurses once
// per level).
const MaxDepth = 1000

// Check reports the first value of b (a whole msgpack value, and what
// follows it ignored) that declares more than b holds, nests deeper than
// MaxDepth, is cut short, or uses the unused code 0xc1.
func Check(b []byte) error {
	// left[i] is how many values the i-th open container still holds; the
	// outermost "container" is the one value b holds.
	left := make([]uint64, 1, 16)
	left[0] = 1
	off := 0
	for len(left) > 0 {
		if left[len(left)-1] == 0 {
			left = left[:len(left)-1]
			continue
		}
		left[len(left)-1]--
		if off >= len(b) {
			return fmt.Errorf("msgpack: cut short at byte %d", off)
		}
		c := b[off]
		off++
		var n uint64    // bytes of payload to skip
		var kids uint64 // values the container holds
		container := false
		switch {
		case c <= 0x7f, c >= 0xe0, c == 0xc0, c == 0xc2, c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			kids, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f:
			kids, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf:
			n = uint64(c & 0x1f)
		case c == 0xc1:
			return fmt.Errorf("msgpack: byte %d: code 0xc1 is never used", off-1)
		default:
			size, fixed, ok := lengthCode(c)
			if !ok {
				return fmt.Errorf("msgpack: byte %d: unknown code %#x", off-1, c)
			}
			if fixed {
				n = uint64(size)
				break
			}
			if len(b)-off < size {
				return fmt.Errorf("msgpack: cut short at byte %d", off)
			}
			var l uint64
			switch size {
			case 1:
				l = uint64(b[off])
			case 2:
				l = uint64(binary.BigEndian.Uint16(b[off:]))
			case 4:
				l = uint64(binary.BigEndian.Uint32(b[off:]))
			}
			off += size
			switch c {
			case 0xdc, 0xdd: // array16, array32
				kids, container = l, true
			case 0xde, 0xdf: // map16, map32
				kids, container = 2*l, true
			case 0xc7, 0xc8, 0xc9: // ext: a type byte, then l bytes
				n = l + 1
			default: // str, bin
				n = l
			}
		}
		rest := uint64(len(b) - off)
		if container {
			// Each value takes at least a byte.
			if kids > rest {
				return fmt.Errorf("msgpack: byte %d: a container of %d values with %d bytes left", off, kids, rest)
			}
			if kids > 0 {
				if len(left) > MaxDepth {
					return fmt.Errorf("msgpack: byte %d: containers nested over %d deep", off, MaxDepth)
				}
				left = append(left, kids)
			}
			continue
		}
		if n > rest {
			return fmt.Errorf("msgpack: byte %d: a value of %d bytes with %d bytes left", off, n, rest)
		}
		off += int(n)
	}
	return nil
}

// lengthCode says, for a code with a payload, either the payload's fixed
// size (fixed) or the size of the length that precedes it.
func lengthCode(c byte) (size int, fixed, ok bool) {
	switch c {
	case 0xcc, 0xd0: // uint8, int8
		return 1, true, true
	case 0xcd, 0xd1:
		return 2, true, true
	case 0xca, 0xce, 0xd2: // float32, uint32, int32
		return 4, true, true
	case 0xcb, 0xcf, 0xd3:
		return 8, true, true
	case 0xd4: // fixext1: type + 1
		return 2, true, true
	case 0xd5:
		return 3, true, true
	case 0xd6:
		return 5, true, true
	case 0xd7:
		return 9, true, true
	case 0xd8:
		return 17, true, true
	case 0xc4, 0xc7, 0xd9: // bin8, ext8, str8
		return 1, false, true
	case 0xc5, 0xc8, 0xda, 0xdc, 0xde:
		return 2, false, true
	case 0xc6, 0xc9, 0xdb, 0xdd, 0xdf:
		return 4, false, true
	}
	return 0, false, false
}
