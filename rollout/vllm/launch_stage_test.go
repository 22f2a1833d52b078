package vllm

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rlnode/rlnode/cluster"
	"github.com/rlnode/rlnode/learner"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/vllm/vllmtest"
)

// dirHashes is the SHA-256 of each file in dir, by name.
func dirHashes(t *testing.T, dir string) map[string]string {
	t.Helper()
	h, err := vllmtest.FolderHashes(dir)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// A launched server whose node does not see the run folder (no probe
// file there) serves a copy of the model fetched onto its node and loads
// each version from a copy too, the same bytes, keeping the newest two;
// its copies go when it stops. One whose node sees the run folder serves
// and loads the folders themselves.
func TestLaunchedServerStagesFolders(t *testing.T) {
	fake := vllmtest.BuildFakeVLLM(t)
	for _, shared := range []bool{true, false} {
		t.Run(fmt.Sprint("shared=", shared), func(t *testing.T) {
			rec, home := t.TempDir(), t.TempDir()
			t.Setenv("FAKEVLLM_RECORD", rec)
			t.Setenv("FAKEVLLM_READ_FILES", "1")
			t.Setenv("RLNODE_HOME", home)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			node := launchNode(t)
			if err := OfferServers([]string{fake, "serve"}); err != nil {
				t.Fatal(err)
			}
			root := t.TempDir()
			model, weights := filepath.Join(root, "model"), filepath.Join(root, "vllm-weights")
			if err := os.MkdirAll(model, 0o755); err != nil {
				t.Fatal(err)
			}
			for name, body := range map[string]string{"config.json": `{"vocab_size": 152000}`, "tokenizer.json": `{"model": {}}`} {
				if err := os.WriteFile(filepath.Join(model, name), []byte(body), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			probe := ".shared-check-test"
			if shared {
				if err := os.WriteFile(filepath.Join(root, probe), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			folders, err := learner.ServeFolders(node.System(), "test-folders")
			if err != nil {
				t.Fatal(err)
			}
			defer folders.Close()
			folders.Allow(model)
			folders.AllowUnder(weights)
			args := LaunchArgs{Model: model, ServedName: "policy", Folders: &learner.Folders{Server: folders.Ref(), RunDir: root, Probe: probe}}
			l, err := LaunchServers(ctx, node, "staged", Launch{Servers: 1, LaunchArgs: args})
			if err != nil {
				t.Fatal(err)
			}
			defer l.Stop(context.Background())
			staging := filepath.Join(home, "staging")
			under := func(p string) bool { return strings.HasPrefix(p, staging+string(filepath.Separator)) }
			recs := vllmtest.FakeRecords(t, rec)
			if len(recs) != 1 {
				t.Fatalf("%d servers recorded, want 1", len(recs))
			}
			if r := recs[0]; shared && r.Model != model || !shared && !under(r.Model) {
				t.Errorf("server serves %s (shared %v, staging under %s)", r.Model, shared, staging)
			}
			if rec, _ := node.Record("staged-0"); shared == strings.Contains(rec.Note, "a copy of the model in "+staging) {
				t.Errorf("server's note %q (shared %v)", rec.Note, shared)
			}
			if !maps.Equal(recs[0].ModelFiles, dirHashes(t, model)) {
				t.Errorf("served model files %v, want %v", recs[0].ModelFiles, dirHashes(t, model))
			}
			c, err := New(ctx, Config{Servers: l.URLs, Model: "policy", APIKey: l.APIKey, Locate: l.Locate, Stage: l.Stage})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for v := 1; v <= 4; v++ {
				dir := filepath.Join(weights, fmt.Sprintf("step-%d", v))
				w, _ := safetensors.FromFloat32("w", safetensors.F32, []int{2}, []float32{float32(v), -float32(v)})
				if err := os.MkdirAll(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := safetensors.WriteCheckpoint(dir, []safetensors.Tensor{w}, 0); err != nil {
					t.Fatal(err)
				}
				if err := c.ReloadWeights(ctx, dir, int64(v)); err != nil {
					t.Fatalf("version %d: %v", v, err)
				}
				ev := vllmtest.FakeEvents(t, rec, recs[0].Port)
				last := ev[len(ev)-1]
				switch {
				case last.Op != "reload":
					t.Fatalf("version %d: last event %+v, want a reload", v, last)
				case shared && last.Path != dir, !shared && !under(last.Path):
					t.Errorf("version %d loaded from %s (shared %v)", v, last.Path, shared)
				case !maps.Equal(last.Files, dirHashes(t, dir)):
					t.Errorf("version %d: loaded files %v, want %v", v, last.Files, dirHashes(t, dir))
				case !shared && last.Siblings != min(v, keepStaged)+1:
					t.Errorf("version %d: %d folders staged beside it, want the model and the newest %d versions", v, last.Siblings, min(v, keepStaged))
				}
			}
			if _, err := c.Generate(ctx, requests(2, "s")); err != nil {
				t.Fatal(err)
			}

			// Its process dies: it starts again in place, on the copy it
			// had; the next reload finds the new process and reaches it.
			if err := syscall.Kill(recs[0].PID, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			var again vllmtest.FakeRecord
			for again.PID == 0 || again.PID == recs[0].PID {
				if ctx.Err() != nil {
					t.Fatal("the killed server was not started again")
				}
				time.Sleep(20 * time.Millisecond)
				again = vllmtest.FakeRecords(t, rec)[0]
			}
			if again.Model != recs[0].Model {
				t.Errorf("restarted in place on %s, want the model it had, %s", again.Model, recs[0].Model)
			}
			for rec, _ := node.Record("staged-0"); rec.State != cluster.Alive; rec, _ = node.Record("staged-0") {
				if ctx.Err() != nil {
					t.Fatalf("server is %s", rec.State)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := c.ReloadWeights(ctx, filepath.Join(weights, "step-4"), 5); err != nil {
				t.Fatalf("reload after a restart in place: %v", err)
			}
			if st := c.Servers()[0]; st.Lost != "" || st.WeightVersion != 5 {
				t.Errorf("after the reload: %+v", st)
			}
			if ev := vllmtest.FakeEvents(t, rec, again.Port); ev[len(ev)-1].Op != "reload" || ev[len(ev)-1].Version != "5" {
				t.Errorf("restarted server's last event %+v, want the reload of version 5", ev[len(ev)-1])
			}
			if _, err := c.Generate(ctx, requests(2, "r")); err != nil {
				t.Fatal(err)
			}
			l.Stop(ctx)
			if ents, _ := os.ReadDir(staging); len(ents) != 0 {
				t.Errorf("staging left after the server stopped: %v", ents)
			}
		})
	}
}
