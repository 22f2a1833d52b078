package traces

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"

	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// An OTLP request's bytes are not what decoding it holds: an empty span
// is 2 bytes of protobuf (3 of JSON) and a few hundred bytes decoded, so
// a 16 MiB body of them took 2.2 GiB. The receiver therefore estimates,
// before decoding, what the request's messages take decoded, and refuses
// one past decodedPerBodyByte × its body bound. Measured in protobuf,
// chat spans take about 3× their bytes decoded, spans of 20 integer
// attributes 9× (keys like app.attr.07) to 14× (keys of 2–3 characters);
// JSON takes less per byte. So real exports pass at any size up to the
// bound, but for bodies over 15 MiB of spans whose attribute keys are 2–3
// characters long.
const decodedPerBodyByte = 16

// elementOverhead is added to each decoded message or JSON element: its
// pointer in the parent's slice (twice, as slices grow) and allocator
// rounding.
const elementOverhead = 32

// protoMsg is what the protobuf estimate knows of a message type: its
// decoded size and, by field number, the types of its message fields.
type protoMsg struct {
	size   int64
	fields []*protoMsg // nil where the field is not a message
}

// protoSizes is the Go size of each message type reachable from an export
// request, by full name; exportMsg is the request's.
var protoSizes, exportMsg = func() (map[protoreflect.FullName]int64, *protoMsg) {
	sizes := map[protoreflect.FullName]int64{}
	made := map[protoreflect.FullName]*protoMsg{}
	var walk func(md protoreflect.MessageDescriptor) *protoMsg
	walk = func(md protoreflect.MessageDescriptor) *protoMsg {
		if m, ok := made[md.FullName()]; ok {
			return m
		}
		size := int64(256) // a type the registry lacks: a generous guess
		if mt, err := protoregistry.GlobalTypes.FindMessageByName(md.FullName()); err == nil {
			size = int64(reflect.TypeOf(mt.Zero().Interface()).Elem().Size())
		}
		// A oneof's value is a wrapper allocated beside the message.
		if md.Oneofs().Len() > 0 {
			size += 16
		}
		m := &protoMsg{size: size + elementOverhead}
		made[md.FullName()], sizes[md.FullName()] = m, m.size
		for i := range md.Fields().Len() {
			fd := md.Fields().Get(i)
			if fd.Message() == nil {
				continue
			}
			for int(fd.Number()) >= len(m.fields) {
				m.fields = append(m.fields, nil)
			}
			m.fields[fd.Number()] = walk(fd.Message())
		}
		return m
	}
	export := walk((&tracepb.TracesData{}).ProtoReflect().Descriptor())
	return sizes, export
}()

// errOverBudget stops an estimate once it passes its bound.
var errOverBudget = errors.New("over budget")

// protoDecodedCost estimates what decoding an export request in protobuf
// takes: each message it holds, by its Go size. It stops counting once
// past most (returning more than most). Malformed bytes end the count
// there: decoding reports them.
func protoDecodedCost(b []byte, most int64) int64 {
	var total int64
	var walk func(b []byte, m *protoMsg, depth int) error
	walk = func(b []byte, m *protoMsg, depth int) error {
		total += m.size
		if total > most {
			return errOverBudget
		}
		if depth > protowire.DefaultRecursionLimit {
			return errors.New("nested too deep") // decoding refuses it
		}
		for len(b) > 0 {
			num, typ, n := protowire.ConsumeTag(b)
			if n < 0 {
				return nil
			}
			b = b[n:]
			if typ == protowire.BytesType {
				v, n := protowire.ConsumeBytes(b)
				if n < 0 {
					return nil
				}
				b = b[n:]
				if int(num) < len(m.fields) && m.fields[num] != nil {
					if err := walk(v, m.fields[num], depth+1); err != nil {
						return err
					}
				}
				continue
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
			if n < 0 {
				return nil
			}
			b = b[n:]
		}
		return nil
	}
	walk(b, exportMsg, 0)
	return total
}

// Decoded sizes of a JSON request's elements: its JSON form and the
// protobuf messages made of it, both held until the request is converted.
var (
	jsonSpanCost  = int64(reflect.TypeOf(jsonSpan{}).Size()+reflect.TypeOf(tracepb.Span{}).Size()) + 2*elementOverhead
	jsonEventCost = int64(reflect.TypeOf(jsonEvent{}).Size()+reflect.TypeOf(tracepb.Span_Event{}).Size()) + 2*elementOverhead
	// An attribute, a value of an array or any other element: the
	// largest of a key-value's and a value's forms, and the protobuf
	// key-value and value with its oneof wrapper.
	jsonValueCost = int64(reflect.TypeOf(jsonKeyValue{}).Size()) + protoSizes["opentelemetry.proto.common.v1.KeyValue"] +
		protoSizes["opentelemetry.proto.common.v1.AnyValue"] + elementOverhead
	jsonObjectCost = int64(elementOverhead) // an object not in an array: inline, or a small pointer's target (status, resource, arrayValue…)
)

// jsonDecodedCost is protoDecodedCost for a request in JSON: each element
// of an array costs by the array's key (spans, events, anything else as
// an attribute or value), each other object a small allocation. It scans
// the bytes once, without decoding them; malformed JSON is counted as far
// as it goes, and decoding reports it.
func jsonDecodedCost(b []byte, most int64) int64 {
	type frame struct {
		array  bool
		key    string // the key that opened it (an array's elements inherit it)
		expect bool   // an array's next value is an element, an object's next string a key
	}
	var stack []frame
	var total int64
	key := ""
	for i := 0; i < len(b) && total <= most; {
		c := b[i]
		if c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == ':' {
			i++
			continue
		}
		var top *frame
		if n := len(stack); n > 0 {
			top = &stack[n-1]
		}
		if top != nil && top.array && top.expect && c != ']' {
			total += jsonElementCost(top.key)
			top.expect = false
		}
		switch c {
		case '"':
			j := i + 1
			escaped := false
			for j < len(b) && b[j] != '"' {
				if b[j] == '\\' {
					escaped = true
					j++
				}
				j++
			}
			if top != nil && !top.array && top.expect {
				key = string(b[i+1 : min(j, len(b))])
				if escaped {
					json.Unmarshal(b[i:min(j+1, len(b))], &key)
				}
				top.expect = false
			}
			i = j + 1
		case '{', '[':
			if len(stack) >= protowire.DefaultRecursionLimit {
				return total // decoding refuses it
			}
			opens := key
			if top != nil && top.array {
				opens = top.key
			}
			if c == '{' {
				total += jsonObjectCost
			}
			stack = append(stack, frame{array: c == '[', key: opens, expect: true})
			i++
		case '}', ']':
			stack = stack[:max(len(stack)-1, 0)]
			i++
		case ',':
			if top != nil {
				top.expect = true
			}
			i++
		default: // a number, true, false, null (or not JSON)
			i++
			for i < len(b) && !strings.ContainsRune(",:]}\" \t\n\r{[", rune(b[i])) {
				i++
			}
		}
	}
	return total
}

// jsonElementCost is what an element of the array under key takes
// decoded. Keys match fields as encoding/json matches them.
func jsonElementCost(key string) int64 {
	switch {
	case strings.EqualFold(key, "spans"):
		return jsonSpanCost
	case strings.EqualFold(key, "events"), strings.EqualFold(key, "links"):
		return jsonEventCost
	}
	return jsonValueCost
}
