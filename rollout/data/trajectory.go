package data

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/rlnode/rlnode/internal/atomicfile"
	"github.com/rlnode/rlnode/internal/readfile"
)

// Turn is one row of a trajectory batch: what one policy generated in one
// turn of one episode, with everything the learner needs to train on it.
//
// ResponseIDs, LogProbs and LossMask have one entry per response token.
// LossMask is 1 for tokens the policy sampled and 0 for tokens it did not
// (tool output, template text spliced into the sequence); LogProbs of
// masked tokens are 0. Advantages is empty until an advantage estimator
// fills it, then has one entry per response token.
type Turn struct {
	EpisodeID     string
	GroupID       int64 // GRPO group: the samples of one prompt share it
	Sample        int32 // index of the episode within its group
	Turn          int32 // 0-based turn index within the episode
	PolicyID      string
	WeightVersion int64

	PromptIDs    []int32
	ResponseIDs  []int32
	LogProbs     []float32
	LossMask     []float32
	Advantages   []float32
	Reward       float64 // the reward this turn trains on (see the episode kinds)
	FinalReward  float64 // the verifier's score of the episode's last answer
	FinishReason string
	ResponseText string
	Note         string // why a reward is 0 without a normal verdict, if so

	// Call is what traces record of the turn's model calls; training
	// never reads it.
	Call Call
}

// SchemaVersion names the trajectory schema in the Arrow schema metadata.
const SchemaVersion = "rlnode.trajectory/v3"

// Column names of the trajectory schema, in order.
const (
	ColEpisodeID     = "episode_id"
	ColGroupID       = "group_id"
	ColSample        = "sample"
	ColTurn          = "turn"
	ColPolicyID      = "policy_id"
	ColWeightVersion = "weight_version"
	ColPromptIDs     = "prompt_ids"
	ColResponseIDs   = "response_ids"
	ColLogProbs      = "logprobs"
	ColLossMask      = "loss_mask"
	ColAdvantages    = "advantages"
	ColReward        = "reward"
	ColFinalReward   = "final_reward"
	ColFinishReason  = "finish_reason"
	ColResponseText  = "response_text"
	ColNote          = "note"
)

var (
	listInt32   = arrow.ListOf(arrow.PrimitiveTypes.Int32)
	listFloat32 = arrow.ListOf(arrow.PrimitiveTypes.Float32)
)

// TrajectorySchema is the Arrow schema of trajectory batches, one row per
// Turn:
//
//	episode_id      utf8
//	group_id        int64
//	sample          int32
//	turn            int32
//	policy_id       utf8
//	weight_version  int64
//	prompt_ids      list<int32>
//	response_ids    list<int32>
//	logprobs        list<float32>   (len = len(response_ids))
//	loss_mask       list<float32>   (len = len(response_ids); 1 trains, 0 not)
//	advantages      list<float32>   (empty, or len = len(response_ids))
//	reward          float64
//	final_reward    float64
//	finish_reason   utf8
//	response_text   utf8
//	note            utf8
//
// then the columns of the turn's Call, optional on read (v2 files lack
// them):
//
//	model            utf8
//	start_unix_nano  int64  (0: not recorded)
//	end_unix_nano    int64
//	prompt_text      utf8
//	prompt_messages  utf8   (JSON [{"role", "content"}]; empty for a text prompt)
//	prompt_bytes     int64  (the whole prompt's size; more than kept when cut)
//	tool_calls       utf8   (JSON [{"name", "arguments", "result", "error", "start", "end", "tokens_from", "tokens_to"}])
//	end_shared       bool   (end_unix_nano is the batch's, not the call's own)
//
// The schema metadata holds "rlnode.schema" = SchemaVersion.
var TrajectorySchema = arrow.NewSchema(append(trainingFields, callFields...), func() *arrow.Metadata {
	m := arrow.NewMetadata([]string{"rlnode.schema"}, []string{SchemaVersion})
	return &m
}())

// trainingFields are the columns every trajectory file holds.
var trainingFields = []arrow.Field{
	{Name: ColEpisodeID, Type: arrow.BinaryTypes.String},
	{Name: ColGroupID, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColSample, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColTurn, Type: arrow.PrimitiveTypes.Int32},
	{Name: ColPolicyID, Type: arrow.BinaryTypes.String},
	{Name: ColWeightVersion, Type: arrow.PrimitiveTypes.Int64},
	{Name: ColPromptIDs, Type: listInt32},
	{Name: ColResponseIDs, Type: listInt32},
	{Name: ColLogProbs, Type: listFloat32},
	{Name: ColLossMask, Type: listFloat32},
	{Name: ColAdvantages, Type: listFloat32},
	{Name: ColReward, Type: arrow.PrimitiveTypes.Float64},
	{Name: ColFinalReward, Type: arrow.PrimitiveTypes.Float64},
	{Name: ColFinishReason, Type: arrow.BinaryTypes.String},
	{Name: ColResponseText, Type: arrow.BinaryTypes.String},
	{Name: ColNote, Type: arrow.BinaryTypes.String},
}

// ErrBadTrajectory marks trajectory data that does not fit the schema.
var ErrBadTrajectory = errors.New("bad trajectory data")

// Check reports the first inconsistency in t: per-token columns of unequal
// length or non-finite rewards.
func (t *Turn) Check() error {
	n := len(t.ResponseIDs)
	switch {
	case len(t.LogProbs) != n:
		return fmt.Errorf("episode %s turn %d: %d logprobs for %d response tokens: %w", t.EpisodeID, t.Turn, len(t.LogProbs), n, ErrBadTrajectory)
	case len(t.LossMask) != n:
		return fmt.Errorf("episode %s turn %d: %d loss-mask entries for %d response tokens: %w", t.EpisodeID, t.Turn, len(t.LossMask), n, ErrBadTrajectory)
	case len(t.Advantages) != 0 && len(t.Advantages) != n:
		return fmt.Errorf("episode %s turn %d: %d advantages for %d response tokens: %w", t.EpisodeID, t.Turn, len(t.Advantages), n, ErrBadTrajectory)
	}
	for _, v := range [...]float64{t.Reward, t.FinalReward} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return fmt.Errorf("episode %s turn %d: reward %v is not finite: %w", t.EpisodeID, t.Turn, v, ErrBadTrajectory)
		}
	}
	return nil
}

// checkFinite reports the first NaN or infinite per-token number of t.
// Files are held to it as they are read: such a number read from a file
// failed the learner's step, far from the file that held it. (A live
// run's episodes are not: a policy whose weights turned non-finite makes
// NaN log probs, and the learner's refusal of that batch is what stops
// the run, naming its ranks and newest checkpoint.)
func (t *Turn) checkFinite() error {
	for _, col := range [...]struct {
		name string
		v    []float32
	}{{"logprob", t.LogProbs}, {"loss mask", t.LossMask}, {"advantage", t.Advantages}} {
		for i, x := range col.v {
			if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
				return fmt.Errorf("episode %s turn %d: %s of response token %d is %v, not finite: %w", t.EpisodeID, t.Turn, col.name, i, x, ErrBadTrajectory)
			}
		}
	}
	return nil
}

// NewRecord builds one Arrow record batch holding turns. The caller
// releases it.
func NewRecord(mem memory.Allocator, turns []Turn) (arrow.RecordBatch, error) {
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	for i := range turns {
		if err := turns[i].Check(); err != nil {
			return nil, fmt.Errorf("row %d: %w", i, err)
		}
	}
	b := array.NewRecordBuilder(mem, TrajectorySchema)
	defer b.Release()
	b.Reserve(len(turns))
	str := func(i int) *array.StringBuilder { return b.Field(i).(*array.StringBuilder) }
	i64 := func(i int) *array.Int64Builder { return b.Field(i).(*array.Int64Builder) }
	i32 := func(i int) *array.Int32Builder { return b.Field(i).(*array.Int32Builder) }
	f64 := func(i int) *array.Float64Builder { return b.Field(i).(*array.Float64Builder) }
	ints := func(i int, v []int32) {
		lb := b.Field(i).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Int32Builder).AppendValues(v, nil)
	}
	floats := func(i int, v []float32) {
		lb := b.Field(i).(*array.ListBuilder)
		lb.Append(true)
		lb.ValueBuilder().(*array.Float32Builder).AppendValues(v, nil)
	}
	for _, t := range turns {
		str(0).Append(t.EpisodeID)
		i64(1).Append(t.GroupID)
		i32(2).Append(t.Sample)
		i32(3).Append(t.Turn)
		str(4).Append(t.PolicyID)
		i64(5).Append(t.WeightVersion)
		ints(6, t.PromptIDs)
		ints(7, t.ResponseIDs)
		floats(8, t.LogProbs)
		floats(9, t.LossMask)
		floats(10, t.Advantages)
		f64(11).Append(t.Reward)
		f64(12).Append(t.FinalReward)
		str(13).Append(t.FinishReason)
		str(14).Append(t.ResponseText)
		str(15).Append(t.Note)
		if err := appendCall(b.Fields()[len(trainingFields):], t.Call); err != nil {
			return nil, fmt.Errorf("episode %s turn %d: %w", t.EpisodeID, t.Turn, err)
		}
	}
	return b.NewRecordBatch(), nil
}

// TurnsFromRecord reads the rows of a trajectory record batch. Columns are
// found by name; a missing column or one of another type is an error
// naming it. The call columns are optional (files written before them
// lack them). Extra columns are ignored.
func TurnsFromRecord(rec arrow.RecordBatch) ([]Turn, error) {
	sc := rec.Schema()
	col := func(name string, want arrow.DataType) (arrow.Array, error) {
		idx := sc.FieldIndices(name)
		if len(idx) == 0 {
			return nil, fmt.Errorf("column %q: missing: %w", name, ErrBadTrajectory)
		}
		a := rec.Column(idx[0])
		if !arrow.TypeEqual(a.DataType(), want) {
			return nil, fmt.Errorf("column %q: type %s, want %s: %w", name, a.DataType(), want, ErrBadTrajectory)
		}
		return a, nil
	}
	n := int(rec.NumRows())
	arrs := make([]arrow.Array, len(trainingFields))
	for i, f := range trainingFields {
		a, err := col(f.Name, f.Type)
		if err != nil {
			return nil, err
		}
		if err := checkColumn(a, n); err != nil {
			return nil, fmt.Errorf("column %q: %w: %w", f.Name, err, ErrBadTrajectory)
		}
		arrs[i] = a
	}
	str := func(i, r int) string { return arrs[i].(*array.String).Value(r) }
	ints := func(i, r int) []int32 {
		l := arrs[i].(*array.List)
		s, e := l.ValueOffsets(r)
		return append([]int32(nil), l.ListValues().(*array.Int32).Int32Values()[s:e]...)
	}
	floats := func(i, r int) []float32 {
		l := arrs[i].(*array.List)
		s, e := l.ValueOffsets(r)
		return append([]float32(nil), l.ListValues().(*array.Float32).Float32Values()[s:e]...)
	}
	calls, err := callColumns(rec)
	if err != nil {
		return nil, err
	}
	out := make([]Turn, n)
	for r := range n {
		for i, a := range arrs {
			if a.IsNull(r) {
				return nil, fmt.Errorf("row %d: column %q: null: %w", r, TrajectorySchema.Field(i).Name, ErrBadTrajectory)
			}
		}
		t := Turn{
			EpisodeID:     str(0, r),
			GroupID:       arrs[1].(*array.Int64).Value(r),
			Sample:        arrs[2].(*array.Int32).Value(r),
			Turn:          arrs[3].(*array.Int32).Value(r),
			PolicyID:      str(4, r),
			WeightVersion: arrs[5].(*array.Int64).Value(r),
			PromptIDs:     ints(6, r),
			ResponseIDs:   ints(7, r),
			LogProbs:      floats(8, r),
			LossMask:      floats(9, r),
			Advantages:    floats(10, r),
			Reward:        arrs[11].(*array.Float64).Value(r),
			FinalReward:   arrs[12].(*array.Float64).Value(r),
			FinishReason:  str(13, r),
			ResponseText:  str(14, r),
			Note:          str(15, r),
		}
		if len(t.Advantages) == 0 {
			t.Advantages = nil
		}
		if t.Call, err = callAt(calls, r); err != nil {
			return nil, fmt.Errorf("row %d: %w", r, err)
		}
		if err := t.Check(); err != nil {
			return nil, fmt.Errorf("row %d: %w", r, err)
		}
		out[r] = t
	}
	return out, nil
}

// checkColumn checks that a trajectory column holds n rows that its
// buffers back: a record batch read from a damaged file may declare more
// rows, or offsets past its values, than its buffers hold.
func checkColumn(a arrow.Array, n int) error {
	if a.Len() != n {
		return fmt.Errorf("%d rows in a record batch of %d", a.Len(), n)
	}
	if n == 0 {
		return nil
	}
	var values int
	switch a := a.(type) {
	case *array.String:
		return a.ValidateFull()
	case *array.Int32:
		values = len(a.Int32Values())
	case *array.Int64:
		values = len(a.Int64Values())
	case *array.Float64:
		values = len(a.Float64Values())
	case *array.List:
		base := a.Data().Offset()
		offs := a.Offsets()
		if len(offs) < base+n+1 {
			return fmt.Errorf("%d list offsets for %d rows", len(offs)-base, n)
		}
		offs = offs[base:]
		var child int
		switch v := a.ListValues().(type) {
		case *array.Int32:
			child = len(v.Int32Values())
		case *array.Float32:
			child = len(v.Float32Values())
		}
		for r := range n {
			if s, e := offs[r], offs[r+1]; s < 0 || e < s || int(e) > child {
				return fmt.Errorf("row %d: list offsets [%d, %d) outside its %d values", r, s, e, child)
			}
		}
		return nil
	default:
		return nil
	}
	if values < n {
		return fmt.Errorf("%d values for %d rows", values, n)
	}
	return nil
}

// WriteTrajectories writes turns to w as an Arrow IPC file (one record
// batch per batchRows rows; batchRows ≤ 0 writes one batch).
func WriteTrajectories(w io.Writer, turns []Turn, batchRows int) error {
	fw, err := ipc.NewFileWriter(w, ipc.WithSchema(TrajectorySchema))
	if err != nil {
		return fmt.Errorf("arrow ipc writer: %w", err)
	}
	if batchRows <= 0 {
		batchRows = max(len(turns), 1)
	}
	for lo := 0; lo < len(turns); lo += batchRows {
		hi := min(lo+batchRows, len(turns))
		rec, err := NewRecord(nil, turns[lo:hi])
		if err != nil {
			fw.Close()
			return fmt.Errorf("rows %d..%d: %w", lo, hi-1, err)
		}
		err = fw.Write(rec)
		rec.Release()
		if err != nil {
			fw.Close()
			return fmt.Errorf("write arrow record batch: %w", err)
		}
	}
	if err := fw.Close(); err != nil {
		return fmt.Errorf("close arrow ipc file: %w", err)
	}
	return nil
}

// MarshalTrajectories returns turns as Arrow IPC file bytes.
func MarshalTrajectories(turns []Turn) ([]byte, error) {
	var buf bytes.Buffer
	if err := WriteTrajectories(&buf, turns, 0); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// UnmarshalTrajectories reads Arrow IPC file bytes; name says where the
// bytes came from in errors.
func UnmarshalTrajectories(name string, b []byte) ([]Turn, error) {
	return readTrajectories(name, bytes.NewReader(b))
}

// WriteTrajectoryFile writes turns to path as an Arrow IPC file, replacing
// it atomically: a write that fails midway (a full disk, a crash) leaves
// the previous file whole, never a cut one for sft.trajectories to read.
func WriteTrajectoryFile(path string, turns []Turn) error {
	return atomicfile.Write(path, 0o644, func(w io.Writer) error { return WriteTrajectories(w, turns, 0) })
}

// ReadTrajectoryFile reads all turns of an Arrow IPC file written by
// WriteTrajectoryFile (or any writer using TrajectorySchema's columns).
func ReadTrajectoryFile(path string) ([]Turn, error) {
	if _, err := readfile.Stat(path); err != nil { // a pipe would block the open
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	turns, err := readTrajectories(path, f)
	if err != nil {
		return nil, err
	}
	for i := range turns {
		if err := turns[i].checkFinite(); err != nil {
			return nil, fmt.Errorf("read %s: row %d: %w", path, i, err)
		}
	}
	return turns, nil
}

// readTrajectories reads an Arrow IPC file from r. The file may be damaged
// or hostile (a cut download, a file from another tool, bytes from another
// node): checkIPCFile first refuses metadata that would make arrow-go's
// reader allocate what it declares, and a panic of that reader on offsets
// that point wrong is an error naming the file.
func readTrajectories(name string, r ipc.ReadAtSeeker) (out []Turn, err error) {
	size, err := r.Seek(0, io.SeekEnd)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", name, err)
	}
	if err := checkIPCFile(r, size); err != nil {
		return nil, fmt.Errorf("read %s: not an Arrow IPC file or a damaged one: %w: %w", name, err, ErrBadTrajectory)
	}
	batch := -1
	defer func() {
		if e := recover(); e != nil {
			out, err = nil, fmt.Errorf("read %s: damaged Arrow IPC file (the reader failed at record batch %d: %v): %w", name, batch, e, ErrBadTrajectory)
		}
	}()
	fr, err := ipc.NewFileReader(r)
	if err != nil {
		return nil, fmt.Errorf("read %s: not an Arrow IPC file: %w: %w", name, err, ErrBadTrajectory)
	}
	defer fr.Close()
	for i := range fr.NumRecords() {
		batch = i
		rec, err := fr.RecordBatchAt(i)
		if err != nil {
			return nil, fmt.Errorf("read %s: record batch %d: %w: %w", name, i, err, ErrBadTrajectory)
		}
		turns, err := TurnsFromRecord(rec)
		rec.Release()
		if err != nil {
			return nil, fmt.Errorf("read %s: record batch %d: %w", name, i, err)
		}
		out = append(out, turns...)
	}
	return out, nil
}
