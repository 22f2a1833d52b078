// Package actor is rlnode's typed actor API over protoactor-go: actor kinds
// registered by name, spawn, references, Call (request/response with context
// deadline and cancellation that reaches the actor), Stream (several replies
// under a window) and Tell, watches, pools, and the message codec
// that carries plain Go structs as msgpack between nodes.
//
// It owns the actor transport (protoactor remote over gRPC) and the chunked
// bulk path for large payloads (over shared memory between nodes of one
// host: local_linux.go), and proves on all of them that a connection's
// other end holds the cluster key (auth.go). It knows nothing of membership or
// placement: package cluster tells it which addresses are members and which
// are lost.
package actor
