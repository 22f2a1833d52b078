package cpu

import (
	"fmt"
	"math"

	"github.com/rlnode/rlnode/learner/backend"
)

// BF16Tensor is a CPU tensor of bfloat16 values, as their bits.
type BF16Tensor []uint16

// Len is the number of elements.
func (t BF16Tensor) Len() int { return len(t) }

var _ backend.BF16Storage = (*Backend)(nil)

func bf(t backend.Tensor) []uint16 {
	c, ok := t.(BF16Tensor)
	if !ok {
		panic(fmt.Sprintf("cpu backend: %T where a bf16 tensor belongs", t))
	}
	return c
}

func (*Backend) AllocBF16(n int) backend.Tensor { return BF16Tensor(make([]uint16, n)) }

// ToBF16 rounds to nearest even (NaN stays a quiet NaN), as the CUDA
// kernels' cast does.
func (*Backend) ToBF16(dst, src backend.Tensor) {
	d, s := bf(dst), f(src)
	mustLen("ToBF16", len(d), len(s))
	for i, x := range s {
		u := math.Float32bits(x)
		if u&0x7fffffff > 0x7f800000 {
			d[i] = uint16(u>>16) | 0x40
			continue
		}
		u += 0x7fff + (u>>16)&1
		d[i] = uint16(u >> 16)
	}
}

func (*Backend) FromBF16(dst, src backend.Tensor) {
	d, s := f(dst), bf(src)
	mustLen("FromBF16", len(d), len(s))
	for i, h := range s {
		d[i] = math.Float32frombits(uint32(h) << 16)
	}
}
