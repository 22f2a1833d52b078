package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/jobs"
)

// stopJobsFirst runs before `rlnode stop` asks nodes to stop. A job whose
// node stops is taken over by another node that runs jobs; when the nodes
// about to stop are all such nodes of their cluster (every node of a
// cluster on one machine, with stop --all), none is left to take it, and
// its driver would die with its node mid-step, losing the steps since its
// last checkpoint. So each job that has not ended is asked to stop after
// its current step, which it checkpoints (rlnode job stop), and the nodes
// stop once every such job has ended or timeout has passed, as the
// batch script of `rlnode sbatch --serve` does at its end. It returns
// false when a job was still running at the timeout.
func stopJobsFirst(stopping []cluster.RunInfo, timeout time.Duration, stdout, stderr io.Writer) bool {
	leaving := map[string]bool{}
	for _, ri := range stopping {
		leaving[ri.NodeID] = true
	}
	// One node asked for each cluster among the stopping nodes (a host
	// may run nodes of several), of those no node outside could take over.
	var clusters []jobs.Client
	var asking []string
	seen := map[string]bool{}
	for _, ri := range stopping {
		if seen[ri.NodeID] || ri.Token == "" {
			continue // its cluster is asked, or it cannot be (no token)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := cluster.FetchStatus(ctx, ri.Control)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "rlnode stop: node %s: its cluster's nodes: %v (its jobs are not asked to stop first)\n", ri.NodeID, err)
			continue
		}
		takeover := false
		for _, n := range st.Nodes {
			seen[n.ID] = true
			if n.Labels[jobs.Label] == "yes" && !leaving[n.ID] { // as a job's placement asks
				takeover = true // node n takes the jobs over
			}
		}
		seen[ri.NodeID] = true
		if !takeover {
			clusters = append(clusters, jobs.Client{Control: ri.Control, Token: ri.Token})
			asking = append(asking, ri.NodeID)
		}
	}
	asked := map[string]jobs.Info{} // by the node asked and job name
	deadline := time.Now().Add(timeout)
	for {
		var active []string
		for i, c := range clusters {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			list, err := c.List(ctx)
			cancel()
			if err != nil {
				fmt.Fprintf(stderr, "rlnode stop: node %s: the cluster's jobs: %v (they are not asked to stop first)\n", asking[i], err)
				clusters[i] = jobs.Client{}
				continue
			}
			for _, in := range list {
				key := asking[i] + "/" + in.Name
				prev, wasAsked := asked[key]
				switch {
				case jobs.Active(in.Status) && !wasAsked:
					// A job submitted meanwhile is asked too.
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					err := c.Stop(ctx, in.Name, false)
					if err != nil {
						// A PENDING job ends at once when asked: the
						// error may be the stop having taken.
						if now, gerr := c.Get(ctx, in.Name); gerr == nil && !jobs.Active(now.Status) {
							err = nil
						}
					}
					cancel()
					if err != nil {
						fmt.Fprintf(stderr, "rlnode stop: job %s (%s): %v\n", in.Name, in.Status, err)
					} else {
						what := "after its current step, which it checkpoints"
						if in.Status == jobs.Pending {
							what = "(it waits for room: no step to finish)"
						}
						fmt.Fprintf(stdout, "job %s (%s): asked to stop %s (no node outside those stopping runs jobs)\n", in.Name, in.Status, what)
					}
					asked[key] = in
					active = append(active, in.Name)
				case jobs.Active(in.Status):
					active = append(active, in.Name)
				case wasAsked && jobs.Active(prev.Status):
					asked[key] = in
					fmt.Fprintf(stdout, "job %s %s: %s\n", in.Name, in.Status, printable(in.Cause))
					if in.Status == jobs.Stopped && filepath.IsAbs(in.Out) {
						fmt.Fprintf(stdout, "  continue it on a cluster with: rlnode submit %s --resume --out %s\n", shellQuote(filepath.Join(in.Out, jobs.RecipeFile)), shellQuote(in.Out))
					}
				}
			}
		}
		clusters, asking = dropEmpty(clusters, asking)
		if len(active) == 0 {
			return true
		}
		if !time.Now().Before(deadline) {
			sort.Strings(active)
			fmt.Fprintf(stderr, "rlnode stop: jobs still running after %s, stopped with their nodes (each may lose its current step, and continues from its newest checkpoint with rlnode submit OUT/%s --resume --out OUT): %s\n",
				timeout, jobs.RecipeFile, strings.Join(active, ", "))
			return false
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// dropEmpty leaves out the clusters whose job list could not be read
// (a zero Client), with the node each was asked through.
func dropEmpty(cs []jobs.Client, via []string) ([]jobs.Client, []string) {
	var keptC []jobs.Client
	var keptV []string
	for i, c := range cs {
		if c.Control != "" {
			keptC, keptV = append(keptC, c), append(keptV, via[i])
		}
	}
	return keptC, keptV
}
