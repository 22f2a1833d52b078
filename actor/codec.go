package actor

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

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
)

// wireEnvelope is what crosses the network inside the Any. Body holds the
// message's msgpack bytes, or is empty when the body went over the bulk path
// (Bulk is then set). From is the sending node's actor address, checked
// against the membership before anything is delivered.
type wireEnvelope struct {
	Kind uint8    `msgpack:"k"`
	Call uint64   `msgpack:"c,omitempty"`
	Type string   `msgpack:"t,omitempty"`
	Body []byte   `msgpack:"b,omitempty"`
	Err  string   `msgpack:"e,omitempty"`
	Bulk *BulkRef `msgpack:"x,omitempty"`
	From string   `msgpack:"f"`
}

func marshalEnvelope(e *wireEnvelope) (*anypb.Any, error) {
	b, err := msgpack.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("encode envelope: %w", err)
	}
	return &anypb.Any{TypeUrl: envelopeTypeURL, Value: b}, nil
}

// unmarshalEnvelope decodes bytes that arrived from the wire. It never
// panics on malformed input (fuzzed in codec_fuzz_test.go).
func unmarshalEnvelope(a *anypb.Any) (*wireEnvelope, error) {
	if a.GetTypeUrl() != envelopeTypeURL {
		return nil, fmt.Errorf("unexpected wire type %q", a.GetTypeUrl())
	}
	var e wireEnvelope
	if err := msgpack.Unmarshal(a.GetValue(), &e); err != nil {
		return nil, fmt.Errorf("decode envelope: %w", err)
	}
	switch e.Kind {
	case kindTell, kindCall, kindReply:
	default:
		return nil, fmt.Errorf("decode envelope: unknown kind %d", e.Kind)
	}
	if e.Kind != kindReply && e.Type == "" {
		return nil, errors.New("decode envelope: no message type")
	}
	return &e, nil
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
