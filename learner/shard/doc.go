// Package shard owns the data-parallel learner: N learner ranks (one
// learner.Learner each, on one node or many) that train as one learner with
// the global batch.
//
// Every rank gets the whole batch, computes advantages and loss
// normalizers over all of it and runs forward and backward on its slice
// (learner.Sharding); the old-policy pre-pass that PPO and a value
// baseline need over the whole batch runs on each rank's slice, and the
// ranks share the results (Sharding.SumStats). The gradients meet in a ring: reduce-scatter and
// all-gather in buckets of BucketElems floats, InFlight buckets at a time,
// over a Transport. The reduction overlaps the backward pass: the flat
// gradient buffer is laid out in the order backward finishes gradients
// (learner.GradGroups: the last decoder layer first, embedding, norm and
// heads last, since a tied embedding is final only at the very end), and
// during the backward pass of a step's last micro-batch the model's hook
// (learner.Sharding.GradsReady) copies each finished layer into it and
// starts every bucket it completes, on goroutines, in bucket order on
// every rank; the update waits for all buckets (overlap.go). The real Transport (Mailbox) pushes each chunk
// on the runtime's bulk path, over a kept TCP (or TLS) connection, from the
// sender's buffer to the receiving rank's mailbox, where the reduce-scatter
// sums straight from the received bytes; only aborts are actor messages.
// When every rank is on one host, the flat buffer lives in a shared
// segment that every rank maps (shared.go, docs/samehost.md): the owner of
// a chunk sums it straight out of the other ranks' buffers, in the ring's
// order, and writes the sum into all of them; no chunk travels. Elsewhere
// (several hosts, RLNODE_BULK_TCP=1) the chunks go through the Transport.
// No NCCL, no gRPC for bulk data. ZeRO stage 0 all-reduces the gradients and steps AdamW on
// every rank; stage 1 (ZeRO-1) reduce-scatters them, steps AdamW only on
// the slice a rank owns (the moments of the rest are not kept), and
// all-gathers the updated weights. Sums are taken in ring order once per
// chunk, so all ranks hold bit-identical weights.
//
// Every collective has a timeout (Options.Timeout): a rank that dies or
// stalls fails the step on all ranks with an error naming it and its node,
// and a rank whose own step fails tells the others at once (RingAbort), as
// does Group for a rank whose call comes back lost (actor gone, node lost),
// so a killed rank fails the step in milliseconds, not a timeout. A
// failed group trains no more; the caller restarts it from the last
// checkpoint (Group.Restart, with the survivors and respawned ranks, any
// count). Checkpoints are written per rank (learner.ShardOptimizerFile)
// and load with any shard count, or into an unsharded learner.
//
// StartGroup places a policy's learner on the cluster, the way
// rollout.StartPool places rollout actors: one learner actor, or ranks in
// the bundles of a SPREAD placement group joined as a Group; its Restart
// respawns lost ranks (elsewhere when their node is gone) and restarts
// the group from a checkpoint. When to restart is the training loop's
// call, not this package's.
//
// Rank and the ring are plain code over Transport, tested in one process
// (MemTransports); ActorKind, Group and StartGroup wrap them for the
// runtime, tested with ranks and nodes in separate processes.
//
// Not done: on the cpu backend backward already uses every core, so the
// overlap hides only the communication's waiting, not its copies and sums
// (which compete with backward for the cores); parameter sharding (ZeRO-3/FSDP) is not
// implemented (every rank holds the whole policy, so weight sync reads
// rank 0). A rank writes its part of a ZeRO-1 checkpoint into the
// checkpoint directory when its node sees it (a shared file system across
// hosts), else into a staging folder of its own that PlacedGroup.Save
// pulls (learner.Folders).
package shard
