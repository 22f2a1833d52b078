// Package pqread reads a whole Parquet file that may be damaged or
// hostile (a download cut short, a file another tool wrote, one made to
// do harm) into an Arrow table: a damaged file is an error, never a crash,
// an allocation of what its footer declares, nor fewer rows than it holds.
// Datasets and the trace store read their Parquet files through it.
package pqread

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// ErrDamaged marks a file whose metadata or data contradict themselves or
// declare more than the caller's limit.
var ErrDamaged = errors.New("damaged Parquet file")

// ReadTable reads every column of the Parquet file r, which holds size
// bytes. limit bounds the uncompressed column data the footer declares,
// and twice limit the memory the table takes: it is held in memory whole.
//
// arrow-go's reader trusts the footer: it allocates a column chunk's
// declared length before it reads it (a length past the file, or a
// negative one, made it die of an allocation or panic in a goroutine of
// its own, which no recover catches), panics on some damaged metadata, and
// reads fewer rows than the footer declares when a row group's or page's
// count is damaged. So the footer's column chunks must lie inside the
// file, a panic of the reader is an error, and the rows read must be the
// rows declared.
func ReadTable(ctx context.Context, r parquet.ReaderAtSeeker, size, limit int64) (tbl arrow.Table, err error) {
	defer func() {
		if e := recover(); e != nil {
			if tbl != nil {
				tbl.Release()
			}
			tbl, err = nil, fmt.Errorf("the reader failed: %v: %w", e, ErrDamaged)
		}
	}()
	// The footer's sizes bound nothing the reader builds from a
	// dictionary: a value stored once and repeated by run-length
	// encoding in every row of a file of kilobytes makes gigabytes of
	// Arrow data. So the reader's allocations are counted and stop at
	// twice limit (its builders grow by doubling), with a panic that the
	// recovers here and in arrow-go turn into an error.
	mem := &limitAllocator{mem: memory.DefaultAllocator, limit: 2 * limit}
	pf, err := file.NewParquetReader(r, file.WithReadProps(parquet.NewReaderProperties(mem)))
	if err != nil {
		return nil, err
	}
	if err := checkFooter(pf.MetaData(), size, limit); err != nil {
		return nil, err
	}
	rd, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		return nil, err
	}
	tbl, err = rd.ReadTable(ctx)
	if err != nil {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if mem.over.Load() {
			return nil, fmt.Errorf("its data come to over %d bytes in memory, the limit: %w", mem.limit, ErrDamaged)
		}
		return nil, err
	}
	if got, want := tbl.NumRows(), pf.NumRows(); got != want {
		tbl.Release()
		return nil, fmt.Errorf("read %d rows, its footer declares %d: %w", got, want, ErrDamaged)
	}
	for i := range int(tbl.NumCols()) {
		if col := tbl.Column(i); int64(col.Len()) != tbl.NumRows() {
			tbl.Release()
			return nil, fmt.Errorf("column %q: read %d rows of %d: %w", col.Name(), col.Len(), tbl.NumRows(), ErrDamaged)
		}
	}
	return tbl, nil
}

// checkFooter checks what the reader allocates by: the uncompressed data
// the row groups and their column chunks declare (at most limit in all)
// and where each column chunk and page index lies (inside the file).
func checkFooter(md *metadata.FileMetaData, size, limit int64) error {
	var declared, chunks int64
	inside := func(what string, off, n int64) error {
		if off < 0 || n < 0 || off > size || n > size-off {
			return fmt.Errorf("%s: bytes [%d, %d+%d) outside the file's %d: %w", what, off, off, n, size, ErrDamaged)
		}
		return nil
	}
	for g := range md.NumRowGroups() {
		rg := md.RowGroup(g)
		n := rg.TotalByteSize()
		if n < 0 || n > limit-declared {
			return fmt.Errorf("its footer declares over %d bytes of uncompressed column data, the limit: %w", limit, ErrDamaged)
		}
		declared += n
		for c := range rg.NumColumns() {
			col, err := rg.ColumnChunk(c)
			if err != nil {
				return fmt.Errorf("row group %d: column chunk %d: %v: %w", g, c, err, ErrDamaged)
			}
			what := fmt.Sprintf("row group %d: column %s", g, col.PathInSchema())
			start := col.DataPageOffset()
			if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 && start > col.DictionaryPageOffset() {
				start = col.DictionaryPageOffset()
			}
			if err := inside(what, start, col.TotalCompressedSize()); err != nil {
				return err
			}
			u := col.TotalUncompressedSize()
			if u < 0 || u > limit-chunks {
				return fmt.Errorf("%s: its footer declares over %d bytes of uncompressed column data, the limit: %w", what, limit, ErrDamaged)
			}
			chunks += u
			for _, idx := range []struct {
				name string
				at   *metadata.IndexLocation
			}{{"column index", col.GetColumnIndexLocation()}, {"offset index", col.GetOffsetIndexLocation()}} {
				if idx.at != nil {
					if err := inside(what+": "+idx.name, idx.at.Offset, int64(idx.at.Length)); err != nil {
						return err
					}
				}
			}
		}
	}
	return nil
}

// limitAllocator is an allocator that panics once more than limit bytes
// are held: arrow-go's allocators cannot return an error.
type limitAllocator struct {
	mem   memory.Allocator
	limit int64
	used  atomic.Int64
	over  atomic.Bool
}

func (a *limitAllocator) take(n int64) {
	if a.used.Add(n) > a.limit {
		a.over.Store(true)
		panic(fmt.Sprintf("over %d bytes in memory, the limit", a.limit))
	}
}

func (a *limitAllocator) Allocate(size int) []byte {
	a.take(int64(size))
	return a.mem.Allocate(size)
}

func (a *limitAllocator) Reallocate(size int, b []byte) []byte {
	a.take(int64(size - len(b)))
	return a.mem.Reallocate(size, b)
}

func (a *limitAllocator) Free(b []byte) {
	a.used.Add(-int64(len(b)))
	a.mem.Free(b)
}
