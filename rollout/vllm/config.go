package vllm

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// WeightUpdate names a route by which a vLLM server reloads its weights
// from a checkpoint directory (ReloadWeights). Both need the server
// started with VLLM_SERVER_DEV_MODE=1.
type WeightUpdate string

const (
	// WeightUpdateAuto asks each server once, at its first reload, whether
	// it offers the disk weight-transfer backend, and uses
	// WeightUpdateReloadWeights where it does not.
	WeightUpdateAuto WeightUpdate = "auto"
	// WeightUpdateDisk is vLLM's weight-transfer API with the "disk"
	// backend (/start_weight_update, /update_weights {"path"},
	// /finish_weight_update): the server runs with --weight-transfer-config
	// '{"backend": "disk"}', which only a vLLM carrying pull request #52152
	// accepts.
	WeightUpdateDisk WeightUpdate = "disk"
	// WeightUpdateReloadWeights is POST /collective_rpc calling the
	// workers' reload_weights(weights_path=..., is_checkpoint_format=True),
	// then POST /reset_prefix_cache: a stock vLLM's route (one whose
	// reload_weights takes weights_path).
	WeightUpdateReloadWeights WeightUpdate = "reload_weights"
)

// Config says which servers to use and how to talk to them. Zero durations
// and counts take the defaults named on each field.
type Config struct {
	// Servers are the base URLs of the vLLM servers, e.g.
	// "http://10.0.0.5:8000" (no /v1 suffix). At least one.
	Servers []string
	// Model is the served model name requests carry; GET /v1/models of every
	// server must list it. LoadLoRA switches requests to the adapter's name.
	Model string
	// APIKey, when set, is sent as "Authorization: Bearer <key>" (vLLM's
	// --api-key).
	APIKey string
	// MaxInFlight bounds the requests outstanding at one server; default 64.
	MaxInFlight int
	// MaxAttempts is how many times one request is tried (the first try and
	// its retries); default 4.
	MaxAttempts int
	// RetryBase and RetryMax bound the backoff between tries: the wait
	// before try k is uniformly drawn from [d/2, d] with
	// d = min(RetryMax, RetryBase·2^(k-2)); defaults 100 ms and 5 s.
	RetryBase, RetryMax time.Duration
	// RequestTimeout bounds one try of one generation request; default 10 min.
	RequestTimeout time.Duration
	// ControlTimeout bounds one control call (health, models, LoRA and
	// weight-transfer endpoints); default 10 min (loading weights is slow).
	ControlTimeout time.Duration
	// VocabSize, when above 0, is the served model's vocabulary size
	// (config.json's vocab_size): an answer with a token id outside
	// [0, VocabSize) is refused, naming the server, before a learner
	// trains on it.
	VocabSize int
	// WeightVersion is the policy version the servers serve at start.
	WeightVersion int64
	// WeightUpdate is how ReloadWeights makes a server load a checkpoint
	// directory: WeightUpdateAuto (the default) asks each server once which
	// route it offers.
	WeightUpdate WeightUpdate
	// HTTPClient replaces the client's own (for TLS or a proxy). Its Timeout
	// should be 0: the per-call timeouts above bound every call.
	HTTPClient *http.Client
	// Locate, when set, says where server i (in Servers' order) is now:
	// servers rlnode launched, which start again in place when their
	// process ends and on another node, at another URL, when their node
	// is lost (LaunchServers). Every weight update (ReloadWeights,
	// LoadLoRA, and the reload that gives lost servers their weights back)
	// asks it for every server first. A server found at another URL or in
	// another process holds the weights it started with: it counts as lost
	// (no requests) until that update reaches it. A server it cannot find
	// (restarting, or gone for good) sits the update out and gets no
	// requests until a later update finds it; an update that finds none
	// fails. Without Locate a server's URL never changes and every update
	// needs every server.
	Locate func(ctx context.Context, i int) (Location, error)
	// Stage, when set, is the path server i reads folder dir from where
	// Locate said it is Staged (its node does not see dir: a copy on its
	// node, which Stage fetches). Updates stage before they pause
	// generation.
	Stage func(ctx context.Context, i int, dir string) (string, error)
}

// Location is where a server is now (Config.Locate).
type Location struct {
	// URL is its base URL (no /v1).
	URL string
	// Process names its process (node and process id); another one than
	// last time means it started again.
	Process string
	// Staged says its node does not see the folders the client names: each
	// goes through Config.Stage.
	Staged bool
}

// withDefaults checks c and fills its zero fields.
func (c Config) withDefaults() (Config, error) {
	if len(c.Servers) == 0 {
		return c, errors.New("vllm config: Servers is empty: give at least one server URL")
	}
	seen := map[string]bool{}
	servers := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		u, err := url.Parse(s)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return c, fmt.Errorf("vllm config: Servers[%d] = %q: want http://host:port or https://host:port", i, s)
		}
		s = strings.TrimRight(s, "/")
		if strings.HasSuffix(s, "/v1") {
			return c, fmt.Errorf("vllm config: Servers[%d] = %q: give the base URL without /v1", i, c.Servers[i])
		}
		if seen[s] {
			return c, fmt.Errorf("vllm config: Servers[%d] = %q is listed twice", i, s)
		}
		seen[s] = true
		servers[i] = s
	}
	c.Servers = servers
	if c.Model == "" {
		return c, errors.New("vllm config: Model is empty: name the served model (GET /v1/models lists them)")
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxInFlight", &c.MaxInFlight, 64}, {"MaxAttempts", &c.MaxAttempts, 4}, {"VocabSize", &c.VocabSize, 0}} {
		if *f.v < 0 {
			return c, fmt.Errorf("vllm config: %s = %d is negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{
		{"RetryBase", &c.RetryBase, 100 * time.Millisecond},
		{"RetryMax", &c.RetryMax, 5 * time.Second},
		{"RequestTimeout", &c.RequestTimeout, 10 * time.Minute},
		{"ControlTimeout", &c.ControlTimeout, 10 * time.Minute},
	} {
		if *f.v < 0 {
			return c, fmt.Errorf("vllm config: %s = %v is negative", f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	switch c.WeightUpdate {
	case "":
		c.WeightUpdate = WeightUpdateAuto
	case WeightUpdateAuto, WeightUpdateDisk, WeightUpdateReloadWeights:
	default:
		return c, fmt.Errorf("vllm config: WeightUpdate %q: want %q, %q or %q",
			c.WeightUpdate, WeightUpdateAuto, WeightUpdateDisk, WeightUpdateReloadWeights)
	}
	if c.RetryMax < c.RetryBase {
		return c, fmt.Errorf("vllm config: RetryMax %v is below RetryBase %v", c.RetryMax, c.RetryBase)
	}
	return c, nil
}
