package dataset

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/parquet-go/parquet-go"
)

// schemaRows returns the (column, type) rows of the numbered table in the
// section of SCHEMA.md that starts with heading.
func schemaRows(t *testing.T, heading string) [][2]string {
	t.Helper()
	section := schemaSection(t, heading)
	re := regexp.MustCompile("(?m)^\\| \\d+ \\| `([a-z_0-9]+)` \\| ([^|]+) \\|")
	var rows [][2]string
	for _, m := range re.FindAllStringSubmatch(section, -1) {
		rows = append(rows, [2]string{m[1], strings.TrimSpace(m[2])})
	}
	return rows
}

// SCHEMA.md documents exactly the columns the code writes, in order.
func TestSchemaDocMatchesCode(t *testing.T) {
	docTypes := map[string]string{"VARCHAR": "string", "BIGINT": "int64", "DOUBLE": "float64", "BOOLEAN": "bool", "VARCHAR[]": "list of string"}
	rows := schemaRows(t, "## Table `task_runs`")
	if len(rows) != len(wantColumns) {
		t.Fatalf("SCHEMA.md lists %d task_runs columns, the code writes %d", len(rows), len(wantColumns))
	}
	for i, r := range rows {
		w := wantColumns[i]
		typ, _, _ := strings.Cut(r[1], " (") // "string (JSON object)"
		if r[0] != w.name || typ != docTypes[w.duck] {
			t.Errorf("SCHEMA.md task_runs column %d = %s %s, code writes %s %s", i+1, r[0], r[1], w.name, docTypes[w.duck])
		}
	}
	evRows := schemaRows(t, "## Table `events`")
	evCols := parquetNames(reflect.TypeFor[EventRow]())
	if len(evRows) != len(evCols) {
		t.Fatalf("SCHEMA.md lists %d events columns, the code writes %d", len(evRows), len(evCols))
	}
	for i, r := range evRows {
		if r[0] != evCols[i] {
			t.Errorf("SCHEMA.md events column %d = %s, code writes %s", i+1, r[0], evCols[i])
		}
	}
}

// The JSONL key of every column is its Parquet/Arrow name.
func TestTagsAgree(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeFor[TaskRunRow](), reflect.TypeFor[EventRow]()} {
		for i := range typ.NumField() {
			f := typ.Field(i)
			pq, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
			js, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if pq == "" || pq != js {
				t.Errorf("%s.%s: parquet name %q, json name %q", typ.Name(), f.Name, pq, js)
			}
		}
	}
	names := parquetNames(reflect.TypeFor[TaskRunRow]())
	for i, c := range wantColumns {
		if i >= len(names) || names[i] != c.name {
			t.Fatalf("TaskRunRow columns %v, want %v", names, columnNames())
		}
	}
}

func parquetNames(typ reflect.Type) []string {
	out := make([]string, typ.NumField())
	for i := range typ.NumField() {
		out[i], _, _ = strings.Cut(typ.Field(i).Tag.Get("parquet"), ",")
	}
	return out
}

// schemaNullable returns, for the numbered table of the section of
// SCHEMA.md that starts with heading, each column's name and whether its
// "null when" cell says anything but "never".
func schemaNullable(t *testing.T, heading string) map[string]bool {
	t.Helper()
	section := schemaSection(t, heading)
	re := regexp.MustCompile("(?m)^\\| \\d+ \\| `([a-z_0-9]+)` \\| [^|]+ \\| ([^|]+) \\|")
	out := map[string]bool{}
	for _, m := range re.FindAllStringSubmatch(section, -1) {
		null := strings.TrimSpace(m[2])
		out[m[1]] = null != "never" && !strings.HasPrefix(null, "never (")
	}
	return out
}

// Each Parquet column's repetition is what SCHEMA.md says of it: a column
// that is never null is REQUIRED, every other OPTIONAL, in both tables'
// files as written.
func TestParquetRepetitionMatchesSchemaDoc(t *testing.T) {
	_, paths := export(t, fixtureArtifact(t), FormatParquet)
	evPath := filepath.Join(t.TempDir(), "events.parquet")
	f, err := os.Create(evPath)
	if err != nil {
		t.Fatal(err)
	}
	if err := ExportEvents(fixtureEvents(t), f, FormatParquet); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ heading, path string }{{"## Table `task_runs`", paths[0]}, {"## Table `events`", evPath}} {
		nullable := schemaNullable(t, c.heading)
		pf := openParquet(t, c.path)
		fields := pf.Schema().Fields()
		if len(fields) != len(nullable) {
			t.Fatalf("%s: %d columns, SCHEMA.md lists %d", c.path, len(fields), len(nullable))
		}
		for _, fld := range fields {
			if want, got := nullable[fld.Name()], fld.Optional(); got != want {
				t.Errorf("%s column %s: OPTIONAL=%v in the file, SCHEMA.md says nullable=%v", filepath.Base(c.path), fld.Name(), got, want)
			}
		}
	}
	doc, err := os.ReadFile("SCHEMA.md")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(doc), "all columns `OPTIONAL`") || strings.Contains(string(doc), "Every column is declared `OPTIONAL`") {
		t.Error("SCHEMA.md still says every Parquet column is OPTIONAL")
	}
}

func openParquet(t *testing.T, path string) *parquet.File {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	pf, err := parquet.OpenFile(f, st.Size())
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pf
}

// schemaSection is the text of SCHEMA.md's section that starts with
// heading, up to the next section.
func schemaSection(t *testing.T, heading string) string {
	t.Helper()
	doc, err := os.ReadFile("SCHEMA.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(doc), heading)
	if !ok {
		t.Fatalf("SCHEMA.md has no section %q", heading)
	}
	if i := strings.Index(section, "\n## "); i >= 0 {
		section = section[:i]
	}
	return section
}
