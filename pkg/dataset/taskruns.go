package dataset

import (
	"bufio"
	"encoding/json"
	"fmt"
	"github.com/proctor-eval/proctor/pkg/atomicfile"
	"io"
	"os"
	"path/filepath"

	"github.com/parquet-go/parquet-go"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

// batchRows is how many rows are converted and handed to a writer at a
// time: the export holds one batch of flat rows, never the whole table.
const batchRows = 4096

// parquetRowGroupRows bounds a Parquet row group, so readers can split a
// large file and the writer's buffers stay bounded.
const parquetRowGroupRows = 128 * 1024

// ExportTaskRuns writes one row per result of a (see TaskRunRow and
// SCHEMA.md) into outDir, which is created when missing, and returns the
// paths of the files written:
//
//   - "jsonl": task_runs.jsonl, one JSON object per row with every column
//     as a key (null for a missing value);
//   - "parquet": task_runs.parquet, zstd-compressed, typed nullable columns;
//   - "hf": a Hugging Face datasets directory as Dataset.save_to_disk
//     writes it: data-00000-of-00001.arrow (Arrow IPC stream),
//     dataset_info.json and state.json, loadable with
//     datasets.load_from_disk(outDir).
//
// Each file is written to a temporary name and renamed into place, so an
// error leaves no partial file under its final name (files of the same
// export renamed before the error stay). An unknown format is an error
// naming the allowed ones; a result whose metrics, operations, rewards or
// task metadata cannot be encoded as JSON is an error naming its cell.
func ExportTaskRuns(a *artifact.Artifact, outDir string, format string) ([]string, error) {
	if a == nil {
		return nil, fmt.Errorf("dataset: export task runs: nil artifact")
	}
	var write func(io.Writer, *artifact.Artifact) error
	var name string
	switch format {
	case FormatJSONL:
		write, name = writeJSONL, TaskRunsJSONLFile
	case FormatParquet:
		write, name = writeParquet, TaskRunsParquetFile
	case FormatHF:
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return nil, fmt.Errorf("dataset: export task runs: %w", err)
		}
		return writeHF(a, outDir)
	default:
		return nil, unknownFormat("export task runs", format, TaskRunFormats())
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return nil, fmt.Errorf("dataset: export task runs: %w", err)
	}
	path := filepath.Join(outDir, name)
	if err := writeFileAtomic(path, func(w io.Writer) error { return write(w, a) }); err != nil {
		return nil, err
	}
	return []string{path}, nil
}

// WriteTaskRunsJSONL writes the rows of a to w as JSON Lines: one object
// per row, keys in TaskRunRow order, every key present (null for a missing
// value), no HTML escaping, '\n' after each line. It returns an error
// naming the cell whose blocks cannot be encoded (see ExportTaskRuns), or
// the write error. w is not closed.
func WriteTaskRunsJSONL(w io.Writer, a *artifact.Artifact) error {
	if err := writeJSONL(w, a); err != nil {
		return fmt.Errorf("dataset: write jsonl: %w", err)
	}
	return nil
}

func writeJSONL(w io.Writer, a *artifact.Artifact) error {
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	err := eachBatch(a, func(rows []TaskRunRow) error {
		for i := range rows {
			if err := enc.Encode(&rows[i]); err != nil {
				return fmt.Errorf("cell %s: %w", rows[i].CellID, err)
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return bw.Flush()
}

// ParquetWriterOptions are the writer options of every Parquet file this
// package writes: zstd compression on every column, row groups of at most
// 131,072 rows, MetadataKey = SchemaVersion in the key-value metadata, and
// no min/max page bounds for the columns named in blobs (JSON text and
// other free text, where bounds serve no filter and cost write time).
func ParquetWriterOptions(blobs ...string) []parquet.WriterOption {
	opts := []parquet.WriterOption{
		parquet.Compression(&parquet.Zstd),
		parquet.MaxRowsPerRowGroup(parquetRowGroupRows),
		parquet.KeyValueMetadata(MetadataKey, SchemaVersion),
	}
	for _, b := range blobs {
		opts = append(opts, parquet.SkipPageBounds(b))
	}
	return opts
}

// taskRunBlobs are the free-text columns of TaskRunRow.
var taskRunBlobs = []string{"output_dir", "error", "stdout_tail", "task_metadata_json", "metrics_json", "operations_json", "rewards_json", "steps_json"}

// WriteTaskRunsParquet writes the rows of a to w as one Parquet file with
// ParquetWriterOptions (no page bounds for the free-text and JSON columns);
// the schema is TaskRunRow's (SCHEMA.md). w is not
// closed. Errors are those of WriteTaskRunsJSONL.
func WriteTaskRunsParquet(w io.Writer, a *artifact.Artifact) error {
	if err := writeParquet(w, a); err != nil {
		return fmt.Errorf("dataset: write parquet: %w", err)
	}
	return nil
}

func writeParquet(w io.Writer, a *artifact.Artifact) error {
	pw := parquet.NewGenericWriter[TaskRunRow](w, ParquetWriterOptions(taskRunBlobs...)...)
	err := eachBatch(a, func(rows []TaskRunRow) error {
		_, err := pw.Write(rows)
		return err
	})
	if err != nil {
		return err
	}
	return pw.Close()
}

// eachBatch converts the results of a, batch by batch, on a goroutine of
// its own, and calls fn on the caller's goroutine with each batch in order,
// so conversion overlaps with fn's writing. The rows passed to fn are
// valid only during the call. It stops at the first conversion or fn
// error and returns it; the goroutine has ended when eachBatch returns.
func eachBatch(a *artifact.Artifact, fn func([]TaskRunRow) error) error {
	if a == nil {
		return fmt.Errorf("nil artifact")
	}
	if len(a.Results) == 0 {
		return nil
	}
	n := min(batchRows, len(a.Results))
	type batch struct {
		buf, rows []TaskRunRow
		c         *converter
		err       error
	}
	// depth batches circulate: one being converted, one being written, one
	// ready; neither channel send below can block on a full channel.
	const depth = 3
	free := make(chan *batch, depth)
	full := make(chan *batch, depth)
	for range depth {
		free <- &batch{buf: make([]TaskRunRow, n), c: newConverter(a.Run.ID, n)}
	}
	stop := make(chan struct{})
	go func() {
		defer close(full)
		for start := 0; start < len(a.Results); start += n {
			var b *batch
			select {
			case b = <-free:
			case <-stop:
				return
			}
			b.rows = b.buf[:min(n, len(a.Results)-start)]
			b.c.reset()
			for i := range b.rows {
				if b.err = b.c.convert(&b.rows[i], &a.Results[start+i]); b.err != nil {
					full <- b
					return
				}
			}
			b.c.finish()
			full <- b
		}
	}()
	var err error
	for b := range full {
		if err == nil {
			if err = b.err; err == nil {
				err = fn(b.rows)
			}
			if err != nil {
				close(stop)
			}
		}
		free <- b
	}
	return err
}

// writeFileAtomic writes path through atomicfile.Write.
func writeFileAtomic(path string, write func(io.Writer) error) error {
	if err := atomicfile.Write(path, write); err != nil {
		return fmt.Errorf("dataset: %w", err)
	}
	return nil
}
