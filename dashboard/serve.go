package dashboard

import (
	"context"
	"crypto/subtle"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rlnode/rlnode/internal/connlimit"
	"github.com/rlnode/rlnode/internal/httphost"
)

//go:embed web
var webFiles embed.FS

// Config says what a dashboard shows and who may see it.
type Config struct {
	// Cluster answers the cluster page; nil: the page says there is no
	// cluster to show.
	Cluster StatusSource
	// RunDirs are the folders searched for runs (each a run folder or
	// holding run folders up to two levels down).
	RunDirs []string
	// TraceDirs are trace stores shown besides each run's traces/ folder.
	TraceDirs []string
	// Token is the control endpoint's token. Requests must carry it
	// (?token= once, then a cookie; or Authorization: Bearer) when the
	// dashboard listens beyond loopback; Serve refuses such an address
	// without one.
	Token string
	// PollEvery is how often the cluster's status is asked (default 1s).
	PollEvery time.Duration
	// Log takes warnings about what clients sent (connections over the
	// cap per address); nil: none are logged.
	Log *slog.Logger
	// ConnsPerAddr caps the connections one address (an IPv6 one with its
	// /64) may hold open; 0: DefaultConnsPerAddr.
	ConnsPerAddr int
}

// DefaultConnsPerAddr caps the connections one address may hold open on
// the dashboard, which may share its process (and descriptors) with a
// node, unless Config says otherwise.
const DefaultConnsPerAddr = 32

// Server is a running dashboard.
type Server struct {
	URL  string // http://HOST:PORT/
	stop func()
}

// Close stops serving and polling.
func (s *Server) Close() { s.stop() }

// Serve listens on addr and serves the dashboard until Close. An address
// beyond loopback needs cfg.Token.
func Serve(addr string, cfg Config) (*Server, error) {
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		// net.Listen's error names the address, unless it could not parse it.
		if op := (*net.OpError)(nil); errors.As(err, &op) && op.Addr != nil {
			return nil, err
		}
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	bound := lis.Addr().String()
	loopback := false
	if ap, err := netip.ParseAddrPort(bound); err == nil {
		loopback = ap.Addr().IsLoopback()
	}
	if !loopback && cfg.Token == "" {
		lis.Close()
		return nil, fmt.Errorf("%s is beyond loopback and no control token is at hand (the dashboard asks the token of a node running on this host, in its .token file): bind 127.0.0.1, or start a node first", bound)
	}
	if loopback {
		cfg.Token = ""
	}
	ctx, cancel := context.WithCancel(context.Background())
	h := newHandler(ctx, cfg, !loopback)
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 30 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
	perAddr := cfg.ConnsPerAddr
	if perAddr <= 0 {
		perAddr = DefaultConnsPerAddr
	}
	capped := connlimit.Limit(lis, perAddr)
	if cfg.Log != nil {
		capped.LogRefused(cfg.Log, "dashboard: refusing a connection")
	}
	go func() { _ = srv.Serve(capped) }()
	stop := func() {
		cancel()
		sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer scancel()
		if srv.Shutdown(sctx) != nil {
			_ = srv.Close()
		}
	}
	return &Server{URL: "http://" + bound + "/", stop: stop}, nil
}

// Handler serves the dashboard's pages and API; it polls cfg.Cluster
// until ctx ends. namesOK lets requests name the host by DNS name (an
// address beyond loopback); on loopback only IP addresses and localhost
// are answered, so a page that rebinds its own name to 127.0.0.1 reads
// nothing.
func Handler(ctx context.Context, cfg Config, namesOK bool) http.Handler {
	return newHandler(ctx, cfg, namesOK)
}

type handler struct {
	cfg    Config
	runs   *Runs
	traces *TraceStores
	watch  *clusterWatch
	mux    *http.ServeMux
}

func newHandler(ctx context.Context, cfg Config, namesOK bool) http.Handler {
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = time.Second
	}
	h := &handler{cfg: cfg, runs: NewRuns(cfg.RunDirs), mux: http.NewServeMux()}
	h.traces = NewTraceStores(cfg.TraceDirs, h.runs)
	if cfg.Cluster != nil {
		h.watch = &clusterWatch{src: cfg.Cluster, period: cfg.PollEvery}
		go h.watch.run(ctx)
	}
	static, _ := fs.Sub(webFiles, "web")
	page := func(w http.ResponseWriter, r *http.Request) {
		b, _ := fs.ReadFile(static, "index.html")
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(b)
	}
	// Pages: one document; the script draws the page its path names.
	h.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/cluster", http.StatusFound)
	})
	for _, p := range []string{"/cluster", "/runs", "/traces", "/episodes"} {
		h.mux.HandleFunc("GET "+p, page)
	}
	h.mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(static)))
	h.mux.HandleFunc("GET /api/cluster", h.cluster)
	h.mux.HandleFunc("GET /api/runs", h.runList)
	h.mux.HandleFunc("GET /api/series", h.series)
	h.mux.HandleFunc("GET /api/diff", h.diff)
	h.mux.HandleFunc("GET /api/stores", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"stores": h.traces.List()})
	})
	h.mux.HandleFunc("GET /api/traces", h.traceSearch)
	h.mux.HandleFunc("GET /api/trace", h.traceOne)
	h.mux.HandleFunc("GET /api/episodes", h.episodes)
	return guard(cfg.Token, namesOK, h.mux)
}

const tokenCookie = "rlnode_dashboard"

// guard answers only GET and HEAD (the dashboard is read-only), refuses
// cross-origin requests and, unless namesOK, a Host that is a DNS name
// other than localhost; with a token it wants the token: ?token=T (then
// set as a cookie, and the address bar cleaned by a redirect), the
// cookie, or Authorization: Bearer T.
func guard(token string, namesOK bool, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		setSecurityHeaders(w)
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "dashboard: read-only: "+r.Method+" is not answered", http.StatusMethodNotAllowed)
			return
		}
		if !namesOK && !httphost.ByAddress(r.Host) {
			http.Error(w, "dashboard: refused: Host must be an IP address or localhost", http.StatusForbidden)
			return
		}
		if o := r.Header.Get("Origin"); o != "" && o != "http://"+r.Host {
			http.Error(w, "dashboard: refused: cross-origin request from "+o, http.StatusForbidden)
			return
		}
		if token != "" {
			if q := r.URL.Query().Get("token"); q != "" {
				if !sameToken(q, token) {
					http.Error(w, "dashboard: refused: wrong token", http.StatusUnauthorized)
					return
				}
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: token, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				q := r.URL.Query()
				q.Del("token")
				u := url.URL{Path: r.URL.Path, RawQuery: q.Encode()}
				http.Redirect(w, r, u.String(), http.StatusSeeOther)
				return
			}
			got := ""
			if c, err := r.Cookie(tokenCookie); err == nil {
				got = c.Value
			} else if b, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
				got = b
			}
			if !sameToken(got, token) {
				http.Error(w, "dashboard: this address is beyond loopback: open it once as /?token=TOKEN, TOKEN being the control token of a node on the dashboard's host (the .token file beside its run file in $RLNODE_HOME/run)", http.StatusUnauthorized)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func sameToken(got, want string) bool {
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

func setSecurityHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-store")
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func (h *handler) cluster(w http.ResponseWriter, r *http.Request) {
	if h.watch == nil {
		writeJSON(w, http.StatusOK, ClusterView{Error: "this dashboard watches no cluster", Nodes: []NodeView{}})
		return
	}
	writeJSON(w, http.StatusOK, h.watch.current())
}

// RunList is the runs page's table.
type RunList struct {
	Roots []string `json:"roots"`
	Runs  []Run    `json:"runs"`
}

func (h *handler) runList(w http.ResponseWriter, r *http.Request) {
	now := time.Now()
	dirs := h.runs.Find()
	list := RunList{Roots: h.runs.Roots(), Runs: make([]Run, len(dirs))}
	// Runs are read side by side: a run's metrics endpoint that does not
	// answer costs its own scrape timeout, not every run's.
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, dir := range dirs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			list.Runs[i] = h.runs.Describe(r.Context(), dir, now)
		}()
	}
	wg.Wait()
	writeJSON(w, http.StatusOK, list)
}

// Bounds on a series request.
const (
	defaultPoints = 500
	maxPoints     = 5000
)

// SeriesRun is one run's charts: every metric, decimated.
type SeriesRun struct {
	ID      string            `json:"id"`
	Name    string            `json:"name"`
	Error   string            `json:"error,omitempty"`
	Rows    int               `json:"rows"`
	Metrics map[string]Series `json:"metrics"`
}

// Series is a decimated metric: X the steps, Y the values, Raw how many
// points the metric has (between from and to, when asked) before
// decimation.
type Series struct {
	X   []float64 `json:"x"`
	Y   []float64 `json:"y"`
	Raw int       `json:"raw"`
}

// selectedRuns reads the run= parameters.
func selectedRuns(r *http.Request) ([]string, error) {
	ids := r.URL.Query()["run"]
	if len(ids) == 0 {
		return nil, errors.New("name at least one run: ?run=FOLDER")
	}
	if len(ids) > maxSelectedRuns {
		return nil, fmt.Errorf("%d runs asked; at most %d at once", len(ids), maxSelectedRuns)
	}
	return ids, nil
}

func (h *handler) series(w http.ResponseWriter, r *http.Request) {
	ids, err := selectedRuns(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	q := r.URL.Query()
	points := defaultPoints
	if s := q.Get("points"); s != "" {
		if n, err := strconv.Atoi(s); err == nil && n >= 3 {
			points = min(n, maxPoints)
		}
	}
	smooth := 0.0
	if s := q.Get("smooth"); s != "" {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v >= 0 && v < 1 {
			smooth = v
		}
	}
	from, to := math.Inf(-1), math.Inf(1)
	if v, err := strconv.ParseFloat(q.Get("from"), 64); err == nil && !math.IsNaN(v) {
		from = v
	}
	if v, err := strconv.ParseFloat(q.Get("to"), 64); err == nil && !math.IsNaN(v) {
		to = v
	}
	out := []SeriesRun{}
	for _, id := range ids {
		sr := SeriesRun{ID: id, Name: id, Metrics: map[string]Series{}}
		dir, err := h.runs.Resolve(id)
		if err != nil {
			sr.Error = err.Error()
			out = append(out, sr)
			continue
		}
		sr.Name = runName(dir, readRecipeHead(dir))
		t, err := h.runs.Table(dir)
		if err != nil {
			sr.Error = err.Error()
			out = append(out, sr)
			continue
		}
		sr.Rows = t.Rows()
		for _, k := range t.Keys() {
			if k == "step" {
				continue
			}
			xs, ys := t.Series(k)
			if len(ys) == 0 {
				continue
			}
			// Smoothed over the whole run, then cut to the steps asked.
			xs, ys = stepRange(xs, Smooth(ys, smooth), from, to)
			if len(ys) == 0 {
				continue
			}
			idx := Decimate(xs, ys, points)
			s := Series{X: make([]float64, len(idx)), Y: make([]float64, len(idx)), Raw: len(ys)}
			for i, j := range idx {
				s.X[i], s.Y[i] = xs[j], round(ys[j])
			}
			sr.Metrics[k] = s
		}
		out = append(out, sr)
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": out})
}

// stepRange keeps the points whose step lies in [from, to].
func stepRange(xs, ys []float64, from, to float64) ([]float64, []float64) {
	if math.IsInf(from, -1) && math.IsInf(to, 1) {
		return xs, ys
	}
	var kx, ky []float64
	for i, x := range xs {
		if x >= from && x <= to {
			kx, ky = append(kx, x), append(ky, ys[i])
		}
	}
	return kx, ky
}

// round keeps 7 significant digits: the charts need no more, and the
// response shrinks by half.
func round(v float64) float64 {
	if v == 0 || math.IsNaN(v) || math.IsInf(v, 0) {
		return v
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 7, 64), 64)
	return f
}

func (h *handler) diff(w http.ResponseWriter, r *http.Request) {
	ids, err := selectedRuns(r)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	var recipes [][]byte
	for _, id := range ids {
		dir, err := h.runs.Resolve(id)
		if err == nil {
			var b []byte
			if b, err = Recipe(dir); err == nil {
				recipes = append(recipes, b)
				continue
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"error": err.Error(), "rows": []DiffRow{}})
		return
	}
	rows, err := RecipeDiff(recipes)
	if err != nil {
		writeJSON(w, http.StatusOK, map[string]any{"error": err.Error(), "rows": []DiffRow{}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": ids, "rows": rows})
}
