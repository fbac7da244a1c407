// Package dataset turns proctor results into files that notebooks read:
// one flat row per cell of a task_runs.v1 artifact (TaskRunRow), and one row
// per event of the raw log (EventRow), written as JSONL, Parquet
// (github.com/parquet-go/parquet-go, zstd, typed nullable columns) or, for
// task runs, a Hugging Face dataset directory (Arrow IPC stream file written
// with github.com/apache/arrow-go/v18, plus dataset_info.json and state.json
// as datasets.Dataset.save_to_disk writes them, so datasets.load_from_disk
// reads it).
//
// The column names and types of every format are the contract documented
// in SCHEMA.md next to this file; SchemaVersion names that contract and is
// written into the Parquet key-value metadata and the Arrow schema metadata.
// Columns are only ever added in a new version, never renamed or retyped.
//
// Null is never zero: a value the artifact or the event does not carry (a
// reward of a cell without verdict, token counts an agent did not report)
// is a null, and a recorded 0 stays 0.
package dataset

import (
	"fmt"
	"strings"
)

// SchemaVersion names the column layout of SCHEMA.md. It is stored under the
// key MetadataKey of Parquet files and of the Arrow schema.
const SchemaVersion = "proctor.dataset.v1"

// MetadataKey is the Parquet key-value metadata key (and Arrow schema
// metadata key) holding SchemaVersion.
const MetadataKey = "proctor.dataset.schema"

// Output formats.
const (
	// FormatJSONL is one JSON object per line (UTF-8, '\n' after each).
	FormatJSONL = "jsonl"
	// FormatParquet is one Parquet file, zstd-compressed.
	FormatParquet = "parquet"
	// FormatHF is a Hugging Face datasets directory (load_from_disk layout).
	FormatHF = "hf"
)

// File names written by ExportTaskRuns.
const (
	TaskRunsJSONLFile   = "task_runs.jsonl"
	TaskRunsParquetFile = "task_runs.parquet"
	// HFDataFile is the single Arrow IPC stream shard, named as
	// save_to_disk names shard 0 of 1.
	HFDataFile = "data-00000-of-00001.arrow"
	// HFInfoFile and HFStateFile are datasets' config.DATASET_INFO_FILENAME
	// and config.DATASET_STATE_JSON_FILENAME.
	HFInfoFile  = "dataset_info.json"
	HFStateFile = "state.json"
)

// TaskRunFormats lists the formats ExportTaskRuns accepts.
func TaskRunFormats() []string { return []string{FormatJSONL, FormatParquet, FormatHF} }

// EventFormats lists the formats ExportEvents and NewEventWriter accept.
func EventFormats() []string { return []string{FormatJSONL, FormatParquet} }

// unknownFormat is the error for a format outside allowed.
func unknownFormat(what, format string, allowed []string) error {
	return fmt.Errorf("dataset: %s: unknown format %q (want one of %s)", what, format, strings.Join(allowed, ", "))
}
