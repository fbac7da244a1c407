package artifact

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"

	"github.com/proctor-eval/proctor/schemas"
)

// SchemaFile is the name of the task_runs.v1 JSON Schema in schemas.FS.
const SchemaFile = "task_runs.v1.schema.json"

// schemaURL is the $id of the embedded schema.
const schemaURL = "https://github.com/proctor-eval/proctor/schemas/task_runs.v1.schema.json"

var (
	schemaOnce sync.Once
	schema     *jsonschema.Schema
	schemaErr  error
)

// compiled returns the task_runs.v1 schema, compiled once from schemas.FS.
// Formats (date-time) are asserted, not only annotated.
func compiled() (*jsonschema.Schema, error) {
	schemaOnce.Do(func() {
		raw, err := schemas.FS.ReadFile(SchemaFile)
		if err != nil {
			schemaErr = fmt.Errorf("artifact: read embedded %s: %w", SchemaFile, err)
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
		if err != nil {
			schemaErr = fmt.Errorf("artifact: parse embedded %s: %w", SchemaFile, err)
			return
		}
		c := jsonschema.NewCompiler()
		c.DefaultDraft(jsonschema.Draft2020)
		c.AssertFormat()
		if err := c.AddResource(schemaURL, doc); err != nil {
			schemaErr = fmt.Errorf("artifact: add %s: %w", SchemaFile, err)
			return
		}
		schema, schemaErr = c.Compile(schemaURL)
		if schemaErr != nil {
			schemaErr = fmt.Errorf("artifact: compile %s: %w", SchemaFile, schemaErr)
		}
	})
	return schema, schemaErr
}

// Violation is one value of a document that breaks the schema.
type Violation struct {
	// Pointer is the RFC 6901 JSON pointer of the failing value, e.g.
	// "/results/0/reward"; "" is the document root. For a missing key it
	// points at the object that lacks it.
	Pointer string
	// Message says what is wrong, e.g. "must be <= 1 but found 1.5".
	Message string
}

// ValidationError is returned by Validate when a document is well-formed
// JSON but not a valid task_runs.v1 document.
type ValidationError struct {
	// Violations are the failing values, sorted by pointer then message;
	// never empty.
	Violations []Violation
}

// Error names the first failing value and how many more there are, e.g.
// `task_runs.v1: /results/0/reward: must be <= 1 but found 1.5`.
func (e *ValidationError) Error() string {
	v := e.Violations[0]
	ptr := v.Pointer
	if ptr == "" {
		ptr = "(root)"
	}
	msg := fmt.Sprintf("%s: %s: %s", SchemaVersion, ptr, v.Message)
	if n := len(e.Violations) - 1; n > 0 {
		msg += fmt.Sprintf(" (and %d more)", n)
	}
	return msg
}

var printer = message.NewPrinter(language.English)

// Validate checks doc against the embedded task_runs.v1 JSON Schema
// (schemas/task_runs.v1.schema.json, draft 2020-12). It returns nil for a
// valid document, a *ValidationError naming the JSON pointer of every
// failing value, or a plain error when doc is not JSON at all.
func Validate(doc []byte) error {
	sch, err := compiled()
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("%s: not a JSON document: %w", SchemaVersion, err)
	}
	err = sch.Validate(inst)
	if err == nil {
		return nil
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return fmt.Errorf("%s: %w", SchemaVersion, err)
	}
	var out []Violation
	collect(verr, &out)
	if len(out) == 0 {
		out = append(out, Violation{Pointer: pointer(verr.InstanceLocation), Message: verr.Error()})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Pointer != out[j].Pointer {
			return out[i].Pointer < out[j].Pointer
		}
		return out[i].Message < out[j].Message
	})
	return &ValidationError{Violations: dedupe(out)}
}

// collect appends the leaves of the error tree: the causes that say what
// is wrong rather than which subschema failed.
func collect(e *jsonschema.ValidationError, out *[]Violation) {
	if len(e.Causes) == 0 {
		msg := e.ErrorKind.LocalizedString(printer)
		// The library's enum and const messages leave out the value found.
		switch k := e.ErrorKind.(type) {
		case *kind.Enum:
			msg += ", got " + quoteValue(k.Got)
		case *kind.Const:
			msg += ", got " + quoteValue(k.Got)
		}
		*out = append(*out, Violation{Pointer: pointer(e.InstanceLocation), Message: msg})
		return
	}
	for _, c := range e.Causes {
		collect(c, out)
	}
}

func dedupe(vs []Violation) []Violation {
	out := vs[:0]
	for i, v := range vs {
		if i > 0 && v == vs[i-1] {
			continue
		}
		out = append(out, v)
	}
	return out
}

// quoteValue renders a JSON value found in a document for an error.
func quoteValue(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// pointer renders tokens as an RFC 6901 JSON pointer.
func pointer(tokens []string) string {
	var sb strings.Builder
	for _, t := range tokens {
		sb.WriteByte('/')
		t = strings.ReplaceAll(t, "~", "~0")
		sb.WriteString(strings.ReplaceAll(t, "/", "~1"))
	}
	return sb.String()
}
