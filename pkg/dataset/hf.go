package dataset

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"path/filepath"
	"reflect"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/proctor-eval/proctor/pkg/artifact"
)

// arrowBatchRows is the number of rows per Arrow record batch.
const arrowBatchRows = 8192

// colKind is the Go shape of a TaskRunRow field, which decides its Arrow
// type and its Hugging Face feature.
type colKind int

const (
	kString colKind = iota
	kStringPtr
	kInt64
	kInt64Ptr
	kFloat64
	kFloat64Ptr
	kBool
	kBoolPtr
	kStrings
)

// column is one TaskRunRow field as an Arrow column.
type column struct {
	field int // index in TaskRunRow
	name  string
	kind  colKind
}

// taskRunColumns lists TaskRunRow's fields in order, named by their parquet
// tag; it is derived from the struct so the Arrow, Parquet and JSONL
// layouts cannot drift apart.
var taskRunColumns = columnsOf(reflect.TypeFor[TaskRunRow]())

func columnsOf(t reflect.Type) []column {
	cols := make([]column, 0, t.NumField())
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
		var k colKind
		switch f.Type {
		case reflect.TypeFor[string]():
			k = kString
		case reflect.TypeFor[*string]():
			k = kStringPtr
		case reflect.TypeFor[int64]():
			k = kInt64
		case reflect.TypeFor[*int64]():
			k = kInt64Ptr
		case reflect.TypeFor[float64]():
			k = kFloat64
		case reflect.TypeFor[*float64]():
			k = kFloat64Ptr
		case reflect.TypeFor[bool]():
			k = kBool
		case reflect.TypeFor[*bool]():
			k = kBoolPtr
		case reflect.TypeFor[[]string]():
			k = kStrings
		default:
			panic(fmt.Sprintf("dataset: field %s has type %s, which has no Arrow column", f.Name, f.Type))
		}
		cols = append(cols, column{field: i, name: name, kind: k})
	}
	return cols
}

// arrowType is the Arrow type of a column kind, the one datasets maps the
// feature of hfFeature to (Value("string") is pa.string(), Sequence of a
// string Value is pa.list_(pa.string())).
func (k colKind) arrowType() arrow.DataType {
	switch k {
	case kString, kStringPtr:
		return arrow.BinaryTypes.String
	case kInt64, kInt64Ptr:
		return arrow.PrimitiveTypes.Int64
	case kFloat64, kFloat64Ptr:
		return arrow.PrimitiveTypes.Float64
	case kBool, kBoolPtr:
		return arrow.FixedWidthTypes.Boolean
	default: // kStrings
		return arrow.ListOf(arrow.BinaryTypes.String)
	}
}

// hfFeature is the datasets feature of a column kind, as
// Features.to_dict() writes it.
func (k colKind) hfFeature() any {
	value := func(dtype string) orderedMap { return orderedMap{{"dtype", dtype}, {"_type", "Value"}} }
	switch k {
	case kString, kStringPtr:
		return value("string")
	case kInt64, kInt64Ptr:
		return value("int64")
	case kFloat64, kFloat64Ptr:
		return value("float64")
	case kBool, kBoolPtr:
		return value("bool")
	default: // kStrings
		return orderedMap{{"feature", value("string")}, {"_type", "Sequence"}}
	}
}

// orderedMap is a JSON object whose keys keep their order (datasets writes
// features in column order and Value/Sequence keys as dataclasses list them).
type orderedMap []struct {
	k string
	v any
}

func (m orderedMap) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, kv := range m {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(kv.k)
		b.Write(k)
		b.WriteByte(':')
		v, err := json.Marshal(kv.v)
		if err != nil {
			return nil, err
		}
		b.Write(v)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// hfFeatures is the datasets Features dict of TaskRunRow, in column order.
func hfFeatures() orderedMap {
	m := make(orderedMap, 0, len(taskRunColumns))
	for _, c := range taskRunColumns {
		m = append(m, struct {
			k string
			v any
		}{c.name, c.kind.hfFeature()})
	}
	return m
}

// TaskRunsArrowSchema returns the Arrow schema of the task runs table
// (SCHEMA.md). Every field is nullable, as datasets declares the fields of
// Features.arrow_schema; columns that are never null in SCHEMA.md hold no
// nulls. The metadata holds MetadataKey = SchemaVersion and, under
// "huggingface", {"info": {"features": ...}} as datasets' ArrowWriter
// stores it.
func TaskRunsArrowSchema() *arrow.Schema {
	fields := make([]arrow.Field, len(taskRunColumns))
	for i, c := range taskRunColumns {
		fields[i] = arrow.Field{Name: c.name, Type: c.kind.arrowType(), Nullable: true}
	}
	hf, err := json.Marshal(map[string]any{"info": map[string]any{"features": hfFeatures()}})
	if err != nil {
		panic(err) // constant input
	}
	md := arrow.NewMetadata([]string{"huggingface", MetadataKey}, []string{string(hf), SchemaVersion})
	return arrow.NewSchema(fields, &md)
}

// WriteTaskRunsArrow writes the rows of a to w as an Arrow IPC stream (the
// format datasets keeps its .arrow files in and reads with
// pyarrow.ipc.open_stream), schema TaskRunsArrowSchema, record batches of
// up to 8,192 rows, uncompressed. w is not closed. Errors are those of
// WriteTaskRunsJSONL.
func WriteTaskRunsArrow(w io.Writer, a *artifact.Artifact) error {
	if err := writeArrow(w, a); err != nil {
		return fmt.Errorf("dataset: write arrow: %w", err)
	}
	return nil
}

func writeArrow(w io.Writer, a *artifact.Artifact) error {
	schema := TaskRunsArrowSchema()
	mem := memory.NewGoAllocator()
	iw := ipc.NewWriter(w, ipc.WithSchema(schema), ipc.WithAllocator(mem))
	rb := array.NewRecordBuilder(mem, schema)
	defer rb.Release()
	pending := 0
	flush := func() error {
		if pending == 0 {
			return nil
		}
		rec := rb.NewRecordBatch()
		defer rec.Release()
		pending = 0
		return iw.Write(rec)
	}
	err := eachBatch(a, func(rows []TaskRunRow) error {
		for i := range rows {
			appendArrowRow(rb, reflect.ValueOf(&rows[i]).Elem())
			if pending++; pending == arrowBatchRows {
				if err := flush(); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if err != nil {
		iw.Close()
		return err
	}
	return iw.Close()
}

// appendArrowRow appends one TaskRunRow (row) to the builders of rb.
func appendArrowRow(rb *array.RecordBuilder, row reflect.Value) {
	for i, c := range taskRunColumns {
		v := row.Field(c.field)
		b := rb.Field(i)
		switch c.kind {
		case kString:
			b.(*array.StringBuilder).Append(v.String())
		case kInt64:
			b.(*array.Int64Builder).Append(v.Int())
		case kFloat64:
			b.(*array.Float64Builder).Append(v.Float())
		case kBool:
			b.(*array.BooleanBuilder).Append(v.Bool())
		case kStringPtr, kInt64Ptr, kFloat64Ptr, kBoolPtr:
			if v.IsNil() {
				b.AppendNull()
				continue
			}
			e := v.Elem()
			switch c.kind {
			case kStringPtr:
				b.(*array.StringBuilder).Append(e.String())
			case kInt64Ptr:
				b.(*array.Int64Builder).Append(e.Int())
			case kBoolPtr:
				b.(*array.BooleanBuilder).Append(e.Bool())
			default:
				b.(*array.Float64Builder).Append(e.Float())
			}
		case kStrings:
			lb := b.(*array.ListBuilder)
			if v.IsNil() {
				lb.AppendNull()
				continue
			}
			lb.Append(true)
			sb := lb.ValueBuilder().(*array.StringBuilder)
			for j := range v.Len() {
				sb.Append(v.Index(j).String())
			}
		}
	}
}

// hfDatasetInfo is dataset_info.json as save_to_disk writes it for a
// dataset built in memory: asdict(DatasetInfo) keeps the four text fields
// and the features (the other fields are at their defaults and left out),
// top-level keys sorted, 2-space indent.
func hfDatasetInfo() ([]byte, error) {
	info := orderedMap{
		{"citation", ""},
		{"description", "proctor task runs, one row per cell; columns documented in " + SchemaVersion},
		{"features", hfFeatures()},
		{"homepage", ""},
		{"license", ""},
	}
	raw, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, raw, "", "  "); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// hfState is state.json as save_to_disk writes it: the dataset's
// fingerprint and format state (no format set), no split, one data file;
// keys sorted, 2-space indent.
type hfState struct {
	DataFiles        []hfDataFile   `json:"_data_files"`
	Fingerprint      string         `json:"_fingerprint"`
	FormatColumns    []string       `json:"_format_columns"`
	FormatKwargs     map[string]any `json:"_format_kwargs"`
	FormatType       *string        `json:"_format_type"`
	OutputAllColumns bool           `json:"_output_all_columns"`
	Split            *string        `json:"_split"`
}

type hfDataFile struct {
	Filename string `json:"filename"`
}

// writeHF writes the Hugging Face layout into dir (which exists). The
// fingerprint is the first 16 hex digits of the SHA-256 of the Arrow file,
// so the same artifact always gives the same three files.
func writeHF(a *artifact.Artifact, dir string) ([]string, error) {
	dataPath := filepath.Join(dir, HFDataFile)
	var h hash.Hash = sha256.New()
	err := writeFileAtomic(dataPath, func(w io.Writer) error {
		return writeArrow(io.MultiWriter(w, h), a)
	})
	if err != nil {
		return nil, err
	}
	info, err := hfDatasetInfo()
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", filepath.Join(dir, HFInfoFile), err)
	}
	state, err := json.MarshalIndent(hfState{
		DataFiles:    []hfDataFile{{Filename: HFDataFile}},
		Fingerprint:  hex.EncodeToString(h.Sum(nil))[:16],
		FormatKwargs: map[string]any{},
	}, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dataset: %s: %w", filepath.Join(dir, HFStateFile), err)
	}
	paths := []string{dataPath}
	for _, f := range []struct {
		name string
		data []byte
	}{{HFInfoFile, info}, {HFStateFile, state}} {
		p := filepath.Join(dir, f.name)
		err := writeFileAtomic(p, func(w io.Writer) error { _, err := w.Write(f.data); return err })
		if err != nil {
			return nil, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}
