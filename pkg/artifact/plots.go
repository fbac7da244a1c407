package artifact

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"path"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/recorder"

	"github.com/proctor-eval/proctor/pkg/textsafe"
)

// Figure is one SVG figure of a run, written beside report.md under Name
// and shown by the viewer.
type Figure struct {
	// Name is the file name, e.g. "pass-rate.svg"; fixed per kind, so a
	// report's links do not depend on where it is written.
	Name string `json:"name"`
	// Title is the figure's caption in the report.
	Title string `json:"title"`
	// SVG is the figure, drawn by gonum/plot's SVG backend. The bytes
	// depend only on the artifact.
	SVG []byte `json:"-"`
}

// Figure file names.
const (
	FigurePassRate    = "pass-rate.svg"
	FigurePairedDiff  = "paired-diff.svg"
	FigureCost        = "cost-pass-rate.svg"
	FigureOutcomeGrid = "outcome-grid.svg"
)

// MaxGridTasks bounds the tasks drawn in the outcome grid figure; a run
// with more draws its first MaxGridTasks tasks in row order and says so
// in the title.
const MaxGridTasks = 200

// Outcome colours shared by the figures and the viewer (CSS in the
// viewer's assets uses the same hex values).
var (
	colPassed  = color.RGBA{0x2e, 0x9e, 0x4f, 0xff}
	colPartial = color.RGBA{0xe0, 0xb0, 0x20, 0xff}
	colFailed  = color.RGBA{0xd0, 0x3b, 0x3b, 0xff}
	colErrored = color.RGBA{0x88, 0x88, 0x88, 0xff}
	colMark    = color.RGBA{0x1f, 0x5f, 0xbf, 0xff}
)

// Figures draws the run's figures: pass rate per harness with its Wilson
// 95 % interval (when any harness scored a cell); paired pass-rate
// differences against the baseline with their 95 % intervals (ci_lo, ci_hi:
// Newcombe's hybrid score interval, or the bootstrap in artifacts written
// before ci_method existed; when a has comparisons); total cost (USD) versus pass rate per harness
// (when any harness is priced); and the per-task outcome grid (tasks ×
// harnesses, coloured by what the task's scored cells did). A run with
// nothing scored yields no figure. It returns gonum/plot's error, wrapped
// with the figure's name.
func Figures(a *Artifact) ([]Figure, error) {
	r := &reporter{a: a}
	hs := r.harnesses()
	lb := newLabeler(a, hs)
	var out []Figure
	// add draws p at least minW wide; a plot with named columns
	// (NominalX) is widened until every column holds its label.
	add := func(name, title string, p *plot.Plot, minW, h vg.Length) error {
		if p == nil {
			return nil
		}
		w := fitWidth(p, minW, h)
		wt, err := p.WriterTo(w, h, "svg")
		if err != nil {
			return fmt.Errorf("figure %s: %w", name, err)
		}
		var buf bytes.Buffer
		if _, err := wt.WriteTo(&buf); err != nil {
			return fmt.Errorf("figure %s: %w", name, err)
		}
		out = append(out, Figure{Name: name, Title: title, SVG: buf.Bytes()})
		return nil
	}
	width := vg.Length(math.Max(5, 1.2*float64(len(hs))+2)) * vg.Inch
	if err := add(FigurePassRate, "Pass rate per harness (Wilson 95 % interval)", passRatePlot(a, hs, lb), width, 4*vg.Inch); err != nil {
		return nil, err
	}
	cmp := r.compared()
	if err := add(FigurePairedDiff, "Paired pass-rate difference against the baseline ("+pairedIntervalName(a)+" 95 % interval)",
		pairedDiffPlot(a, cmp, lb), vg.Length(math.Max(5, 1.2*float64(len(cmp))+2))*vg.Inch, 4*vg.Inch); err != nil {
		return nil, err
	}
	if err := add(FigureCost, "Total cost (USD) versus pass rate per harness", costPlot(a, hs, lb), 6*vg.Inch, 4*vg.Inch); err != nil {
		return nil, err
	}
	tasks := r.tasks()
	title := "Outcome per task and harness"
	if len(tasks) > MaxGridTasks {
		title = fmt.Sprintf("Outcome per task and harness (first %d of %d tasks)", MaxGridTasks, len(tasks))
		tasks = tasks[:MaxGridTasks]
	}
	if len(out) > 0 {
		gh := vg.Length(math.Max(3, 0.22*float64(len(tasks))+1.5)) * vg.Inch
		if err := add(FigureOutcomeGrid, title, gridPlot(a, hs, tasks, lb), width+2*vg.Inch, gh); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// AppendFigureLinks returns report (a report from WriteReport) followed
// by a "Figures" section linking each figure by its Name, relative to the
// report's directory, with its Title as the image's text. With no figures
// it returns report unchanged.
func AppendFigureLinks(report []byte, figs []Figure) []byte {
	if len(figs) == 0 {
		return report
	}
	var b bytes.Buffer
	b.Write(report)
	b.WriteString("\n## Figures\n")
	for _, f := range figs {
		fmt.Fprintf(&b, "\n![%s](%s)\n", f.Title, f.Name)
	}
	return b.Bytes()
}

// maxLabelRunes bounds a harness or task name on a figure's axis.
const maxLabelRunes = 24

// labeler maps a harness to its name on a figure: an arm whose argument
// is a path (agent:examples/agents/scripted) by its kind and the path's
// last element (agent:scripted), as 'runs list' shows it, unless another
// harness of the run would get the same name; then cut by shortLabel.
type labeler map[string]string

func newLabeler(a *Artifact, hs []string) labeler {
	all := append([]string(nil), hs...)
	for _, c := range a.Summary.Comparisons {
		if c != nil {
			all = append(all, c.Baseline)
		}
	}
	compact := map[string]string{}
	uses := map[string]map[string]bool{}
	for _, h := range all {
		c := h
		kind, arg, ok := strings.Cut(h, ":")
		if ok && strings.Contains(arg, "/") && !strings.ContainsAny(arg, " \t") {
			c = kind + ":" + path.Base(strings.TrimRight(arg, "/"))
		}
		compact[h] = c
		if uses[c] == nil {
			uses[c] = map[string]bool{}
		}
		uses[c][h] = true
	}
	l := labeler{}
	for h, c := range compact {
		if len(uses[c]) > 1 {
			c = h // two harnesses would read alike
		}
		l[h] = shortLabel(c)
	}
	return l
}

// of returns h's figure name (shortLabel(h) for a harness not known).
func (l labeler) of(h string) string {
	if s, ok := l[h]; ok {
		return s
	}
	return shortLabel(h)
}

// fitWidth returns the width p is drawn at, h high: minW, or more when
// p's x-axis names columns (NominalX) and a column would be narrower than
// its widest label and a gap, so that no two labels overlap. The room
// outside the data area (axes, their labels, padding) is what gonum/plot
// lays out for p at minW.
func fitWidth(p *plot.Plot, minW, h vg.Length) vg.Length {
	ct, ok := p.X.Tick.Marker.(plot.ConstantTicks)
	if !ok || p.X.Max <= p.X.Min {
		return minW
	}
	var label vg.Length
	for _, t := range ct {
		label = max(label, p.X.Tick.Label.Width(t.Label))
	}
	const gap = 10 // points between two labels
	da := p.DataCanvas(draw.NewCanvas(new(recorder.Canvas), minW, h))
	outside := minW - (da.Max.X - da.Min.X)
	return max(minW, outside+vg.Length(p.X.Max-p.X.Min)*(label+vg.Points(gap)))
}

// shortLabel keeps the end of a long name ("…" and its last runes), which
// tells harnesses apart better than its start ("command:/long/path/...").
func shortLabel(s string) string {
	s = textsafe.Line(s) // a figure is read by a person: task and harness names escaped
	r := []rune(s)
	if len(r) <= maxLabelRunes {
		return s
	}
	return "…" + string(r[len(r)-maxLabelRunes+1:])
}

// points is a plotter.XYer and YErrorer over parallel slices.
type points struct {
	x, y, lo, hi []float64
}

func (p *points) Len() int                    { return len(p.x) }
func (p *points) XY(i int) (float64, float64) { return p.x[i], p.y[i] }
func (p *points) YError(i int) (float64, float64) {
	return p.y[i] - p.lo[i], p.hi[i] - p.y[i]
}

func (p *points) add(x, y, lo, hi float64) {
	p.x, p.y, p.lo, p.hi = append(p.x, x), append(p.y, y), append(p.lo, lo), append(p.hi, hi)
}

func newPlot(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xLabel
	p.Y.Label.Text = yLabel
	return p
}

// markPlot adds a point series with vertical interval bars.
func markPlot(p *plot.Plot, pts *points) error {
	bars, err := plotter.NewYErrorBars(pts)
	if err != nil {
		return err
	}
	bars.LineStyle.Width = vg.Points(1.5)
	bars.LineStyle.Color = colMark
	sc, err := plotter.NewScatter(pts)
	if err != nil {
		return err
	}
	sc.GlyphStyle = draw.GlyphStyle{Color: colMark, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
	p.Add(bars, sc)
	return nil
}

func passRatePlot(a *Artifact, hs []string, lb labeler) *plot.Plot {
	pts := &points{}
	var names []string
	for _, h := range hs {
		s := a.Summary.PerHarness[h]
		if s.PassRate == nil || s.PassRateCI == nil {
			continue
		}
		pts.add(float64(len(names)), *s.PassRate, s.PassRateCI[0], s.PassRateCI[1])
		names = append(names, fmt.Sprintf("%s\n%d/%d", lb.of(h), s.Passed, s.Scored))
	}
	if len(names) == 0 {
		return nil
	}
	p := newPlot("Pass rate per harness", "", "pass rate (scored cells)")
	p.Y.Min, p.Y.Max = 0, 1
	p.Add(plotter.NewGrid())
	if markPlot(p, pts) != nil {
		return nil
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	return p
}

func pairedDiffPlot(a *Artifact, cmp []string, lb labeler) *plot.Plot {
	pts := &points{}
	var names []string
	for _, h := range cmp {
		m := a.Summary.Comparisons[h].McNemar
		if m.PairedPassRateDelta == nil {
			continue
		}
		d := *m.PairedPassRateDelta
		lo, hi := d, d
		if m.CILo != nil && m.CIHi != nil {
			lo, hi = *m.CILo, *m.CIHi
		}
		pts.add(float64(len(names)), d, lo, hi)
		names = append(names, fmt.Sprintf("%s\nn=%d", lb.of(h), m.N))
	}
	if len(names) == 0 {
		return nil
	}
	base := a.Summary.Comparisons[cmp[0]].Baseline
	p := newPlot("Paired difference against "+lb.of(base), "", "pass rate − baseline's")
	p.Y.Min, p.Y.Max = -1, 1
	p.Add(plotter.NewGrid())
	zero, err := plotter.NewLine(plotter.XYs{{X: -0.5, Y: 0}, {X: float64(len(names)) - 0.5, Y: 0}})
	if err != nil {
		return nil
	}
	zero.LineStyle.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(zero)
	if markPlot(p, pts) != nil {
		return nil
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.5, float64(len(names))-0.5
	return p
}

func costPlot(a *Artifact, hs []string, lb labeler) *plot.Plot {
	var xys plotter.XYs
	var labels []string
	for _, h := range hs {
		s := a.Summary.PerHarness[h]
		if s.Cost.TotalCostUSD == nil || s.PassRate == nil {
			continue
		}
		xys = append(xys, plotter.XY{X: *s.Cost.TotalCostUSD, Y: *s.PassRate})
		labels = append(labels, lb.of(h))
	}
	if len(xys) == 0 {
		return nil
	}
	p := newPlot("Cost versus pass rate", "total cost (USD)", "pass rate (scored cells)")
	p.Y.Min, p.Y.Max = 0, 1.1
	// Room on the right for the last point's label.
	hi := 0.0
	for _, xy := range xys {
		hi = math.Max(hi, xy.X)
	}
	p.X.Min, p.X.Max = 0, math.Max(hi*1.6, 1e-6)
	p.Add(plotter.NewGrid())
	sc, err := plotter.NewScatter(xys)
	if err != nil {
		return nil
	}
	sc.GlyphStyle = draw.GlyphStyle{Color: colMark, Radius: vg.Points(4), Shape: draw.CircleGlyph{}}
	ls, err := plotter.NewLabels(plotter.XYLabels{XYs: xys, Labels: labels})
	if err != nil {
		return nil
	}
	for i := range ls.TextStyle {
		ls.TextStyle[i].YAlign = draw.YBottom
		ls.Offset = vg.Point{X: vg.Points(5), Y: vg.Points(3)}
	}
	p.Add(sc, ls)
	return p
}

// gridClass is the colour class of one task × harness: "passed" when every
// scored cell passed, "partial" when some reward was earned, "failed" when
// none was, "errored" when no cell was scored, "" when not run.
func gridClass(t *TaskStat) string {
	switch {
	case t == nil || t.N == 0:
		return ""
	case t.Scored == 0:
		return OutcomeErrored
	case t.Passed == t.Scored:
		return OutcomePassed
	case t.Passed > 0 || (t.MeanReward != nil && *t.MeanReward > 0):
		return OutcomePartial
	}
	return OutcomeFailed
}

func gridPlot(a *Artifact, hs, tasks []string, lb labeler) *plot.Plot {
	if len(tasks) == 0 || len(hs) == 0 {
		return nil
	}
	p := newPlot("Outcome per task", "", "")
	by := map[string]plotter.XYs{}
	for ti, t := range tasks {
		for hi, h := range hs {
			c := gridClass(a.Summary.PerHarness[h].PerTask[t])
			if c != "" {
				// Row 0 at the top, as tables read.
				by[c] = append(by[c], plotter.XY{X: float64(hi), Y: float64(len(tasks) - 1 - ti)})
			}
		}
	}
	for _, k := range []struct {
		class string
		col   color.Color
	}{{OutcomePassed, colPassed}, {OutcomePartial, colPartial}, {OutcomeFailed, colFailed}, {OutcomeErrored, colErrored}} {
		if len(by[k.class]) == 0 {
			continue
		}
		sc, err := plotter.NewScatter(by[k.class])
		if err != nil {
			return nil
		}
		sc.GlyphStyle = draw.GlyphStyle{Color: k.col, Radius: vg.Points(6), Shape: draw.BoxGlyph{}}
		p.Add(sc)
		p.Legend.Add(k.class, sc)
	}
	p.Legend.Top = true
	p.Legend.Left = false
	names := make([]string, len(tasks))
	for i, t := range tasks {
		names[len(tasks)-1-i] = shortLabel(t)
	}
	short := make([]string, len(hs))
	for i, h := range hs {
		short[i] = lb.of(h)
	}
	p.NominalX(short...)
	p.NominalY(names...)
	// One empty column on the right holds the legend clear of the cells.
	p.X.Min, p.X.Max = -0.5, float64(len(hs))+0.5
	p.Y.Min, p.Y.Max = -0.5, float64(len(tasks))-0.5
	p.Y.Padding, p.X.Padding = 0, 0
	return p
}

// pairedIntervalName names the interval ci_lo and ci_hi hold: Newcombe's
// hybrid score interval when the comparisons say so (ci_method), else the
// task-level bootstrap of older artifacts.
func pairedIntervalName(a *Artifact) string {
	for _, c := range a.Summary.Comparisons {
		if c.McNemar.CIMethod == CIMethod {
			return "Newcombe hybrid score"
		}
	}
	return "bootstrap"
}

// ReportWithFigures renders a's report (WriteReport) followed by the links
// to its figures (Figures, AppendFigureLinks), and returns the figures to
// write beside it. The aggregator, replay and `proctor report` all render
// this way, so a report re-rendered from an artifact file equals the one
// written with it.
func ReportWithFigures(a *Artifact) ([]byte, []Figure, error) {
	var buf bytes.Buffer
	if err := WriteReport(&buf, a); err != nil {
		return nil, nil, err
	}
	figs, err := Figures(a)
	if err != nil {
		return nil, nil, err
	}
	return AppendFigureLinks(buf.Bytes(), figs), figs, nil
}
