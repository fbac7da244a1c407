package artifact

import (
	"bytes"
	"encoding/json"
	"flag"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// fixture is a *.input.json file: the run and its rows, in any order.
type fixture struct {
	Run     RunInfo  `json:"run"`
	Results []Result `json:"results"`
}

func loadFixture(t *testing.T, path string) fixture {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f fixture
	if err := dec.Decode(&f); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return f
}

// TestGolden builds every testdata/*.input.json into an artifact and a
// report and compares them byte for byte with *.artifact.json and
// *.report.md beside it. Run with -update to rewrite them.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.input.json")
	if err != nil {
		t.Fatal(err)
	}
	if len(inputs) == 0 {
		t.Fatal("no testdata/*.input.json fixtures")
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".input.json")
		t.Run(name, func(t *testing.T) {
			f := loadFixture(t, in)
			a := Build(f.Run, f.Results, testBuild)
			got, err := Marshal(a)
			if err != nil {
				t.Fatalf("Marshal: %v", err)
			}
			var report bytes.Buffer
			if err := WriteReport(&report, a); err != nil {
				t.Fatalf("WriteReport: %v", err)
			}
			checkGolden(t, filepath.Join("testdata", name+".artifact.json"), got)
			checkGolden(t, filepath.Join("testdata", name+".report.md"), report.Bytes())
		})
	}
}

func checkGolden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the built output (go test -update rewrites it)\n%s", path, firstDiff(want, got))
	}
}

// firstDiff shows the first differing line of want and got.
func firstDiff(want, got []byte) string {
	wl := strings.Split(string(want), "\n")
	gl := strings.Split(string(got), "\n")
	for i := 0; i < max(len(wl), len(gl)); i++ {
		var w, g string
		if i < len(wl) {
			w = wl[i]
		}
		if i < len(gl) {
			g = gl[i]
		}
		if w != g {
			return "line " + strconv.Itoa(i+1) + ":\n  want: " + w + "\n  got:  " + g
		}
	}
	return "(same lines, different bytes)"
}

// TestDeterministic builds each fixture from several shuffles of its rows
// and requires identical artifact and report bytes.
func TestDeterministic(t *testing.T) {
	inputs, _ := filepath.Glob("testdata/*.input.json")
	for _, in := range inputs {
		f := loadFixture(t, in)
		var firstJSON, firstMD []byte
		rng := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 5; i++ {
			rows := append([]Result(nil), f.Results...)
			rng.Shuffle(len(rows), func(a, b int) { rows[a], rows[b] = rows[b], rows[a] })
			a := Build(f.Run, rows, testBuild)
			js, err := Marshal(a)
			if err != nil {
				t.Fatalf("%s: %v", in, err)
			}
			var md bytes.Buffer
			if err := WriteReport(&md, a); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				firstJSON, firstMD = js, md.Bytes()
				continue
			}
			if !bytes.Equal(js, firstJSON) {
				t.Errorf("%s: shuffle %d gives different artifact bytes:\n%s", in, i, firstDiff(firstJSON, js))
			}
			if !bytes.Equal(md.Bytes(), firstMD) {
				t.Errorf("%s: shuffle %d gives a different report:\n%s", in, i, firstDiff(firstMD, md.Bytes()))
			}
		}
	}
}
