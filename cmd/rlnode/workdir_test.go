package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rlnode/rlnode/jobs"
)

// A host without a node submits a recipe whose dataset only it has, with
// --working-dir: the folder travels to the node (once), is unpacked into
// the run folder, and the recipe's relative paths resolve there.
func TestSubmitWorkingDir(t *testing.T) {
	home, laptop, work := t.TempDir(), t.TempDir(), t.TempDir()
	head, url, key, _ := remoteHead(t, home, work, laptop)
	proj := filepath.Join(laptop, "proj")
	var rows strings.Builder
	for i := range 32 {
		fmt.Fprintf(&rows, "{\"prompt\": \"%d+%d\", \"answer\": \"%d\"}\n", i%7, i%5, i%7+i%5)
	}
	for p, body := range map[string]string{
		"recipes/mine.yaml": "name: mine\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: ../data/train.jsonl}}\neval: {held_out: 4}\n",
		"data/train.jsonl":  rows.String(),
		".git/HEAD":         "ref: refs/heads/main\n",
		"big/blob.bin":      strings.Repeat("b", 1<<16),
	} {
		full := filepath.Join(proj, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	status := func(name string) jobs.Info {
		t.Helper()
		st, errOut, code := runRlnode(t, laptop, "job", "status", name, "--json", "--address", url, "--key-file", key)
		var in jobs.Info
		if err := json.Unmarshal([]byte(st), &in); code != 0 || err != nil {
			t.Fatalf("job status %s: exit %d, %v\n%s%s", name, code, err, st, errOut)
		}
		return in
	}
	trainPath := func(out string) string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(out, "recipe.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "train: "); ok {
				return v
			}
		}
		t.Fatalf("no train: line in %s/recipe.yaml:\n%s", out, b)
		return ""
	}

	// The recipe inside the folder: its relative paths from its own
	// folder's copy, as they read here.
	args := append([]string{"submit", filepath.Join(proj, "recipes", "mine.yaml"), "--working-dir", proj, "--exclude", "big", "--name", "wd1", "--address", url, "--key-file", key}, deterministicRun(2)...)
	out, errOut, code := runRlnode(t, laptop, args...)
	if code != 0 || !strings.Contains(out, "job wd1 SUCCEEDED") || !strings.Contains(out, "sent to node at ") || !strings.Contains(out, "2 files") {
		t.Fatalf("submit --working-dir: exit %d\n%s%s", code, out, errOut)
	}
	in := status("wd1")
	wd := filepath.Join(in.Out, jobs.WorkingDirFolder)
	if got := trainPath(in.Out); got != filepath.Join(wd, "data", "train.jsonl") {
		t.Errorf("the run read its dataset from %s, want the working dir's copy in %s", got, wd)
	}
	if b, err := os.ReadFile(filepath.Join(wd, "data", "train.jsonl")); err != nil || string(b) != rows.String() {
		t.Errorf("the dataset's copy: %v", err)
	}
	for _, gone := range []string{".git", "big"} {
		if _, err := os.Stat(filepath.Join(wd, gone)); err == nil {
			t.Errorf("%s travelled with the working dir", gone)
		}
	}
	if _, err := os.Stat(filepath.Join(in.Out, "checkpoints", "step-4")); err != nil {
		t.Errorf("the run's last checkpoint: %v", err)
	}

	// A recipe outside the folder, with a --set path: both from the
	// working dir's root. The same folder is not sent again.
	outside := filepath.Join(laptop, "outside.yaml")
	if err := os.WriteFile(outside, []byte("name: outside\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: missing-here.jsonl}}\neval: {held_out: 4}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args = append([]string{"submit", outside, "--working-dir", proj, "--exclude", "big", "--name", "wd2", "--address", url, "--key-file", key,
		"--set", "data.dataset.train=data/train.jsonl"}, deterministicRun(2)...)
	out, errOut, code = runRlnode(t, laptop, args...)
	if code != 0 || !strings.Contains(out, "job wd2 SUCCEEDED") || !strings.Contains(out, "holds it already") || strings.Contains(out, "sent to node") {
		t.Fatalf("submit of the same working dir again: exit %d\n%s%s", code, out, errOut)
	}
	in = status("wd2")
	if got := trainPath(in.Out); got != filepath.Join(in.Out, jobs.WorkingDirFolder, "data", "train.jsonl") {
		t.Errorf("a --set path resolved to %s, want the working dir's copy", got)
	}

	// Through a node on this host (its token), into a folder given.
	mineOut := filepath.Join(work, "local-run")
	args = append([]string{"submit", filepath.Join(proj, "recipes", "mine.yaml"), "--working-dir", proj, "--name", "wd3", "--out", mineOut, "--address", head.gossip}, deterministicRun(2)...)
	out, errOut, code = runRlnode(t, home, args...)
	if code != 0 || !strings.Contains(out, "job wd3 SUCCEEDED") || !strings.Contains(out, "3 files") {
		t.Fatalf("submit --working-dir through a node on this host: exit %d\n%s%s", code, out, errOut)
	}
	if got := trainPath(mineOut); got != filepath.Join(mineOut, jobs.WorkingDirFolder, "data", "train.jsonl") {
		t.Errorf("local submit: dataset %s", got)
	}

	// Refusals, each before anything runs.
	if err := os.Symlink("/etc/passwd", filepath.Join(proj, "passwd")); err != nil {
		t.Fatal(err)
	}
	broken := filepath.Join(laptop, "broken.yaml")
	if err := os.WriteFile(broken, []byte("name: broken\nmodels: {policy: {init: {}}}\ndata: {dataset: {train: data/nope.jsonl}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	refusals := []struct {
		args []string
		code int
		want string
	}{
		{[]string{"submit", outside, "--working-dir", proj, "--address", url, "--key-file", key, "--set", "data.dataset.train=data/train.jsonl"}, 1, "passwd: a symbolic link to /etc/passwd, out of the folder"},
		{[]string{"submit", broken, "--working-dir", proj, "--exclude", "passwd", "--address", url, "--key-file", key}, 1, broken + ":3: data.dataset.train"},
		{[]string{"submit", outside, "--working-dir", proj, "--exclude", "passwd", "--address", url, "--key-file", key, "--set", "data.dataset.train=data/train.jsonl", "--out", in.Out}, 1, "is not empty"},
		{[]string{"submit", outside, "--working-dir", proj, "--resume", "--out", in.Out, "--address", url, "--key-file", key}, 2, "a run continues with the working dir its folder holds"},
		{[]string{"submit", outside, "--exclude", "big", "--address", url, "--key-file", key}, 2, "--exclude is for --working-dir"},
		{[]string{"submit", outside, "--working-dir", filepath.Join(proj, "data", "train.jsonl"), "--address", url, "--key-file", key}, 1, "not a folder"},
	}
	for _, r := range refusals {
		out, errOut, code := runRlnode(t, laptop, r.args...)
		if code != r.code || !strings.Contains(errOut, r.want) {
			t.Errorf("rlnode %v: exit %d, want %d saying %q\n%s%s", r.args, code, r.code, r.want, out, errOut)
		}
	}
	list, errOut, code := runRlnode(t, laptop, "job", "list", "--json", "--address", url, "--key-file", key)
	if code != 0 || strings.Count(list, `"name"`) != 3 {
		t.Errorf("the refused submits left jobs: exit %d\n%s%s", code, list, errOut)
	}

	// Ended jobs are deleted, by name or all at once; their folders stay.
	out, errOut, code = runRlnode(t, laptop, "job", "delete", "wd1", "--address", url, "--key-file", key)
	if code != 0 || !strings.Contains(out, "job wd1 (SUCCEEDED) deleted; its run folder "+filepath.Dir(wd)+" stays") {
		t.Errorf("job delete wd1: exit %d\n%s%s", code, out, errOut)
	}
	if _, err := os.Stat(wd); err != nil {
		t.Errorf("the deleted job's working dir: %v", err)
	}
	out, errOut, code = runRlnode(t, laptop, "job", "delete", "wd1", "--address", url, "--key-file", key)
	if code != 1 || !strings.Contains(errOut, "wd1: job wd1: no such job") {
		t.Errorf("deleting wd1 again: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = runRlnode(t, laptop, "job", "delete", "--ended", "--address", url, "--key-file", key)
	if code != 0 || !strings.Contains(out, "job wd2 (SUCCEEDED) deleted") || !strings.Contains(out, "job wd3 (SUCCEEDED) deleted") {
		t.Errorf("job delete --ended: exit %d\n%s%s", code, out, errOut)
	}
	if list, errOut, code := runRlnode(t, laptop, "job", "list", "--json", "--address", url, "--key-file", key); code != 0 || strings.TrimSpace(list) != "[]" {
		t.Errorf("jobs left after deleting every ended one: exit %d\n%s%s", code, list, errOut)
	}
}
