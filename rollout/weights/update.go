package weights

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"unsafe"

	"github.com/rlnode/rlnode/learner/model"
	"github.com/rlnode/rlnode/learner/safetensors"
	"github.com/rlnode/rlnode/rollout/native"
)

// Update is one policy version's weights: full tensors (all or some of the
// model's, by Hugging Face checkpoint name), or a LoRA adapter when LoRA is
// set (tensors named as PEFT names them,
// "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight").
type Update struct {
	Tensors map[string][]float32
	// Shapes of the tensors by name. Native engines check sizes against the
	// served model and need none; vLLM full reloads write a checkpoint and
	// need every shape. LoRA tensors' shapes follow from Rank.
	Shapes map[string][]int
	LoRA   *LoRA
}

// LoRA describes the adapter an Update carries; an engine serves
// W + (Alpha/Rank)·B·A on each adapted projection.
type LoRA struct {
	Rank          int
	Alpha         float64
	TargetModules []string // q_proj, k_proj, ... as PEFT spells them
}

// FullUpdate is every policy parameter of m (the value head, which engines
// do not serve, is left out), with shapes.
func FullUpdate(m *model.Model) Update {
	u := Update{Tensors: map[string][]float32{}, Shapes: map[string][]int{}}
	w := m.Weights()
	for _, p := range m.Params() {
		if strings.HasPrefix(p.Name, "v_head.") {
			continue
		}
		u.Tensors[p.Name] = w[p.Name]
		u.Shapes[p.Name] = append([]int(nil), p.Shape...)
	}
	return u
}

// LoRAUpdate is m's adapters (A and B of every adapted projection); it fails
// when m has none.
func LoRAUpdate(m *model.Model) (Update, error) {
	u := Update{Tensors: map[string][]float32{}, Shapes: map[string][]int{}}
	mods := map[string]bool{}
	for _, l := range m.Layers {
		for _, lin := range []*model.Linear{l.Attn.Q, l.Attn.K, l.Attn.V, l.Attn.O, l.MLP.Gate, l.MLP.Up, l.MLP.Down} {
			a := lin.LoRA
			if a == nil {
				continue
			}
			if u.LoRA == nil {
				u.LoRA = &LoRA{Rank: a.Rank, Alpha: a.Alpha}
			}
			for _, p := range []*model.Param{a.A, a.B} {
				v := make([]float32, p.Len())
				m.B.Download(v, p.W)
				u.Tensors[p.Name] = v
				u.Shapes[p.Name] = append([]int(nil), p.Shape...)
			}
			base, _, _ := loraTarget(a.A.Name)
			mods[base[strings.LastIndex(base, ".")+1:]] = true
		}
	}
	if u.LoRA == nil {
		return Update{}, fmt.Errorf("lora update: the model has no adapters")
	}
	for mod := range mods {
		u.LoRA.TargetModules = append(u.LoRA.TargetModules, mod)
	}
	sort.Strings(u.LoRA.TargetModules)
	return u, nil
}

// loraTarget splits a PEFT adapter tensor name into the adapted module
// ("model.layers.0.self_attn.q_proj") and "A" or "B".
func loraTarget(name string) (module, part string, ok bool) {
	rest, found := strings.CutPrefix(name, "base_model.model.")
	if !found {
		return "", "", false
	}
	if m, ok := strings.CutSuffix(rest, ".lora_A.weight"); ok {
		return m, "A", true
	}
	if m, ok := strings.CutSuffix(rest, ".lora_B.weight"); ok {
		return m, "B", true
	}
	return "", "", false
}

func (u *Update) validate() error {
	if len(u.Tensors) == 0 {
		return fmt.Errorf("no tensors")
	}
	for name, v := range u.Tensors {
		if name == "" || name == "__metadata__" {
			return fmt.Errorf("tensor name %q is not allowed", name)
		}
		if len(v) == 0 {
			return fmt.Errorf("tensor %q: no values", name)
		}
		if s, ok := u.Shapes[name]; ok {
			n := 1
			for _, d := range s {
				n *= d
			}
			if n != len(v) {
				return fmt.Errorf("tensor %q: %d values for shape %v", name, len(v), s)
			}
		}
	}
	for name := range u.Shapes {
		if _, ok := u.Tensors[name]; !ok {
			return fmt.Errorf("shape given for tensor %q, which the update lacks", name)
		}
	}
	if u.LoRA == nil {
		return nil
	}
	if u.LoRA.Rank <= 0 || !(u.LoRA.Alpha > 0) {
		return fmt.Errorf("lora: rank %d and alpha %v must be positive", u.LoRA.Rank, u.LoRA.Alpha)
	}
	_, err := u.adapters()
	return err
}

// adapter is one adapted projection's A (rank×in) and B (out×rank).
type adapter struct {
	module  string
	in, out int
	a, b    []float32
}

// adapters pairs the LoRA tensors by module, checking names and sizes.
func (u *Update) adapters() ([]adapter, error) {
	r := u.LoRA.Rank
	byMod := map[string]*adapter{}
	for name, v := range u.Tensors {
		mod, part, ok := loraTarget(name)
		if !ok {
			return nil, fmt.Errorf("lora: tensor %q is not a PEFT adapter weight (base_model.model.<module>.lora_A|lora_B.weight)", name)
		}
		if len(v)%r != 0 {
			return nil, fmt.Errorf("lora: tensor %q: %d values do not divide by rank %d", name, len(v), r)
		}
		ad := byMod[mod]
		if ad == nil {
			ad = &adapter{module: mod}
			byMod[mod] = ad
		}
		if part == "A" {
			ad.a, ad.in = v, len(v)/r
		} else {
			ad.b, ad.out = v, len(v)/r
		}
	}
	out := make([]adapter, 0, len(byMod))
	for _, ad := range byMod {
		if ad.a == nil || ad.b == nil {
			return nil, fmt.Errorf("lora: module %s has only one of lora_A and lora_B", ad.module)
		}
		out = append(out, *ad)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].module < out[j].module })
	return out, nil
}

// Blob metadata keys.
const (
	metaFormat  = "format"
	metaKind    = "rlnode.update"
	metaVersion = "rlnode.version"
	metaRank    = "lora.r"
	metaAlpha   = "lora.alpha"
	metaTargets = "lora.target_modules"
)

// Encode writes u as safetensors bytes (float32, names sorted, shapes
// as given or flat) with the version and the LoRA description in
// __metadata__: the one payload every engine pulls.
func Encode(version int64, u Update) ([]byte, error) {
	if err := u.validate(); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(u.Tensors))
	for n := range u.Tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	meta := map[string]string{metaFormat: "pt", metaKind: "full", metaVersion: strconv.FormatInt(version, 10)}
	if u.LoRA != nil {
		meta[metaKind] = "lora"
		meta[metaRank] = strconv.Itoa(u.LoRA.Rank)
		meta[metaAlpha] = strconv.FormatFloat(u.LoRA.Alpha, 'g', -1, 64)
		meta[metaTargets] = strings.Join(u.LoRA.TargetModules, ",")
	}
	type entry struct {
		DType   string   `json:"dtype"`
		Shape   []int    `json:"shape"`
		Offsets [2]int64 `json:"data_offsets"`
	}
	header := map[string]any{"__metadata__": meta}
	var off int64
	for _, n := range names {
		v := u.Tensors[n]
		shape := u.Shapes[n]
		if shape == nil {
			shape = []int{len(v)}
		}
		header[n] = entry{DType: "F32", Shape: shape, Offsets: [2]int64{off, off + 4*int64(len(v))}}
		off += 4 * int64(len(v))
	}
	h, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := make([]byte, 8+len(h)+int(off))
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	copy(out[8:], h)
	p := out[8+len(h):]
	for _, n := range names {
		v := u.Tensors[n]
		if littleEndian {
			// The values' own bytes are the payload's: one copy.
			p = p[copy(p, unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))):]
			continue
		}
		for _, x := range v {
			binary.LittleEndian.PutUint32(p, math.Float32bits(x))
			p = p[4:]
		}
	}
	return out, nil
}

// Decode parses a blob written by Encode; what names the payload in
// errors.
func Decode(what string, b []byte) (int64, Update, error) {
	return decode(what, b, false)
}

// DecodeView is Decode with the tensors lying in b itself where its
// layout allows (little-endian, 4-byte aligned; the others are copied):
// for a payload read in place, such as a view of a shared segment. The
// tensors are valid, and must not be written, while b is.
func DecodeView(what string, b []byte) (int64, Update, error) {
	return decode(what, b, true)
}

// littleEndian: float32 values are stored as safetensors stores them.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

func decode(what string, b []byte, alias bool) (int64, Update, error) {
	f, err := safetensors.Parse(what, b)
	if err != nil {
		return 0, Update{}, err
	}
	version, err := strconv.ParseInt(f.Metadata[metaVersion], 10, 64)
	if err != nil {
		return 0, Update{}, fmt.Errorf("weights %s: metadata %s: %w", what, metaVersion, err)
	}
	u := Update{Tensors: make(map[string][]float32, len(f.Tensors)), Shapes: make(map[string][]int, len(f.Tensors))}
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.DType != safetensors.F32 {
			return 0, Update{}, fmt.Errorf("weights %s: tensor %q: dtype %s, want F32", what, t.Name, t.DType)
		}
		var v []float32
		if alias && littleEndian && len(t.Data) >= 4 && uintptr(unsafe.Pointer(&t.Data[0]))%4 == 0 {
			v = unsafe.Slice((*float32)(unsafe.Pointer(&t.Data[0])), len(t.Data)/4)
		} else {
			v = make([]float32, len(t.Data)/4)
			for k := range v {
				v[k] = math.Float32frombits(binary.LittleEndian.Uint32(t.Data[4*k:]))
			}
		}
		u.Tensors[t.Name] = v
		u.Shapes[t.Name] = t.Shape
	}
	switch kind := f.Metadata[metaKind]; kind {
	case "full":
	case "lora":
		r, err1 := strconv.Atoi(f.Metadata[metaRank])
		alpha, err2 := strconv.ParseFloat(f.Metadata[metaAlpha], 64)
		if err1 != nil || err2 != nil {
			return 0, Update{}, fmt.Errorf("weights %s: bad LoRA metadata r=%q alpha=%q", what, f.Metadata[metaRank], f.Metadata[metaAlpha])
		}
		u.LoRA = &LoRA{Rank: r, Alpha: alpha}
		if t := f.Metadata[metaTargets]; t != "" {
			u.LoRA.TargetModules = strings.Split(t, ",")
		}
	default:
		return 0, Update{}, fmt.Errorf("weights %s: metadata %s is %q, want full or lora", what, metaKind, kind)
	}
	if err := u.validate(); err != nil {
		return 0, Update{}, fmt.Errorf("weights %s: %w", what, err)
	}
	return version, u, nil
}

// mergeLoRA returns the adapted projections' weights base + s·B·A, one
// tensor per adapted module ("<module>.weight"), from base weights by
// name.
func mergeLoRA(u Update, base map[string][]float32) (map[string][]float32, error) {
	ads, err := u.adapters()
	if err != nil {
		return nil, err
	}
	s := float32(u.LoRA.Alpha / float64(u.LoRA.Rank))
	r := u.LoRA.Rank
	out := make(map[string][]float32, len(ads))
	for _, ad := range ads {
		name := ad.module + ".weight"
		w, ok := base[name]
		if !ok {
			return nil, fmt.Errorf("lora: adapted module %s: the engine has no base weight %q", ad.module, name)
		}
		if len(w) != ad.out*ad.in {
			return nil, fmt.Errorf("lora: adapted module %s: A is %d×%d and B %d×%d but the base weight has %d values, want %d×%d",
				ad.module, r, ad.in, ad.out, r, len(w), ad.out, ad.in)
		}
		m := make([]float32, len(w))
		copy(m, w)
		for o := 0; o < ad.out; o++ {
			row := m[o*ad.in : (o+1)*ad.in]
			for k := 0; k < r; k++ {
				c := s * ad.b[o*r+k]
				if c == 0 {
					continue
				}
				a := ad.a[k*ad.in : (k+1)*ad.in]
				for i := range row {
					row[i] += c * a[i]
				}
			}
		}
		out[name] = m
	}
	return out, nil
}

// loraBaseNames lists the base weights an adapter update merges into.
func loraBaseNames(u Update) ([]string, error) {
	ads, err := u.adapters()
	if err != nil {
		return nil, err
	}
	out := make([]string, len(ads))
	for i, ad := range ads {
		out[i] = ad.module + ".weight"
	}
	return out, nil
}

// CheckFinite refuses weights holding a NaN or an infinity, the mark of
// a diverged learner step, naming the first such tensor (by name order)
// and the value's index; the error wraps safetensors.ErrNotFinite. A
// version refused here reaches no engine, which keeps serving the one
// before.
func CheckFinite(tensors map[string][]float32) error {
	names := make([]string, 0, len(tensors))
	for n := range tensors {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		v := tensors[n]
		if i := native.FirstNonFinite(v); i >= 0 {
			return fmt.Errorf("tensor %q: value %d is %v: %w", n, i, v[i], safetensors.ErrNotFinite)
		}
	}
	return nil
}
