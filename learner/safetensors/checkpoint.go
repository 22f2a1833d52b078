package safetensors

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/rlnode/rlnode/internal/readfile"
)

// File names of a Hugging Face checkpoint directory.
const (
	SingleFile = "model.safetensors"
	IndexFile  = "model.safetensors.index.json"
)

// Checkpoint is a checkpoint directory's tensors, from one file or from the
// shards an index names.
type Checkpoint struct {
	Dir   string
	index string           // path of the index file; "" for a single file
	files map[string]*File // shard file name → parsed file
	where map[string]string
}

// index is model.safetensors.index.json.
type index struct {
	Metadata  map[string]any    `json:"metadata"`
	WeightMap map[string]string `json:"weight_map"`
}

// OpenCheckpoint reads dir/model.safetensors.index.json and its shards when
// the index exists, else dir/model.safetensors.
func OpenCheckpoint(dir string) (*Checkpoint, error) {
	return OpenCheckpointContext(context.Background(), dir)
}

// OpenCheckpointContext is OpenCheckpoint that gives up once ctx is done
// (checked as ReadFileContext reads each file), with an error wrapping
// ctx's.
func OpenCheckpointContext(ctx context.Context, dir string) (*Checkpoint, error) {
	c := &Checkpoint{Dir: dir, files: map[string]*File{}, where: map[string]string{}}
	ipath := filepath.Join(dir, IndexFile)
	b, err := readfile.Regular(ipath, maxHeader)
	if errors.Is(err, os.ErrNotExist) {
		f, err := ReadFileContext(ctx, filepath.Join(dir, SingleFile))
		if err != nil {
			return nil, err
		}
		c.files[SingleFile] = f
		for _, t := range f.Tensors {
			c.where[t.Name] = SingleFile
		}
		return c, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	c.index = ipath
	var idx index
	if err := json.Unmarshal(b, &idx); err != nil {
		return nil, fmt.Errorf("open checkpoint: %w", err)
	}
	if len(idx.WeightMap) == 0 {
		return nil, fmt.Errorf("open checkpoint %s: weight_map is empty", ipath)
	}
	for name, shard := range idx.WeightMap {
		if shard == "" || filepath.Base(shard) != shard {
			return nil, fmt.Errorf("open checkpoint %s: weight_map[%q]: bad shard file name %q", ipath, name, shard)
		}
		f, ok := c.files[shard]
		if !ok {
			f, err = ReadFileContext(ctx, filepath.Join(dir, shard))
			if err != nil {
				return nil, fmt.Errorf("open checkpoint: %w", err)
			}
			c.files[shard] = f
		}
		if _, ok := f.Tensor(name); !ok {
			return nil, fmt.Errorf("open checkpoint %s: tensor %q: not in shard %s", ipath, name, f.Path)
		}
		c.where[name] = shard
	}
	return c, nil
}

// Names lists all tensor names, sorted.
func (c *Checkpoint) Names() []string {
	out := make([]string, 0, len(c.where))
	for n := range c.where {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Tensor returns the named tensor and the path of the file holding it. For
// a tensor the checkpoint lacks, the path is the file that should have
// listed it: the index of a sharded checkpoint, else model.safetensors.
func (c *Checkpoint) Tensor(name string) (*Tensor, string, bool) {
	shard, ok := c.where[name]
	if !ok {
		if c.index != "" {
			return nil, c.index, false
		}
		return nil, filepath.Join(c.Dir, SingleFile), false
	}
	f := c.files[shard]
	t, _ := f.Tensor(name)
	return t, f.Path, true
}

// WriteCheckpoint writes tensors to dir as model.safetensors, or, when their
// data exceed maxShardBytes (> 0), as model-0000i-of-0000n.safetensors shards
// with an index. Tensors are never split across shards. A checkpoint already
// in dir (model.safetensors, or an index and the shards it names) is removed
// first: OpenCheckpoint prefers an index, so a stale one would shadow the
// new weights.
func WriteCheckpoint(dir string, tensors []Tensor, maxShardBytes int64) error {
	return WriteCheckpointContext(context.Background(), dir, tensors, maxShardBytes)
}

// WriteCheckpointContext is WriteCheckpoint that checks ctx between
// tensors and gives up, with an error wrapping ctx's, once it is done:
// done before it begins, dir is left as it was; once it has begun, the old
// checkpoint is gone and no index names files it did not write.
func WriteCheckpointContext(ctx context.Context, dir string, tensors []Tensor, maxShardBytes int64) error {
	if err := ctx.Err(); err != nil { // before the old checkpoint goes
		return fmt.Errorf("write checkpoint: %w", err)
	}
	if err := removeCheckpoint(dir); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	var total int64
	for i := range tensors {
		total += int64(len(tensors[i].Data))
	}
	meta := map[string]string{"format": "pt"}
	if maxShardBytes <= 0 || total <= maxShardBytes {
		return WriteFileContext(ctx, filepath.Join(dir, SingleFile), tensors, meta)
	}
	var shards [][]Tensor
	var cur []Tensor
	var size int64
	for _, t := range tensors {
		if len(cur) > 0 && size+int64(len(t.Data)) > maxShardBytes {
			shards = append(shards, cur)
			cur, size = nil, 0
		}
		cur = append(cur, t)
		size += int64(len(t.Data))
	}
	shards = append(shards, cur)
	idx := index{Metadata: map[string]any{"total_size": total}, WeightMap: map[string]string{}}
	for i, s := range shards {
		name := fmt.Sprintf("model-%05d-of-%05d.safetensors", i+1, len(shards))
		if err := WriteFileContext(ctx, filepath.Join(dir, name), s, meta); err != nil {
			return err
		}
		for _, t := range s {
			idx.WeightMap[t.Name] = name
		}
	}
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, IndexFile), b, 0o644); err != nil {
		return fmt.Errorf("write checkpoint: %w", err)
	}
	return nil
}

// removeCheckpoint deletes dir's checkpoint files: model.safetensors, the
// index, and the shards the index names.
func removeCheckpoint(dir string) error {
	ipath := filepath.Join(dir, IndexFile)
	b, err := os.ReadFile(ipath)
	switch {
	case err == nil:
		var idx index
		if err := json.Unmarshal(b, &idx); err != nil {
			return fmt.Errorf("replace %s: %w", ipath, err)
		}
		shards := map[string]bool{}
		for _, shard := range idx.WeightMap {
			if shard != "" && filepath.Base(shard) == shard {
				shards[shard] = true
			}
		}
		for shard := range shards {
			if err := os.Remove(filepath.Join(dir, shard)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		}
		if err := os.Remove(ipath); err != nil {
			return err
		}
	case !errors.Is(err, os.ErrNotExist):
		return err
	}
	if err := os.Remove(filepath.Join(dir, SingleFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
