package main

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// docCommand is an rlnode command line written in the docs, and where.
type docCommand struct {
	where string // FILE:LINE
	args  []string
}

var (
	codeSpan   = regexp.MustCompile("(?s)`([^`]+)`")
	invocation = regexp.MustCompile(`^(?:go run \./cmd/rlnode|rlnode) `)
)

// readmeCommands are the rlnode commands README.md gives in code blocks
// and inline code; synopses ("[--flag]", "a|b") and bare mentions of a
// subcommand are not commands.
func readmeCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	var cands []docCommand
	add := func(offset int, s string) {
		s = strings.Join(strings.Fields(s), " ")
		s, _, _ = strings.Cut(s, " #")
		if !invocation.MatchString(s) || strings.ContainsAny(s, "[|") {
			return
		}
		s = invocation.ReplaceAllString(s, "")
		args, err := shellWords(s)
		if err != nil {
			t.Errorf("%s:%d: %q: %v", path, lineOf(text, offset), s, err)
			return
		}
		if len(args) < 2 || strings.HasPrefix(args[1], "-") || args[0] == "model" && len(args) < 3 {
			return // a mention of a subcommand or of a flag
		}
		if args[0] == "start" || args[0] == "join" || args[0] == "status" || args[0] == "stop" || args[0] == "serve" || args[0] == "dashboard" {
			return // they serve until stopped: the cluster, serve and dashboard tests run them
		}
		if args[0] == "submit" || args[0] == "job" {
			return // they need a running node: the job tests run them
		}
		cands = append(cands, docCommand{fmt.Sprintf("%s:%d", path, lineOf(text, offset)), args})
	}
	inFence := false
	offset := 0
	var prose strings.Builder
	for _, line := range strings.SplitAfter(text, "\n") {
		if strings.HasPrefix(line, "```") {
			inFence = !inFence
		} else if inFence {
			add(offset, line)
			prose.WriteString(strings.Repeat(" ", len(line)-1) + "\n")
		} else if strings.HasPrefix(line, "| `rlnode") {
			prose.WriteString(strings.Repeat(" ", len(line)-1) + "\n") // the CLI table's synopses
		} else {
			prose.WriteString(line)
		}
		if strings.HasPrefix(line, "```") {
			prose.WriteString(strings.Repeat(" ", len(line)-1) + "\n")
		}
		offset += len(line)
	}
	for _, m := range codeSpan.FindAllStringSubmatchIndex(prose.String(), -1) {
		add(m[2], prose.String()[m[2]:m[3]])
	}
	sort.Slice(cands, func(i, j int) bool { return cands[i].where < cands[j].where })
	return cands
}

// recipeCommands are the rlnode commands in a recipe file's comments: a
// comment line starting with "rlnode", continued by lines ending in "\".
// A comment line that starts with a bare "--set" is an error: it cannot be
// checked.
func recipeCommands(t *testing.T, path string) []docCommand {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []docCommand
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		c, ok := strings.CutPrefix(lines[i], "#")
		c = strings.TrimSpace(c)
		if ok && strings.HasPrefix(c, "--set ") {
			t.Errorf("%s:%d: %q: write the hint as a whole command (rlnode run RECIPE --set ...), so that it can be checked", path, i+1, c)
		}
		if !ok || !strings.HasPrefix(c, "rlnode ") {
			continue
		}
		start := i
		for strings.HasSuffix(c, `\`) && i+1 < len(lines) {
			i++
			next, _ := strings.CutPrefix(lines[i], "#")
			c = strings.TrimSuffix(c, `\`) + " " + strings.TrimSpace(next)
		}
		c, _, _ = strings.Cut(c, " # ")
		args, err := shellWords(strings.TrimPrefix(c, "rlnode "))
		if err != nil {
			t.Errorf("%s:%d: %v", path, start+1, err)
			continue
		}
		out = append(out, docCommand{fmt.Sprintf("%s:%d", path, start+1), args})
	}
	return out
}

func lineOf(text string, offset int) int { return strings.Count(text[:offset], "\n") + 1 }

// shellWords splits s as a shell does for plain words and quotes.
func shellWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		case c == '\'' || c == '"':
			j := strings.IndexByte(s[i+1:], c)
			if j < 0 {
				return nil, fmt.Errorf("unclosed %c", c)
			}
			cur.WriteString(s[i+1 : i+1+j])
			i += j + 1
			inWord = true
		default:
			cur.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}

// Every rlnode command README.md and the built-in recipes' comments give
// works: run commands validate (placeholders replaced by real files), an
// eval command runs on a checkpoint of its recipe's run cut to a few
// steps, and the others run as written.
func TestDocCommandsWork(t *testing.T) {
	cmds := readmeCommands(t, "../../README.md")
	files, err := filepath.Glob("../../recipes/builtin/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no built-in recipes: %v", err)
	}
	for _, f := range files {
		cmds = append(cmds, recipeCommands(t, f)...)
	}
	if len(cmds) < 10 {
		t.Fatalf("found only %d commands in the docs: the extraction is broken", len(cmds))
	}
	home := t.TempDir()
	fixtures := docFixtures(t, home)
	for _, c := range cmds {
		args := make([]string, len(c.args))
		for i, a := range c.args {
			args[i] = fixtures.Replace(a)
		}
		t.Logf("%s: rlnode %s", c.where, shellJoin(c.args))
		switch args[0] {
		case "run":
			validate := append([]string{"recipe", "validate"}, recipeArgs(args[1:])...)
			if _, stderr, code := runRlnode(t, home, validate...); code != 0 {
				t.Errorf("%s: rlnode %s: does not validate (exit %d):\n%s", c.where, shellJoin(c.args), code, stderr)
			}
		case "eval":
			recipe := flagValue(args, "--recipe")
			run := filepath.Join(t.TempDir(), "run")
			cut := append([]string{"run", recipe, "--out", run}, append(tinyMLMT, "--set", "schedule.checkpoint_every=0")...)
			if recipe != "mlmt_math" && recipe != "mlmt_gsm8k" && recipe != "archer_multiturn" {
				cut = append([]string{"run", recipe, "--out", run}, tinyRun...)
			}
			if strings.HasPrefix(recipe, "archer") { // a critic of one small update per step
				cut = append(cut, "--set", "algorithm.archer.critic_updates_per_step=1", "--set", "algorithm.archer.critic_batch_size=8")
			}
			if stdout, stderr, code := runRlnode(t, home, cut...); code != 0 {
				t.Fatalf("%s: rlnode %s: exit %d\n%s%s", c.where, shellJoin(cut), code, stdout, stderr)
			}
			cks, _ := filepath.Glob(filepath.Join(run, "checkpoints", "step-*"))
			if len(cks) == 0 {
				t.Fatalf("%s: the cut run wrote no checkpoint", c.where)
			}
			for i, a := range args {
				args[i] = strings.Replace(a, "RUN/checkpoints/step-N", cks[len(cks)-1], 1)
			}
			args = append(args, "--set", "eval.held_out=4", "--out", filepath.Join(t.TempDir(), "eval.json"))
			fallthrough
		case "env":
			for i, a := range args {
				if a == "--out" && i+1 < len(args) {
					args[i+1] = filepath.Join(t.TempDir(), filepath.Base(args[i+1]))
				}
			}
			fallthrough
		default:
			if stdout, stderr, code := runRlnode(t, home, args...); code != 0 {
				t.Errorf("%s: rlnode %s: exit %d\n%s%s", c.where, shellJoin(c.args), code, stdout, stderr)
			}
		}
	}
}

// recipeArgs are a run's arguments without the flags that only say where
// and how it runs (what recipe validate takes: the recipe and its --set).
func recipeArgs(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "--out", "--address", "--key-file", "--bind", "--metrics-addr":
			i++
		case "--resume", "--overwrite":
		default:
			out = append(out, args[i])
		}
	}
	return out
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// docFixtures makes what the docs' placeholders stand for: PATH a folder
// of dataset files (GSM8K's Parquet columns, MBPP's JSONL), DIR a model
// checkpoint, HOST, NAME and N plain values.
func docFixtures(t *testing.T, home string) *strings.Replacer {
	t.Helper()
	data := t.TempDir()
	rows := [][2]string{}
	for i := 0; i < 40; i++ {
		rows = append(rows, [2]string{fmt.Sprintf("Tom has %d apples and buys %d more. How many now?", i, i+3),
			fmt.Sprintf("%d + %d = %d\n#### %d", i, i+3, 2*i+3, 2*i+3)})
	}
	writeQAParquet(t, filepath.Join(data, "train.parquet"), rows[:30])
	writeQAParquet(t, filepath.Join(data, "test.parquet"), rows[30:])
	mbpp, err := os.ReadFile("../../recipes/builtin/data/mbpp_tiny.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(data, "mbpp.jsonl"), mbpp, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,"max_position_embeddings":512,
		"tie_word_embeddings":true,"torch_dtype":"float32","bos_token_id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(t.TempDir(), "model")
	if _, stderr, code := runRlnode(t, home, "model", "init", "--config", cfg, "--out", model); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	traceID := docTraceStore(t, filepath.Join(data, "traces"))
	writeReadmeRecipe(t, data)
	return strings.NewReplacer("PATH/", data+"/", "=DIR", "="+model, "HOST", "127.0.0.1", "NAME", "policy", "=N", "=2", "TRACE_ID", traceID,
		"my_mlmt.yaml", filepath.Join(data, "my_mlmt.yaml"))
}

func writeQAParquet(t *testing.T, path string, rows [][2]string) {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{{Name: "question", Type: arrow.BinaryTypes.String}, {Name: "answer", Type: arrow.BinaryTypes.String}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for _, r := range rows {
		b.Field(0).(*array.StringBuilder).Append(r[0])
		b.Field(1).(*array.StringBuilder).Append(r[1])
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(sc, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// gitShow matches a docs line that writes an old version of a file,
// `git show REV:PATH > FILE`, for the commands after it to use.
var gitShow = regexp.MustCompile("(?m)^git show ([0-9a-f]{7,40}):(\\S+) > (\\S+)$")

// Every `rlnode run` and `rlnode recipe validate` command in docs/ (but
// cuda.md's, which need a GPU host) validates as written: placeholders
// (=N, =K, a run's own checkpoint) replaced, recipe paths from the repository
// root, and files a `git show REV:PATH > FILE` line writes written so.
func TestDocsRunCommandsValidate(t *testing.T) {
	docs, err := filepath.Glob("../../docs/*.md")
	if err != nil || len(docs) < 5 {
		t.Fatalf("docs: %v", err)
	}
	model := filepath.Join(t.TempDir(), "model")
	cfg := filepath.Join(t.TempDir(), "config.json")
	if err := os.WriteFile(cfg, []byte(`{"architectures":["Qwen2ForCausalLM"],"hidden_size":32,"intermediate_size":64,
		"num_hidden_layers":1,"num_attention_heads":4,"num_key_value_heads":2,"vocab_size":800,"max_position_embeddings":1024,
		"tie_word_embeddings":true,"torch_dtype":"float32","bos_token_id":1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := run(t, "model", "init", "--config", cfg, "--out", model); code != 0 {
		t.Fatalf("model init: exit %d: %s", code, stderr)
	}
	placeholder := regexp.MustCompile(`=[A-Z]$`) // =N, =K: a number the text names
	checkpoint := regexp.MustCompile(`^models\.(\w+)\.path=\w+/checkpoints/step-\d+$`)
	n := 0
	for _, doc := range docs {
		if filepath.Base(doc) == "cuda.md" {
			continue
		}
		text, err := os.ReadFile(doc)
		if err != nil {
			t.Fatal(err)
		}
		shown := map[string]string{}
		for _, m := range gitShow.FindAllStringSubmatch(string(text), -1) {
			out, err := exec.Command("git", "-C", "../..", "show", m[1]+":"+m[2]).Output()
			if err != nil {
				t.Logf("%s: git show %s:%s: %v (a shallow clone?): its commands are not checked", doc, m[1], m[2], err)
				continue
			}
			f := filepath.Join(t.TempDir(), m[3])
			if err := os.WriteFile(f, out, 0o644); err != nil {
				t.Fatal(err)
			}
			shown[m[3]] = f
		}
		for _, c := range readmeCommands(t, doc) {
			var args []string
			switch {
			case c.args[0] == "run":
				args = append([]string{"recipe", "validate"}, recipeArgs(c.args[1:])...)
			case c.args[0] == "recipe" && c.args[1] == "validate" && len(c.args) > 2:
				args = slices.Clone(c.args)
			default:
				continue
			}
			if f, ok := shown[args[2]]; ok {
				args[2] = f
			} else if _, err := os.Stat(filepath.Join("../..", args[2])); err == nil {
				args[2] = filepath.Join("../..", args[2])
			} else if !strings.HasSuffix(args[2], ".yaml") {
				// a built-in name
			} else {
				t.Logf("%s: rlnode %s: %s is written by an earlier step: not checked", c.where, shellJoin(c.args), args[2])
				continue
			}
			for i, a := range args {
				args[i] = placeholder.ReplaceAllString(a, "=2")
				if m := checkpoint.FindStringSubmatch(a); m != nil {
					args[i] = "models." + m[1] + ".path=" + model
				}
			}
			n++
			if code, stdout, stderr := run(t, args...); code != 0 {
				t.Errorf("%s: rlnode %s: does not validate (exit %d):\n%s%s", c.where, shellJoin(c.args), code, stdout, stderr)
			}
		}
	}
	if n < 20 {
		t.Fatalf("found only %d run commands in docs/: the extraction is broken", n)
	}
}
