package vllm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"

	"github.com/rlnode/rlnode/internal/ctxio"
)

// Servers that move (Config.Locate): a launched server starts again in
// place when its process ends, and on another node, at another URL, when
// its node is lost. Each weight update first finds every server; the ones
// found take part, the others sit it out, lost, and get no requests.

// located asks Config.Locate for every server and returns those found,
// in index order; without Locate, every server. A server found at another
// URL or in another process is marked lost (relocate); one not found is
// marked lost and missing. None found is an error naming each server and
// why.
func (c *Client) located(ctx context.Context) ([]*server, error) {
	if c.cfg.Locate == nil {
		return c.servers, nil
	}
	found := make([]bool, len(c.servers))
	errs := make([]error, len(c.servers))
	var wg sync.WaitGroup
	for i, s := range c.servers {
		wg.Go(func() {
			loc, err := c.cfg.Locate(ctx, s.index)
			if err == nil {
				err = checkLocation(loc)
			}
			if err == nil && c.stillGone(s, loc) {
				// The process that gave no answer at the last update is
				// still where Locate says: it counts once it answers.
				if _, herr := c.control(ctx, s, http.MethodGet, "/health", nil); herr != nil {
					err = fmt.Errorf("no answer at %s: %w", loc.URL, herr)
				}
			}
			if err != nil {
				errs[i] = fmt.Errorf("vllm server %d (last at %s): %w", s.index, c.urlOf(s), err)
				c.notFound(s, err)
				return
			}
			c.relocate(s, loc)
			found[i] = true
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var out []*server
	for i, s := range c.servers {
		if found[i] {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("vllm: no server to update: %w", errors.Join(errs...))
	}
	return out, nil
}

// checkLocation refuses a Location that is no base URL.
func checkLocation(loc Location) error {
	if !strings.HasPrefix(loc.URL, "http://") && !strings.HasPrefix(loc.URL, "https://") || strings.HasSuffix(loc.URL, "/v1") {
		return fmt.Errorf("located at %q: want a base URL, http://host:port", loc.URL)
	}
	return nil
}

// stillGone reports whether loc is where s gave no answer at the last
// update (eachFound).
func (c *Client) stillGone(s *server, loc Location) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.goneAt != "" && s.goneAt == strings.TrimRight(loc.URL, "/")+" "+loc.Process
}

// notFound records that Locate did not find s: it gets no requests until
// an update finds it and reaches it.
func (c *Client) notFound(s *server, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.missing = err.Error()
	if s.lost == "" {
		s.lost = "not found: " + err.Error()
	}
	c.wakeLocked()
}

// relocate records where s is now. A server at another URL, or in another
// process than the one last found, started again: it holds the weights it
// started with and whatever route it offers now.
func (c *Client) relocate(s *server, loc Location) {
	c.mu.Lock()
	defer c.mu.Unlock()
	s.missing, s.goneAt = "", ""
	s.staged = loc.Staged
	url := strings.TrimRight(loc.URL, "/")
	moved := url != s.url
	restarted := s.process != "" && loc.Process != s.process
	first := s.process == ""
	s.process = loc.Process
	if !moved && (!restarted || first) {
		return
	}
	why := fmt.Sprintf("started again as process %s", loc.Process)
	if moved {
		why = fmt.Sprintf("moved from %s to %s (process %s)", s.url, url, loc.Process)
	}
	s.url = url
	s.lost = why
	s.lora = ""
	if c.cfg.WeightUpdate == WeightUpdateAuto {
		s.route, s.noDisk, s.diskReady = "", "", false
	} else if s.route == WeightUpdateDisk {
		s.diskReady = false
	}
	c.wakeLocked()
}

// awaitLocated waits, within parent and ControlTimeout (each attempt
// included), until Locate finds a server that answers /health.
func (c *Client) awaitLocated(parent context.Context) error {
	ctx, cancel := context.WithTimeout(parent, c.cfg.ControlTimeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		list, err := c.located(ctx)
		if err == nil {
			healthy := 0
			var mu sync.Mutex
			err = c.each(ctx, list, func(ctx context.Context, s *server) error {
				_, err := c.control(ctx, s, http.MethodGet, "/health", nil)
				if err == nil {
					mu.Lock()
					healthy++
					mu.Unlock()
				}
				return err
			})
			if healthy > 0 {
				return nil
			}
		}
		if ctx.Err() == nil {
			_ = ctxio.Sleep(ctx, backoff(c.cfg.RetryBase, c.cfg.RetryMax, attempt+1))
		}
		if parent.Err() != nil {
			return parent.Err()
		}
		if ctx.Err() != nil {
			if err == nil {
				err = errors.New("none answered")
			}
			return fmt.Errorf("no server found that answers within %v: %w", c.cfg.ControlTimeout, err)
		}
	}
}

// Stage copies folder dir (absolute) onto the node of each staged server
// Config.Locate finds, through Config.Stage, ahead of the ReloadWeights or
// LoadLoRA of dir: that update then reads the copies made here, where the
// server is still the process that made its copy, and copies only for the
// others. It lets a caller bound the copy apart from the reload: a copy's
// time grows with the folder and the link to the driver; a server's
// reload does not. Without Locate or Stage it does nothing.
func (c *Client) Stage(ctx context.Context, dir string) error {
	if c.cfg.Locate == nil || c.cfg.Stage == nil {
		return nil
	}
	if dir == "" || dir[0] != '/' {
		return fmt.Errorf("vllm: stage %q: not an absolute folder", dir)
	}
	list, err := c.located(ctx)
	if err != nil {
		return fmt.Errorf("vllm: stage %s: %w", dir, err)
	}
	paths, err := c.stagedPaths(ctx, &list, dir)
	c.mu.Lock()
	for s, p := range paths {
		if s.staged {
			s.prestaged = prestage{dir: dir, process: s.process, path: p}
		}
	}
	c.mu.Unlock()
	if err != nil {
		return fmt.Errorf("vllm: stage %s: %w", dir, err)
	}
	return nil
}

// stagedPaths is the path each server of *list reads dir from: dir, or
// for a staged server the copy Config.Stage made on its node (or that
// Stage made before, by the same process). A server
// whose Stage fails with ErrServerMissing (its node lost while it copied)
// sits the update out as eachFound leaves out one that gives no answer.
func (c *Client) stagedPaths(ctx context.Context, list *[]*server, dir string) (map[*server]string, error) {
	paths := make(map[*server]string, len(*list))
	var mu sync.Mutex
	err := c.eachFound(ctx, list, func(ctx context.Context, s *server) error {
		c.mu.Lock()
		staged, pre, process := s.staged, s.prestaged, s.process
		s.prestaged = prestage{}
		c.mu.Unlock()
		p := dir
		switch {
		case staged && pre.dir == dir && pre.process == process:
			p = pre.path
		case staged && c.cfg.Stage != nil:
			var err error
			if p, err = c.cfg.Stage(ctx, s.index, dir); err != nil {
				return &ServerError{Server: c.urlOf(s), Op: "stage " + dir + " on its node", Err: err}
			}
			if p == "" || p[0] != '/' {
				return &ServerError{Server: c.urlOf(s), Op: "stage " + dir + " on its node", Err: fmt.Errorf("staged at %q: not an absolute path", p)}
			}
		}
		mu.Lock()
		paths[s] = p
		mu.Unlock()
		return nil
	})
	return paths, err
}

// eachFound is each for one step of a weight update over *list, the
// servers found for it. With Config.Locate a server whose process is gone
// (no answer: the connection was refused or broke; its node may be lost
// and not yet known as such) is marked not found and left out of *list
// and of the steps after, as one Locate did not find; any other error
// fails the step. None left is an error.
func (c *Client) eachFound(ctx context.Context, list *[]*server, fn func(context.Context, *server) error) error {
	if c.cfg.Locate == nil {
		return c.each(ctx, *list, fn)
	}
	gone := make([]bool, len(*list))
	errs := make([]error, len(*list))
	var wg sync.WaitGroup
	for i, s := range *list {
		wg.Go(func() {
			err := fn(ctx, s)
			if err != nil && ctx.Err() == nil && (noAnswer(err) || errors.Is(err, ErrServerMissing)) {
				c.notFound(s, fmt.Errorf("no answer: %w", err))
				c.mu.Lock()
				s.goneAt = s.url + " " + s.process
				c.mu.Unlock()
				gone[i] = true
			}
			errs[i] = err
		})
	}
	wg.Wait()
	var kept []*server
	var failed []error
	for i, s := range *list {
		switch {
		case gone[i]:
			// left out: sits this update out
		case errs[i] != nil:
			failed = append(failed, errs[i])
			kept = append(kept, s)
		default:
			kept = append(kept, s)
		}
	}
	if len(kept) == 0 {
		return fmt.Errorf("vllm: no server to update: %w", errors.Join(errs...))
	}
	*list = kept
	return errors.Join(failed...)
}

// noAnswer reports whether err is a call that got no answer because the
// connection was refused or broke (not a timeout, not an HTTP answer).
func noAnswer(err error) bool {
	var se *ServerError
	if !errors.As(err, &se) || se.Status != 0 {
		return false
	}
	var op *net.OpError
	return errors.As(err, &op) && !op.Timeout() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}
