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
	var ask cluster.RunInfo
	leaving := map[string]bool{}
	for _, ri := range stopping {
		leaving[ri.NodeID] = true
		if ask.Token == "" && ri.Token != "" {
			ask = ri
		}
	}
	if ask.Token == "" {
		return true // no node whose job routes this host may use
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	st, err := cluster.FetchStatus(ctx, ask.Control)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "rlnode stop: node %s: its cluster's nodes: %v (its jobs are not asked to stop first)\n", ask.NodeID, err)
		return true
	}
	for _, n := range st.Nodes {
		if n.Labels[jobs.Label] == "yes" && !leaving[n.ID] { // as a job's placement asks
			return true // node n takes the jobs over
		}
	}
	c := jobs.Client{Control: ask.Control, Token: ask.Token}
	asked := map[string]jobs.Info{}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := c.List(ctx)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "rlnode stop: node %s: the cluster's jobs: %v (they are not asked to stop first)\n", ask.NodeID, err)
			return true
		}
		var active []string
		for _, in := range list {
			prev, wasAsked := asked[in.Name]
			switch {
			case jobs.Active(in.Status) && !wasAsked:
				// A job submitted meanwhile is asked too.
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := c.Stop(ctx, in.Name, false)
				cancel()
				if err != nil {
					fmt.Fprintf(stderr, "rlnode stop: job %s (%s): %v\n", in.Name, in.Status, err)
				} else {
					fmt.Fprintf(stdout, "job %s (%s): asked to stop after its current step, which it checkpoints (no node outside those stopping runs jobs)\n", in.Name, in.Status)
				}
				asked[in.Name] = in
				active = append(active, in.Name)
			case jobs.Active(in.Status):
				active = append(active, in.Name)
			case wasAsked && jobs.Active(prev.Status):
				asked[in.Name] = in
				fmt.Fprintf(stdout, "job %s %s: %s\n", in.Name, in.Status, printable(in.Cause))
				if in.Status == jobs.Stopped && filepath.IsAbs(in.Out) {
					fmt.Fprintf(stdout, "  continue it on a cluster with: rlnode submit %s --resume --out %s\n", shellQuote(filepath.Join(in.Out, jobs.RecipeFile)), shellQuote(in.Out))
				}
			}
		}
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
