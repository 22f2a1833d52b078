package rl

import "testing"

// BenchmarkPolicyLoss: loss and gradients of one 8×256-token batch with
// every term on (DAPO clip-higher and dual-clip, TIS, k3 KL, entropy).
func BenchmarkPolicyLoss(b *testing.B) {
	lengths := []int{256, 256, 256, 256, 256, 256, 256, 256}
	batch := randomPolicyBatch(1, lengths, true)
	cfg := withEntropy(withTIS(withKL(DAPOConfig(), K3, 0.05), 2), 0.01)
	norm := CountNorm(batch.Mask)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := PolicyLoss(cfg, batch, norm); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(8*256)*float64(b.N)/b.Elapsed().Seconds(), "tokens/s")
}

// BenchmarkGRPOStep: the advantage and loss work of one GRPO micro-batch:
// group advantages for 8 responses, broadcast to 8×256 tokens, PPO loss.
func BenchmarkGRPOStep(b *testing.B) {
	lengths := []int{256, 256, 256, 256, 256, 256, 256, 256}
	batch := randomPolicyBatch(2, lengths, true)
	rewards := []float64{1, 0, 0, 1, 0.5, 0, 1, 0}
	norm := CountNorm(batch.Mask)
	cfg := DAPOConfig()
	b.ReportAllocs()
	for b.Loop() {
		adv, err := GRPOAdvantages(rewards, 8)
		if err != nil {
			b.Fatal(err)
		}
		if batch.Advantages, err = TokenAdvantages(adv, batch.Mask); err != nil {
			b.Fatal(err)
		}
		if _, err := PolicyLoss(cfg, batch, norm); err != nil {
			b.Fatal(err)
		}
	}
}
