// Package cluster owns membership (hashicorp/memberlist gossip), node
// resources (CPU, GPU, labels), placement and placement groups, the actor
// directory (which actor lives where, in what state), restarts after node
// loss, join keys and TLS. It spawns actors on chosen nodes through package
// actor; it opens no sockets of its own beyond memberlist's and the loopback
// control endpoint that `rlnode status` and `rlnode stop` talk to.
package cluster
