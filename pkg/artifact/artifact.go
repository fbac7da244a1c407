package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/proctor-eval/proctor/pkg/atomicfile"
)

// Marshal encodes a as deterministic task_runs.v1 JSON: 2-space indent,
// object keys in struct order and map keys sorted (as encoding/json does),
// no HTML escaping, one trailing newline. Nil Results, Run.Harnesses,
// Run.Models, Summary.PerHarness and per-task maps are written as empty
// arrays/objects, never null. The bytes are validated against the schema
// before they are returned; a document that does not validate gives a
// *ValidationError and no bytes. A NaN or infinite float is an encoding
// error.
func Marshal(a *Artifact) ([]byte, error) {
	if a == nil {
		return nil, fmt.Errorf("artifact: marshal: nil artifact")
	}
	n := normalized(a)
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(n); err != nil {
		return nil, fmt.Errorf("artifact: marshal: %w", err)
	}
	out := buf.Bytes()
	if err := Validate(out); err != nil {
		return nil, err
	}
	return out, nil
}

// normalized returns a shallow copy of a whose nil collections that the
// schema requires are empty, so they encode as [] or {} instead of null.
func normalized(a *Artifact) *Artifact {
	n := *a
	if n.Schema == "" {
		n.Schema = SchemaVersion
	}
	if n.Run.Harnesses == nil {
		n.Run.Harnesses = []string{}
	}
	if n.Run.Models == nil {
		n.Run.Models = []string{}
	}
	if n.Results == nil {
		n.Results = []Result{}
	}
	ph := make(map[string]*HarnessSummary, len(n.Summary.PerHarness))
	for h, s := range n.Summary.PerHarness {
		if s != nil && s.PerTask == nil {
			c := *s
			c.PerTask = map[string]*TaskStat{}
			s = &c
		}
		ph[h] = s
	}
	n.Summary.PerHarness = ph
	return &n
}

// WriteFile marshals a (see Marshal) and writes it to path atomically: the
// bytes go to a temporary file in the same directory, which is synced and
// renamed over path only after validation passed. On any error path is
// left as it was. The file mode is 0644.
func WriteFile(path string, a *Artifact) error {
	data, err := Marshal(a)
	if err != nil {
		return fmt.Errorf("artifact: write %s: %w", path, err)
	}
	return writeAtomic(path, data)
}

func writeAtomic(path string, data []byte) error {
	if err := atomicfile.WriteBytes(path, data); err != nil {
		return fmt.Errorf("artifact: %w", err)
	}
	return nil
}

// Read loads a task_runs.v1 document from path. It returns an error naming
// path when the file cannot be read, is not JSON, or does not validate
// against the schema (wrapping a *ValidationError, see errors.As).
func Read(path string) (*Artifact, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("artifact: read: %w", err)
	}
	return Unmarshal(path, data)
}

// Unmarshal validates data against the schema and decodes it; name is
// used in errors (a file name, "-" for stdin).
func Unmarshal(name string, data []byte) (*Artifact, error) {
	if err := Validate(data); err != nil {
		return nil, fmt.Errorf("artifact: read %s: %w", name, err)
	}
	var a Artifact
	if err := json.Unmarshal(data, &a); err != nil {
		return nil, fmt.Errorf("artifact: read %s: %w", name, err)
	}
	return &a, nil
}

// ReportPath is where the Markdown report of the artifact at path goes
// unless told otherwise: beside it, its extension replaced by .md
// (results/x.json → results/x.md; a name without an extension gains .md;
// an artifact named *.md gets *.md.md, never its own name).
func ReportPath(path string) string {
	md := strings.TrimSuffix(path, filepath.Ext(path)) + ".md"
	if md == path {
		md = path + ".md"
	}
	return md
}
