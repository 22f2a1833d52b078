package cluster

import (
	"context"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/rlnode/rlnode/actor"
)

// A GPU in a request is bound to devices, not only counted: the node's
// ledger gives each holder (actor, placement-group bundle, task) shares
// of particular devices, so two holders of one GPU each on a two-GPU node
// get different devices. TaskGPUs and ActorGPUs say which.

// gpuShare is an amount (at most 1) of one device, by its position in the
// node's GPU list.
type gpuShare struct {
	dev    int
	amount float64
}

// assignGPUs picks shares of the devices whose free amounts are free for
// a request of amount GPUs: floor(amount) whole free devices, lowest
// first, and the fraction left on one other device, the fullest that
// fits (so fractions pack onto few devices, as Ray's do). It reports
// false when no such choice exists, though the sum of free may cover
// amount (two halves free on two devices do not make one device).
// Placement is pure: it changes nothing.
func assignGPUs(free []float64, amount float64) ([]gpuShare, bool) {
	if amount <= 0 {
		return nil, true
	}
	const eps = 1e-9
	whole := int(math.Floor(amount + eps))
	frac := amount - float64(whole)
	if frac < eps {
		frac = 0
	}
	var out []gpuShare
	taken := map[int]bool{}
	for d := 0; d < len(free) && len(out) < whole; d++ {
		if free[d] >= 1-eps {
			out = append(out, gpuShare{dev: d, amount: 1})
			taken[d] = true
		}
	}
	if len(out) < whole {
		return nil, false
	}
	if frac > 0 {
		best := -1
		for d := range free {
			if taken[d] || free[d] < frac-eps {
				continue
			}
			if best < 0 || free[d] < free[best]-eps {
				best = d
			}
		}
		if best < 0 {
			return nil, false
		}
		out = append(out, gpuShare{dev: best, amount: frac})
	}
	return out, true
}

// takeGPUs subtracts shares from free; giveGPUs adds them back.
func takeGPUs(free []float64, s []gpuShare) {
	for _, g := range s {
		free[g.dev] -= g.amount
	}
}

func giveGPUs(free []float64, s []gpuShare) {
	for _, g := range s {
		free[g.dev] += g.amount
	}
}

// fmtGPUFree formats each device's free amount for errors: "0:0.5 1:0".
func fmtGPUFree(ids []int, free []float64) string {
	parts := make([]string, len(free))
	for d, f := range free {
		parts[d] = fmt.Sprintf("%d:%s", ids[d], fmtAmount(GPU, math.Max(f, 0)))
	}
	return strings.Join(parts, " ")
}

// taskGPUsKey carries a running task's devices in its context.
type taskGPUsKey struct{}

// TaskGPUs returns the indices of the GPUs (GPUInfo.Index, as the node
// lists them: nvidia-smi's, or 0..N-1 for declared ones) that the node
// gave the running task ctx belongs to, from its Resources' GPU amount:
// one index per whole GPU, and one for a fraction, shared with other
// holders of fractions of that device. Nil for a task that asked for no
// GPU, and outside a task. Open these devices (cuda:N), not device 0.
func TaskGPUs(ctx context.Context) []int {
	ids, _ := ctx.Value(taskGPUsKey{}).([]int)
	return append([]int(nil), ids...)
}

// ActorGPUs returns the indices of the GPUs (as TaskGPUs) that the node
// hosting the actor ctx belongs to gave it, from its SpawnOptions'
// Resources (in a placement group, from its bundle's devices). A kind's
// factory or Receive calls it with its own Context. Nil for an actor that
// holds no GPU, and for one not spawned through a cluster Node.
func ActorGPUs(ctx *actor.Context) []int {
	n := ActorNode(ctx)
	if n == nil {
		return nil
	}
	return n.ledger.gpusOf(ctx.Self().Name)
}

// deviceIDs are the GPUInfo indices of devs' shares, sorted, once each.
func deviceIDs(ids []int, devs []gpuShare) []int {
	if len(devs) == 0 {
		return nil
	}
	out := make([]int, 0, len(devs))
	for _, g := range devs {
		out = append(out, ids[g.dev])
	}
	sort.Ints(out)
	return out
}

// DeviceFor is the CUDA device a holder of gpus (ActorGPUs, TaskGPUs)
// opens when asked for device ("cuda" or "cuda-bf16", with no index): the
// first GPU it was given, as "cuda:N" ("cuda-bf16:N"). Any other device,
// one with an index (the recipe's choice stands), and a holder given no
// GPU keep device as it is.
func DeviceFor(device string, gpus []int) string {
	if len(gpus) == 0 || (device != "cuda" && device != "cuda-bf16") {
		return device
	}
	return fmt.Sprintf("%s:%d", device, gpus[0])
}
