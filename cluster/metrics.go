package cluster

import (
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// nodeCollector reads the node's view at each scrape: live nodes, actors by
// state, this node's resources and its transport counters.
type nodeCollector struct {
	n *Node

	nodes, actors, restarts, resources *prometheus.Desc
	// counters are the transport counters, in the order Collect reads
	// them from actor.Stats.
	counters []*prometheus.Desc
}

func newNodeCollector(n *Node) *nodeCollector {
	counter := func(name, help string) *prometheus.Desc { return prometheus.NewDesc(name, help, nil, nil) }
	return &nodeCollector{
		n:         n,
		nodes:     prometheus.NewDesc("rlnode_nodes", "Live nodes in the cluster, as this node sees it.", nil, nil),
		actors:    prometheus.NewDesc("rlnode_actors", "Actors in the directory by state.", []string{"state"}, nil),
		restarts:  prometheus.NewDesc("rlnode_actor_restarts", "Restarts summed over all actors.", nil, nil),
		resources: prometheus.NewDesc("rlnode_node_resources", "This node's resources.", []string{"resource", "kind"}, nil),
		counters: []*prometheus.Desc{
			counter("rlnode_calls_sent_total", "Call requests sent by this node."),
			counter("rlnode_tells_sent_total", "Tell messages sent by this node."),
			counter("rlnode_messages_received_total", "Messages delivered to actors on this node."),
			counter("rlnode_messages_dropped_total", "Malformed, undecodable or non-member messages dropped."),
			counter("rlnode_bulk_bytes_served_total", "Bytes other nodes pulled from this node's bulk offers."),
			counter("rlnode_bulk_bytes_fetched_total", "Bytes this node pulled over the bulk path."),
		},
	}
}

func (c *nodeCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.nodes
	ch <- c.actors
	ch <- c.restarts
	ch <- c.resources
	for _, d := range c.counters {
		ch <- d
	}
}

func (c *nodeCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.n.Status()
	ch <- prometheus.MustNewConstMetric(c.nodes, prometheus.GaugeValue, float64(len(st.Nodes)))
	counts := map[ActorState]int{Alive: 0, Restarting: 0, Dead: 0}
	restarts := 0
	for _, a := range st.Actors {
		counts[a.State]++
		restarts += a.Restarts
	}
	for _, s := range []ActorState{Alive, Restarting, Dead} {
		ch <- prometheus.MustNewConstMetric(c.actors, prometheus.GaugeValue, float64(counts[s]), string(s))
	}
	ch <- prometheus.MustNewConstMetric(c.restarts, prometheus.GaugeValue, float64(restarts))
	total, used := c.n.ledger.snapshot()
	for _, k := range sortedKeys(total) {
		ch <- prometheus.MustNewConstMetric(c.resources, prometheus.GaugeValue, total[k], k, "total")
		ch <- prometheus.MustNewConstMetric(c.resources, prometheus.GaugeValue, used[k], k, "used")
	}
	s := c.n.sys.Stats()
	for i, v := range []uint64{s.CallsSent, s.TellsSent, s.MessagesReceived, s.MessagesDropped, s.BulkBytesServed, s.BulkBytesFetched} {
		ch <- prometheus.MustNewConstMetric(c.counters[i], prometheus.CounterValue, float64(v))
	}
}

// metricsHandler serves the node's metrics in the Prometheus exposition
// formats, with the Go runtime's and the process's standard metrics
// (go_*, process_*) beside the node's.
func (n *Node) metricsHandler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(newNodeCollector(n), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}
