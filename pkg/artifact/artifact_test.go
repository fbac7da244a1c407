package artifact

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func oracleArtifact(t *testing.T) *Artifact {
	t.Helper()
	f := loadFixture(t, "testdata/oracle.input.json")
	return Build(f.Run, f.Results, testBuild)
}

func TestWriteFileReadRoundTrip(t *testing.T) {
	a := oracleArtifact(t)
	path := filepath.Join(t.TempDir(), "task_runs.json")
	if err := WriteFile(path, a); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Errorf("Read(WriteFile(a)) differs from a")
	}
	data, _ := os.ReadFile(path)
	again, err := Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(data, again) {
		t.Errorf("re-marshalled bytes differ:\n%s", firstDiff(data, again))
	}
	if !bytes.HasSuffix(data, []byte("}\n")) || bytes.HasSuffix(data, []byte("\n\n")) {
		t.Errorf("file does not end with exactly one newline")
	}
	if !bytes.HasPrefix(data, []byte("{\n  \"schema\": \"task_runs.v1\",\n")) {
		t.Errorf("unexpected head: %q", data[:40])
	}
}

// An invalid artifact is never written: the previous file stays intact
// and no temporary file is left behind.
func TestWriteFileRefusesInvalid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "task_runs.json")
	good := oracleArtifact(t)
	if err := WriteFile(path, good); err != nil {
		t.Fatal(err)
	}
	before, _ := os.ReadFile(path)

	bad := oracleArtifact(t)
	bad.Results[0].Reward = f64(1.5)
	err := WriteFile(path, bad)
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("WriteFile = %v, want a *ValidationError", err)
	}
	if !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "/results/0/reward") {
		t.Errorf("error %q should name the file and the pointer", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Errorf("an invalid artifact changed %s", path)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("directory holds %v, want only task_runs.json", names)
	}
}

func TestMarshalRejectsNaN(t *testing.T) {
	a := oracleArtifact(t)
	a.Results[0].ElapsedSec = nan()
	if _, err := Marshal(a); err == nil {
		t.Fatal("Marshal accepted a NaN")
	}
}

func nan() float64 { z := 0.0; return z / z }

func TestMarshalNilCollections(t *testing.T) {
	a := &Artifact{Run: RunInfo{ID: "r", Repeats: 1, StartedAt: "2026-01-01T00:00:00Z"}}
	data, err := Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"harnesses": []`, `"models": []`, `"results": []`, `"per_harness": {}`} {
		if !bytes.Contains(data, []byte(want)) {
			t.Errorf("missing %s in\n%s", want, data)
		}
	}
	if a.Run.Harnesses != nil || a.Results != nil || a.Summary.PerHarness != nil {
		t.Error("Marshal modified its argument")
	}
}

func TestReadRejectsInvalid(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.json")
	data, _ := os.ReadFile("testdata/oracle.artifact.json")
	data = bytes.Replace(data, []byte(`"outcome": "passed"`), []byte(`"outcome": "won"`), 1)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Read(path)
	var verr *ValidationError
	if !errors.As(err, &verr) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "/outcome") {
		t.Fatalf("Read = %v, want a *ValidationError naming %s and the outcome pointer", err, path)
	}
	if _, err := Read(filepath.Join(dir, "missing.json")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Read(missing) = %v, want os.ErrNotExist", err)
	}
}
