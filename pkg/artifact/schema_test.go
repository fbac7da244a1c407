package artifact

import (
	"encoding/json"
	"errors"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/schemas"
)

// TestSchemaMatchesModel walks the Go model and the JSON Schema side by
// side and fails on any drift: a json key in one but not the other, a key
// required in the schema that Go may omit (or the reverse), a JSON type
// that differs (a Go pointer without omitempty must be nullable), and a
// $defs entry nothing uses.
func TestSchemaMatchesModel(t *testing.T) {
	raw, err := schemas.FS.ReadFile(SchemaFile)
	if err != nil {
		t.Fatal(err)
	}
	var root map[string]any
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	w := &schemaWalker{t: t, root: root, used: map[string]bool{}}
	w.walk("", reflect.TypeFor[Artifact](), root)
	defs, _ := root["$defs"].(map[string]any)
	for name := range defs {
		if !w.used[name] {
			t.Errorf("$defs/%s is never referenced", name)
		}
	}
}

type schemaWalker struct {
	t    *testing.T
	root map[string]any
	used map[string]bool
}

// resolve follows a local "#/$defs/<name>" reference.
func (w *schemaWalker) resolve(path string, node map[string]any) map[string]any {
	for {
		ref, ok := node["$ref"].(string)
		if !ok {
			return node
		}
		name, ok := strings.CutPrefix(ref, "#/$defs/")
		if !ok {
			w.t.Fatalf("%s: unsupported $ref %q", path, ref)
		}
		w.used[name] = true
		next, ok := w.root["$defs"].(map[string]any)[name].(map[string]any)
		if !ok {
			w.t.Fatalf("%s: $ref %q does not resolve", path, ref)
		}
		node = next
	}
}

// jsonTypes is the set of JSON types a Go type encodes to; nil for any.
func jsonTypes(typ reflect.Type, omitempty bool) []string {
	switch typ.Kind() {
	case reflect.Pointer:
		ts := jsonTypes(typ.Elem(), false)
		if !omitempty {
			ts = append(ts, "null")
		}
		return ts
	case reflect.String:
		return []string{"string"}
	case reflect.Bool:
		return []string{"boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return []string{"integer"}
	case reflect.Float32, reflect.Float64:
		return []string{"number"}
	case reflect.Slice, reflect.Array:
		return []string{"array"}
	case reflect.Map, reflect.Struct:
		return []string{"object"}
	case reflect.Interface:
		return nil
	}
	panic("unhandled kind " + typ.Kind().String())
}

func schemaTypes(node map[string]any) []string {
	switch v := node["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var out []string
		for _, x := range v {
			out = append(out, x.(string))
		}
		return out
	}
	return nil
}

func (w *schemaWalker) checkType(path string, typ reflect.Type, omitempty bool, node map[string]any) {
	want := jsonTypes(typ, omitempty)
	got := schemaTypes(node)
	sort.Strings(want)
	sort.Strings(got)
	if want != nil && !slices.Equal(want, got) {
		w.t.Errorf("%s: Go %s encodes as %v, schema says type %v", path, typ, want, got)
	}
}

// walk compares Go type typ with schema node at JSON path.
func (w *schemaWalker) walk(path string, typ reflect.Type, node map[string]any) {
	node = w.resolve(path, node)
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	switch typ.Kind() {
	case reflect.Struct:
		w.walkStruct(path, typ, node)
	case reflect.Map:
		sub, ok := node["additionalProperties"].(map[string]any)
		if !ok {
			if typ.Elem().Kind() != reflect.Interface {
				w.t.Errorf("%s: Go map of %s but the schema does not constrain its values", path, typ.Elem())
			}
			return
		}
		sub = w.resolve(path+"/*", sub)
		w.checkType(path+"/*", typ.Elem(), true, sub)
		w.walk(path+"/*", typ.Elem(), sub)
	case reflect.Slice, reflect.Array:
		sub, ok := node["items"].(map[string]any)
		if !ok {
			w.t.Errorf("%s: Go %s but the schema has no items", path, typ)
			return
		}
		sub = w.resolve(path+"/*", sub)
		w.checkType(path+"/*", typ.Elem(), true, sub)
		w.walk(path+"/*", typ.Elem(), sub)
		if typ.Kind() == reflect.Array {
			n := float64(typ.Len())
			if node["minItems"] != n || node["maxItems"] != n {
				w.t.Errorf("%s: Go array of %d but schema minItems/maxItems are %v/%v", path, typ.Len(), node["minItems"], node["maxItems"])
			}
		}
	}
}

func (w *schemaWalker) walkStruct(path string, typ reflect.Type, node map[string]any) {
	if node["additionalProperties"] != false {
		w.t.Errorf("%s: object for Go %s should have additionalProperties: false", path, typ)
	}
	props, _ := node["properties"].(map[string]any)
	var required []string
	for _, r := range node["required"].([]any) {
		required = append(required, r.(string))
	}
	seen := map[string]bool{}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || !f.IsExported() {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		omitempty := strings.Contains(opts, "omitempty")
		fpath := path + "/" + name
		seen[name] = true
		sub, ok := props[name].(map[string]any)
		if !ok {
			w.t.Errorf("%s: Go field %s.%s has no schema property", fpath, typ.Name(), f.Name)
			continue
		}
		if isReq := slices.Contains(required, name); isReq == omitempty {
			w.t.Errorf("%s: omitempty=%v but schema required=%v", fpath, omitempty, isReq)
		}
		sub = w.resolve(fpath, sub)
		w.checkType(fpath, f.Type, omitempty, sub)
		w.walk(fpath, f.Type, sub)
	}
	for name := range props {
		if !seen[name] {
			w.t.Errorf("%s/%s: schema property has no Go field in %s", path, name, typ.Name())
		}
	}
	for _, name := range required {
		if !seen[name] {
			w.t.Errorf("%s/%s: schema requires a key Go %s does not have", path, name, typ.Name())
		}
	}
}

// TestSchemaEnums keeps the schema's enums equal to the Go constants.
func TestSchemaEnums(t *testing.T) {
	raw, _ := schemas.FS.ReadFile(SchemaFile)
	var root struct {
		Defs struct {
			Result struct {
				Properties map[string]struct {
					Enum []string `json:"enum"`
				} `json:"properties"`
			} `json:"result"`
		} `json:"$defs"`
	}
	if err := json.Unmarshal(raw, &root); err != nil {
		t.Fatal(err)
	}
	outcomes := []string{OutcomePassed, OutcomeFailed, OutcomePartial, OutcomeSolverTimeout,
		OutcomeVerifierTimeout, OutcomeVerifierError, OutcomeErrored, OutcomePlanned}
	classes := []string{ErrorRefused, ErrorUnresolvedEnv, ErrorBuild, ErrorSandbox, ErrorSolver, ErrorInfra, ErrorUnavailable, ErrorCancelled, ErrorVerifier}
	for key, want := range map[string][]string{"outcome": outcomes, "error_class": classes} {
		got := root.Defs.Result.Properties[key].Enum
		if !slices.Equal(sorted(got), sorted(want)) {
			t.Errorf("%s enum = %v, Go constants = %v", key, got, want)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// validDoc is the oracle golden artifact, decoded to a generic tree.
func validDoc(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("testdata/oracle.artifact.json")
	if err != nil {
		t.Fatal(err)
	}
	if err := Validate(data); err != nil {
		t.Fatalf("golden artifact does not validate: %v", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestValidateRejects(t *testing.T) {
	row := func(d map[string]any, i int) map[string]any {
		return d["results"].([]any)[i].(map[string]any)
	}
	oracle := func(d map[string]any) map[string]any {
		return d["summary"].(map[string]any)["per_harness"].(map[string]any)["oracle"].(map[string]any)
	}
	cases := []struct {
		name    string
		mutate  func(d map[string]any)
		pointer string
		mention string
	}{
		{"bad outcome", func(d map[string]any) { row(d, 0)["outcome"] = "won" }, "/results/0/outcome", "won"},
		{"reward above 1", func(d map[string]any) { row(d, 1)["reward"] = 1.5 }, "/results/1/reward", "1.5"},
		{"negative reward", func(d map[string]any) { row(d, 1)["reward"] = -0.1 }, "/results/1/reward", "-0.1"},
		{"missing summary", func(d map[string]any) { delete(d, "summary") }, "", "summary"},
		{"missing outcome", func(d map[string]any) { delete(row(d, 2), "outcome") }, "/results/2", "outcome"},
		{"missing metrics.error", func(d map[string]any) { delete(row(d, 2)["metrics"].(map[string]any), "error") }, "/results/2/metrics", "error"},
		{"bad error_class", func(d map[string]any) { row(d, 7)["error_class"] = "oops" }, "/results/7/error_class", "oops"},
		{"errored without error_class", func(d map[string]any) { delete(row(d, 7), "error_class") }, "/results/7", "error_class"},
		{"errored but passed", func(d map[string]any) { row(d, 7)["passed"] = true }, "/results/7/passed", ""},
		{"unknown row key", func(d map[string]any) { row(d, 0)["score"] = 1 }, "/results/0", "score"},
		{"wrong schema name", func(d map[string]any) { d["schema"] = "task_runs.v2" }, "/schema", ""},
		{"bad started_at", func(d map[string]any) { d["run"].(map[string]any)["started_at"] = "yesterday" }, "/run/started_at", "date-time"},
		{"pass rate above 1", func(d map[string]any) { oracle(d)["pass_rate"] = 1.2 }, "/summary/per_harness/oracle/pass_rate", ""},
		{"CI of three bounds", func(d map[string]any) { oracle(d)["pass_rate_ci"] = []any{0.1, 0.2, 0.3} }, "/summary/per_harness/oracle/pass_rate_ci", ""},
		{"null count", func(d map[string]any) { oracle(d)["n"] = nil }, "/summary/per_harness/oracle/n", ""},
		{"bad isolation probe", func(d map[string]any) {
			row(d, 0)["metrics"].(map[string]any)["isolation_probe"] = map[string]any{"network": "leaky"}
		}, "/results/0/metrics/isolation_probe/network", "leaky"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := validDoc(t)
			c.mutate(d)
			data, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			err = Validate(data)
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate = %v, want a *ValidationError", err)
			}
			found := false
			for _, v := range verr.Violations {
				if v.Pointer == c.pointer && strings.Contains(v.Message, c.mention) {
					found = true
				}
			}
			if !found {
				t.Errorf("no violation at %q mentioning %q; got %+v", c.pointer, c.mention, verr.Violations)
			}
			if !strings.Contains(err.Error(), "task_runs.v1: ") {
				t.Errorf("error %q does not name the schema", err)
			}
		})
	}
}

func TestValidateErrorNamesPointer(t *testing.T) {
	d := validDoc(t)
	d["results"].([]any)[3].(map[string]any)["reward"] = 1.5
	data, _ := json.Marshal(d)
	err := Validate(data)
	if err == nil || !strings.HasPrefix(err.Error(), "task_runs.v1: /results/3/reward: ") {
		t.Fatalf("Validate = %v, want an error starting with the pointer /results/3/reward", err)
	}
}

func TestValidateNotJSON(t *testing.T) {
	err := Validate([]byte(`{"schema": "task_runs.v1",`))
	if err == nil || !strings.Contains(err.Error(), "not a JSON document") {
		t.Fatalf("Validate = %v, want a JSON syntax error", err)
	}
	var verr *ValidationError
	if errors.As(err, &verr) {
		t.Fatalf("a syntax error must not be a *ValidationError")
	}
}

// Validate compiles the schema once and is safe for concurrent use (run
// with -race).
func TestValidateConcurrent(t *testing.T) {
	data, err := os.ReadFile("testdata/agents.artifact.json")
	if err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() { errs <- Validate(data) }()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}
