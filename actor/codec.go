package actor

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"reflect"
	"sync"

	"github.com/rlnode/rlnode/internal/mpcheck"
	"github.com/vmihailenco/msgpack/v5"
	"google.golang.org/protobuf/types/known/anypb"
)

// Message types travel between nodes as msgpack inside an anypb.Any whose
// TypeUrl is envelopeTypeURL: protoactor's remote only carries protobuf
// messages (its serializer id is always 0, see shared/DESIGN.md), so the Any
// is the protobuf shell and the envelope inside it is ours.
const envelopeTypeURL = "rlnode/envelope"

// ErrUnregistered is returned when a message's Go type was never passed to
// RegisterMessage: every type that crosses an actor boundary must be, so that
// a program behaves the same whether its actors are local or remote.
var ErrUnregistered = errors.New("message type not registered")

type messageType struct {
	name string
	typ  reflect.Type // the registered type itself (pointer or value)
}

var registry = struct {
	sync.RWMutex
	byName map[string]messageType
	byType map[reflect.Type]string
}{byName: map[string]messageType{}, byType: map[reflect.Type]string{}}

// RegisterMessage registers the Go types of the given example values as
// message types, under their package path and type name. Register a value
// type (Ping{}) to receive values, a pointer type (&Ping{}) to receive
// pointers. Call it from init on every node; registering twice is harmless.
func RegisterMessage(examples ...any) {
	registry.Lock()
	defer registry.Unlock()
	for _, ex := range examples {
		t := reflect.TypeOf(ex)
		if t == nil {
			panic("actor.RegisterMessage: nil example")
		}
		name := typeName(t)
		registry.byName[name] = messageType{name: name, typ: t}
		registry.byType[t] = name
	}
}

func typeName(t reflect.Type) string {
	prefix := ""
	for t.Kind() == reflect.Pointer {
		prefix += "*"
		t = t.Elem()
	}
	if t.PkgPath() == "" {
		return prefix + t.String()
	}
	return prefix + t.PkgPath() + "." + t.Name()
}

func registeredName(msg any) (string, error) {
	t := reflect.TypeOf(msg)
	if t == nil {
		return "", fmt.Errorf("nil message: %w", ErrUnregistered)
	}
	registry.RLock()
	name, ok := registry.byType[t]
	registry.RUnlock()
	if !ok {
		return "", fmt.Errorf("%s: %w (call actor.RegisterMessage on every node)", typeName(t), ErrUnregistered)
	}
	return name, nil
}

// encodeBody encodes a registered message to its type name and msgpack bytes.
func encodeBody(msg any) (string, []byte, error) {
	name, err := registeredName(msg)
	if err != nil {
		return "", nil, err
	}
	b, err := msgpack.Marshal(msg)
	if err != nil {
		return "", nil, fmt.Errorf("encode %s: %w", name, err)
	}
	return name, b, nil
}

// decodeBody turns a type name and msgpack bytes back into a value of the
// registered type.
func decodeBody(name string, body []byte) (any, error) {
	registry.RLock()
	mt, ok := registry.byName[name]
	registry.RUnlock()
	if !ok {
		return nil, fmt.Errorf("decode %q: %w", name, ErrUnregistered)
	}
	base := mt.typ
	isPtr := base.Kind() == reflect.Pointer
	if isPtr {
		base = base.Elem()
	}
	// Checked first: msgpack makes a slice at its declared length before
	// reading an element (internal/mpcheck).
	if err := mpcheck.Check(body); err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	v := reflect.New(base)
	if err := msgpack.Unmarshal(body, v.Interface()); err != nil {
		return nil, fmt.Errorf("decode %s: %w", name, err)
	}
	if isPtr {
		return v.Interface(), nil
	}
	return v.Elem().Interface(), nil
}

// envelope kinds.
const (
	kindTell  uint8 = 1
	kindCall  uint8 = 2
	kindReply uint8 = 3
	// kindCancel gives up call Call of the sending node (cancel.go): no
	// type, no body.
	kindCancel uint8 = 4
	// kindStreamCall is a call whose answer may be several replies
	// (stream.go): kindItem each, then a kindReply that ends it;
	// kindCredit (uvarint body) lets the producer send that many more.
	kindStreamCall uint8 = 5
	kindItem       uint8 = 6
	kindCredit     uint8 = 7
)

// isCall says whether an envelope of kind k waits for a reply.
func isCall(k uint8) bool { return k == kindCall || k == kindStreamCall }

// wireEnvelope is what crosses the network inside the Any. Body holds the
// message's msgpack bytes, or is empty when the body went over the bulk path
// (Bulk is then set). From is the sending node's actor address, checked
// against the membership before anything is delivered.
type wireEnvelope struct {
	Kind uint8
	Call uint64
	Type string
	Body []byte
	Err  string
	Bulk *BulkRef
	From string
}

// The envelope has a hand-written binary layout rather than msgpack: it is
// on every message's path, and a fixed layout costs no reflection and lets
// the body alias the received buffer. Layout: kind byte, flags byte,
// uvarint call id, then length-prefixed type, from, [err], [bulk addr, bulk
// id, uvarint bulk size], and the body to the end.
const (
	flagErr  = 1
	flagBulk = 2
)

func marshalEnvelope(e *wireEnvelope) (*anypb.Any, error) {
	n := 2 + binary.MaxVarintLen64*6 + len(e.Type) + len(e.From) + len(e.Err) + len(e.Body)
	if e.Bulk != nil {
		n += len(e.Bulk.Addr) + len(e.Bulk.ID)
	}
	b := appendHeader(make([]byte, 0, n), e)
	b = append(b, e.Body...)
	return &anypb.Any{TypeUrl: envelopeTypeURL, Value: b}, nil
}

// appendHeader appends everything of e but its body.
func appendHeader(b []byte, e *wireEnvelope) []byte {
	var flags byte
	if e.Err != "" {
		flags |= flagErr
	}
	if e.Bulk != nil {
		flags |= flagBulk
	}
	b = append(b, e.Kind, flags)
	b = binary.AppendUvarint(b, e.Call)
	b = appendString(b, e.Type)
	b = appendString(b, e.From)
	if e.Err != "" {
		b = appendString(b, e.Err)
	}
	if e.Bulk != nil {
		b = appendString(b, e.Bulk.Addr)
		b = appendString(b, e.Bulk.ID)
		b = binary.AppendUvarint(b, uint64(e.Bulk.Size))
	}
	return b
}

// sliceWriter lets the msgpack encoder append straight after the header.
type sliceWriter struct{ b []byte }

func (w *sliceWriter) Write(p []byte) (int, error)       { w.b = append(w.b, p...); return len(p), nil }
func (w *sliceWriter) WriteByte(c byte) error            { w.b = append(w.b, c); return nil }
func (w *sliceWriter) WriteString(s string) (int, error) { w.b = append(w.b, s...); return len(s), nil }

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShortEnvelope = errors.New("decode envelope: truncated")

// envReader reads the envelope's fields; the first error sticks.
type envReader struct {
	b   []byte
	err error
}

func (r *envReader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShortEnvelope
		return 0
	}
	r.b = r.b[n:]
	return v
}

// bytes reads a length-prefixed field, aliasing the envelope's buffer.
func (r *envReader) bytes() []byte {
	n := r.uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(len(r.b)) {
		r.err = errShortEnvelope
		return nil
	}
	b := r.b[:n]
	r.b = r.b[n:]
	return b
}

func (r *envReader) str() string { return string(r.bytes()) }

// name reads a field from a small recurring set (message type names, node
// addresses) through the intern table, so steady traffic allocates no
// strings for them.
func (r *envReader) name() string { return interned.get(r.bytes()) }

// interned maps recurring byte strings to one shared string. It stops
// growing at internCap entries so arbitrary wire input cannot fill memory.
var interned = internTable{m: map[string]string{}}

const internCap = 4096

type internTable struct {
	mu sync.RWMutex
	m  map[string]string
}

func (t *internTable) get(b []byte) string {
	t.mu.RLock()
	s, ok := t.m[string(b)] // no allocation for the lookup
	t.mu.RUnlock()
	if ok {
		return s
	}
	s = string(b)
	if len(b) <= 256 {
		t.mu.Lock()
		if len(t.m) < internCap {
			t.m[s] = s
		}
		t.mu.Unlock()
	}
	return s
}

// unmarshalEnvelope decodes bytes that arrived from the wire. It never
// panics on malformed input (fuzzed in codec_fuzz_test.go).
func unmarshalEnvelope(a *anypb.Any) (*wireEnvelope, error) {
	if a.GetTypeUrl() != envelopeTypeURL {
		return nil, fmt.Errorf("unexpected wire type %q", a.GetTypeUrl())
	}
	v := a.GetValue()
	if len(v) < 2 {
		return nil, errShortEnvelope
	}
	e := &wireEnvelope{Kind: v[0]}
	flags := v[1]
	r := envReader{b: v[2:]}
	e.Call = r.uvarint()
	e.Type = r.name()
	e.From = r.name()
	if flags&flagErr != 0 {
		e.Err = r.str()
	}
	if flags&flagBulk != 0 {
		br := &BulkRef{Addr: r.name(), ID: r.str()}
		size := r.uvarint()
		if size > math.MaxInt64 {
			return nil, errors.New("decode envelope: bulk size out of range")
		}
		br.Size = int64(size)
		e.Bulk = br
	}
	if r.err != nil {
		return nil, r.err
	}
	if flags&^(flagErr|flagBulk) != 0 {
		return nil, fmt.Errorf("decode envelope: unknown flags %#x", flags)
	}
	e.Body = r.b
	switch e.Kind {
	case kindTell, kindCall, kindReply, kindCancel, kindStreamCall, kindItem, kindCredit:
	default:
		return nil, fmt.Errorf("decode envelope: unknown kind %d", e.Kind)
	}
	if (e.Kind == kindTell || isCall(e.Kind) || e.Kind == kindItem) && e.Type == "" {
		return nil, errors.New("decode envelope: no message type")
	}
	return e, nil
}

// EncodeMessage encodes a registered message to its type name and msgpack
// body, for carrying messages inside other records (spawn arguments).
func EncodeMessage(msg any) (typeName string, body []byte, err error) {
	if msg == nil {
		return "", nil, nil
	}
	return encodeBody(msg)
}

// DecodeMessage is EncodeMessage's inverse; an empty type name gives nil.
func DecodeMessage(typeName string, body []byte) (any, error) {
	if typeName == "" {
		return nil, nil
	}
	return decodeBody(typeName, body)
}
