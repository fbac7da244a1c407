package artifact

import (
	"bytes"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/vg"
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

// svgText is one <text> element of an SVG: where it starts and what it says.
type svgText struct {
	X, Y float64
	Text string
}

// svgTexts returns the SVG's width (points) and its text elements.
func svgTexts(t *testing.T, svg []byte) (float64, []svgText) {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(svg))
	var width float64
	var out []svgText
	var cur *svgText
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch v := tok.(type) {
		case xml.StartElement:
			attr := map[string]string{}
			for _, a := range v.Attr {
				attr[a.Name.Local] = a.Value
			}
			switch v.Name.Local {
			case "svg":
				if width, err = strconv.ParseFloat(strings.TrimSuffix(attr["width"], "pt"), 64); err != nil {
					t.Fatalf("svg width %q: %v", attr["width"], err)
				}
			case "text":
				x, _ := strconv.ParseFloat(attr["x"], 64)
				y, _ := strconv.ParseFloat(attr["y"], 64)
				cur = &svgText{X: x, Y: y}
			}
		case xml.CharData:
			if cur != nil {
				cur.Text += string(v)
			}
		case xml.EndElement:
			if v.Name.Local == "text" && cur != nil {
				out = append(out, *cur)
				cur = nil
			}
		}
	}
	return width, out
}

// TestFigureLabelsFit: harnesses named by long paths get their kind and
// the path's last element on the figures' axes (agent:scripted-agent-v2), as
// 'runs list' names them, unless two would then read alike (agent:a/x
// and agent:b/x keep their names); and each figure is wide enough that
// no two column labels overlap and the last one ends inside it.
func TestFigureLabelsFit(t *testing.T) {
	for _, c := range []struct {
		hs, want []string
	}{
		{
			[]string{"oracle", "agent:examples/agents/scripted-agent-v2", "agent:examples/agents/metrics-agent-v2", "agent:examples/agents/overclaiming-agent",
				"agent:one/same", "agent:two/same", "docker-claude-skill:examples/skills/sum-numbers"},
			[]string{"oracle", "agent:scripted-agent-v2", "agent:metrics-agent-v2", "agent:overclaiming-agent", "agent:one/same",
				"agent:two/same", "docker-claude-skill:sum-numbers"},
		},
		{ // wide capitals: the labels need more than the default width
			[]string{"oracle", "agent:x/MODEL-AGENT-WITH-CAPS-A", "agent:x/MODEL-AGENT-WITH-CAPS-B", "agent:x/MODEL-AGENT-WITH-CAPS-C"},
			[]string{"oracle", "agent:MODEL-AGENT-WITH-CAPS-A", "agent:MODEL-AGENT-WITH-CAPS-B", "agent:MODEL-AGENT-WITH-CAPS-C"},
		},
	} {
		checkLabelsFit(t, c.hs, c.want)
	}
}

func checkLabelsFit(t *testing.T, hs, want []string) {
	t.Helper()
	var rows []Result
	for i, h := range hs {
		for _, task := range []string{"fix-sum", "a-task-with-a-rather-long-name-indeed"} {
			rows = append(rows, Result{CellID: task + "/" + h, Task: task, Harness: h, Model: "m", Attempt: 1,
				Outcome: OutcomePassed, Passed: i%2 == 0, Reward: ptr(float64(1 - i%2))})
			if i%2 == 1 {
				rows[len(rows)-1].Outcome = OutcomeFailed
			}
		}
	}
	a := Build(RunInfo{ID: "r", Harnesses: hs, Repeats: 1, BaselineHarness: hs[1]}, rows, testBuild)
	figs, err := Figures(a)
	if err != nil {
		t.Fatal(err)
	}
	font := plot.New().X.Tick.Label
	checked := 0
	for _, fg := range figs {
		if fg.Name != FigurePassRate && fg.Name != FigureOutcomeGrid && fg.Name != FigurePairedDiff {
			continue
		}
		width, texts := svgTexts(t, fg.SVG)
		var labels []svgText
		for _, x := range texts {
			for _, w := range want {
				if x.Text == w || x.Text == shortLabel(w) {
					labels = append(labels, x)
				}
			}
		}
		n := len(want)
		if fg.Name == FigurePairedDiff {
			n = len(want) - 2 // the oracle is never compared, the baseline is the title's
		}
		if len(labels) != n {
			t.Errorf("%s: %d of the column labels %v, want %d: %v", fg.Name, len(labels), want, n, texts)
			continue
		}
		sort.Slice(labels, func(i, j int) bool { return labels[i].X < labels[j].X })
		for i, l := range labels {
			end := l.X + float64(font.Width(l.Text)/vg.Points(1))
			if i+1 < len(labels) && end > labels[i+1].X {
				t.Errorf("%s: label %q (%.1f to %.1f pt) overlaps %q at %.1f", fg.Name, l.Text, l.X, end, labels[i+1].Text, labels[i+1].X)
			}
			if end > width {
				t.Errorf("%s: label %q ends at %.1f pt, past the figure's width %.1f", fg.Name, l.Text, end, width)
			}
		}
		checked++
	}
	if checked != 3 {
		t.Errorf("checked %d figures, want pass rate, paired difference and grid", checked)
	}
}
