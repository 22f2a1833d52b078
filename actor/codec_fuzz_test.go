package actor

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/types/known/anypb"
)

// FuzzWireDecode feeds arbitrary bytes to the decoding path a message from
// the wire takes: it must return an error or a value, never panic.
func FuzzWireDecode(f *testing.F) {
	good, _ := marshalEnvelope(&wireEnvelope{Kind: kindCall, Call: 7, Type: typeName(reflect.TypeOf(Ping{})), Body: mustBody(Ping{N: 3}), From: "127.0.0.1:1"})
	f.Add(good.Value)
	f.Add([]byte{})
	f.Add([]byte{0xc1})
	f.Add([]byte{0x85, 0xa1, 0x6b, 0x02})
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := unmarshalEnvelope(&anypb.Any{TypeUrl: envelopeTypeURL, Value: b})
		if err != nil {
			return
		}
		_, _ = decodeBody(e.Type, e.Body)
		// Every registered type must survive arbitrary bodies too.
		for _, name := range []string{typeName(reflect.TypeOf(Ping{})), typeName(reflect.TypeOf(&Boom{})), typeName(reflect.TypeOf(Echo{}))} {
			_, _ = decodeBody(name, b)
		}
	})
}

func mustBody(m any) []byte {
	_, b, err := encodeBody(m)
	if err != nil {
		panic(err)
	}
	return b
}
