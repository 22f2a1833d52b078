// Package dashboard serves rlnode's pages for a browser: the cluster
// (nodes, actors, placement groups, from a node's status), the runs found
// in run folders (status, step and ETA, charts of metrics.jsonl decimated
// on the server, recipe diffs), the trace stores (search, span trees,
// stats) and the episodes runs record in them.
// Everything it serves is embedded; it only reads (GET and HEAD), listens
// on loopback unless given the control endpoint's token, and never writes
// to a run folder or changes the cluster.
package dashboard
