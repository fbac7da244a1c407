package artifact

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// figureText parses an SVG as XML and returns its text content, so the
// test fails on a malformed document and can look for labels.
func figureText(t *testing.T, name string, svg []byte) string {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var text strings.Builder
	root := ""
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s: not well-formed XML: %v", name, err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			if root == "" {
				root = v.Name.Local
			}
		case xml.CharData:
			text.Write(v)
			text.WriteString("\n")
		}
	}
	if root != "svg" {
		t.Fatalf("%s: root element %q, want svg", name, root)
	}
	return text.String()
}

// TestFigures draws the figures of the agents fixture (two harnesses, a
// baseline, prices): all four kinds, valid SVG naming each harness, the
// same bytes on a second draw, and a report whose Figures section links
// each one after the unchanged report.
func TestFigures(t *testing.T) {
	f := loadFixture(t, filepath.Join("testdata", "agents.input.json"))
	a := Build(f.Run, f.Results, testBuild)
	figs, err := Figures(a)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, fg := range figs {
		names = append(names, fg.Name)
		text := figureText(t, fg.Name, fg.SVG)
		for _, h := range a.Run.Harnesses {
			if fg.Name != FigurePairedDiff && fg.Name != FigureCost && !strings.Contains(text, h) {
				t.Errorf("%s does not name harness %s", fg.Name, h)
			}
		}
	}
	want := []string{FigurePassRate, FigurePairedDiff, FigureCost, FigureOutcomeGrid}
	if strings.Join(names, ",") != strings.Join(want, ",") {
		t.Fatalf("figures %v, want %v", names, want)
	}
	again, err := Figures(a)
	if err != nil {
		t.Fatal(err)
	}
	for i := range figs {
		if !bytes.Equal(figs[i].SVG, again[i].SVG) {
			t.Errorf("%s: a second draw gives other bytes", figs[i].Name)
		}
	}

	var md bytes.Buffer
	if err := WriteReport(&md, a); err != nil {
		t.Fatal(err)
	}
	golden, err := os.ReadFile(filepath.Join("testdata", "agents.report.md"))
	if err != nil {
		t.Fatal(err)
	}
	out := AppendFigureLinks(md.Bytes(), figs)
	if !bytes.HasPrefix(out, golden) {
		t.Fatal("the report with figures does not start with the report without them")
	}
	tail := string(out[len(golden):])
	if !strings.HasPrefix(tail, "\n## Figures\n") {
		t.Fatalf("figures section starts %q", tail)
	}
	for _, fg := range figs {
		if !strings.Contains(tail, "]("+fg.Name+")") {
			t.Errorf("report does not link %s", fg.Name)
		}
	}
	if got := AppendFigureLinks(md.Bytes(), nil); !bytes.Equal(got, md.Bytes()) {
		t.Error("no figures changed the report")
	}
}

// TestFiguresNothingScored: a run whose every cell errored has no pass
// rate to draw, so no figure and an unchanged report.
func TestFiguresNothingScored(t *testing.T) {
	f := loadFixture(t, filepath.Join("testdata", "all-errored.input.json"))
	figs, err := Figures(Build(f.Run, f.Results, testBuild))
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 0 {
		t.Fatalf("got %d figures for a run with nothing scored", len(figs))
	}
}

// TestFiguresLargeGrid: the outcome grid of a run with more tasks than
// MaxGridTasks draws the first MaxGridTasks and says so.
func TestFiguresLargeGrid(t *testing.T) {
	var rows []Result
	for i := range MaxGridTasks + 50 {
		rows = append(rows, Result{CellID: "c" + itoa(i), Task: "t" + itoa(i), Harness: "h", Model: "m",
			Attempt: 1, Outcome: OutcomePassed, Passed: true, Reward: ptr(1.0)})
	}
	a := Build(RunInfo{ID: "r", Harnesses: []string{"h"}, Repeats: 1}, rows, testBuild)
	figs, err := Figures(a)
	if err != nil {
		t.Fatal(err)
	}
	last := figs[len(figs)-1]
	if last.Name != FigureOutcomeGrid || !strings.Contains(last.Title, "first 200 of 250 tasks") {
		t.Fatalf("last figure %s %q", last.Name, last.Title)
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}
