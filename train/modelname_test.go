package train

import "testing"

// A run's traces name a policy started from a Hugging Face cache snapshot
// by its hub id, any other checkpoint by its folder.
func TestCheckpointName(t *testing.T) {
	for _, c := range []struct{ dir, want string }{
		{"/root/.cache/huggingface/hub/models--Qwen--Qwen2.5-0.5B-Instruct/snapshots/7ae557604adf67be50417f59c2c2f167def9a775", "Qwen/Qwen2.5-0.5B-Instruct"},
		{"/hf/models--org--name--v2/snapshots/abc/", "org/name--v2"},
		{"runs/quickstart-1/checkpoints/step-1500", "runs/quickstart-1/checkpoints/step-1500"},
		{"/data/snapshots/abc", "/data/snapshots/abc"},
		{"/hf/models--noname/snapshots/abc", "/hf/models--noname/snapshots/abc"},
		{"/hf/models----x/snapshots/abc", "/hf/models----x/snapshots/abc"},
	} {
		if got := checkpointName(c.dir); got != c.want {
			t.Errorf("checkpointName(%q) = %q, want %q", c.dir, got, c.want)
		}
	}
}
