package cluster

import (
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

// handleFields holds handles in every place a message may carry them.
type handleFields struct {
	Ptr  *Handle
	Val  Handle
	List []*Handle
	Map  map[string]Handle
}

// FuzzHandleDecode feeds arbitrary bytes to the decoding of messages
// that carry actor handles (a peer's message, task or spawn arguments):
// they decode, checked as every message from the wire is, with every
// handle naming an actor Spawn would allow, or unset, or fail; never a
// panic, and never a handle bound to a node.
func FuzzHandleDecode(f *testing.F) {
	good, err := msgpack.Marshal(handleFields{Ptr: &Handle{name: "learner"}, Val: Handle{name: "sync"},
		List: []*Handle{{name: "r0"}, nil}, Map: map[string]Handle{"a": {name: "r1"}}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	bad, _ := msgpack.Marshal(map[string]any{"Ptr": map[string]any{"Name": "$node"}})
	f.Add(bad)
	f.Add([]byte{0x81, 0xa3, 'P', 't', 'r', 0x81, 0xa4, 'N', 'a', 'm', 'e', 0xdb, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		var out handleFields
		if err := unmarshalChecked(b, &out); err != nil {
			return
		}
		check := func(where string, h *Handle) {
			if h == nil {
				return
			}
			if h.n != nil {
				t.Fatalf("%s: a decoded handle is bound to a node", where)
			}
			if h.name != "" {
				if err := checkActorName(h.name); err != nil {
					t.Fatalf("%s: decoded a handle Spawn would refuse: %v", where, err)
				}
			}
		}
		check("Ptr", out.Ptr)
		check("Val", &out.Val)
		for _, h := range out.List {
			check("List", h)
		}
		for k, h := range out.Map {
			check("Map "+k, &h)
		}
	})
}
