package main

import (
	"flag"
	"io"
	"testing"

	"github.com/rlnode/rlnode/jobs"
)

// The command a stopped run prints to continue it repeats its flags as a
// user writes them: a boolean flag given is "--driver-only", not
// "--driver-only=true"; one given false keeps "=false", as "--driver-only
// false" would end the flags.
func TestResumeCommandFlags(t *testing.T) {
	t.Setenv(jobs.EnvJob, "")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--address", "127.0.0.1:7946", "--driver-only"}, "rlnode run /r/recipe.yaml --out /r --resume --address 127.0.0.1:7946 --driver-only"},
		{[]string{"--driver-only=false"}, "rlnode run /r/recipe.yaml --out /r --resume --driver-only=false"},
		{nil, "rlnode run /r/recipe.yaml --out /r --resume"},
	} {
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		fs.String("address", "", "")
		fs.Bool("driver-only", false, "")
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if got := resumeCommand(fs, "/r"); got != c.want {
			t.Errorf("%v:\n got %s\nwant %s", c.args, got, c.want)
		}
	}
}
