package data

import (
	"fmt"
	"testing"
)

// benchTurns is a GRPO-sized batch: rows turns of 256 prompt and 1024
// response tokens.
func benchTurns(rows int) []Turn {
	out := make([]Turn, rows)
	for i := range out {
		t := Turn{EpisodeID: fmt.Sprintf("g%d-s%d", i/8, i%8), GroupID: int64(i / 8), Sample: int32(i % 8), PolicyID: "solver",
			PromptIDs: make([]int32, 256), ResponseIDs: make([]int32, 1024), LogProbs: make([]float32, 1024),
			LossMask: make([]float32, 1024), Advantages: make([]float32, 1024), FinishReason: "stop"}
		for k := range t.ResponseIDs {
			t.ResponseIDs[k] = int32(k)
			t.LogProbs[k] = -0.5
			t.LossMask[k] = 1
		}
		out[i] = t
	}
	return out
}

func BenchmarkTrajectoryIPC(b *testing.B) {
	turns := benchTurns(256)
	enc, _ := MarshalTrajectories(turns)
	b.Run("marshal", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := MarshalTrajectories(turns); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := UnmarshalTrajectories("bench", enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
