package isoprobe

import (
	"slices"
	"strings"
	"testing"
)

func reportOf(statuses map[string]string) Report {
	r := Report{Classes: map[string]Finding{}}
	for _, c := range Classes {
		r.Classes[c] = Finding{Status: Closed}
	}
	for c, s := range statuses {
		r.Classes[c] = Finding{Status: s, Evidence: []string{c + " was " + s}}
	}
	return r
}

// TestFoldExpected: a class the task expects open passes as expected and
// is listed with its reason; an expectation never turns untested or
// closed into expected, and an open class it does not name still fails.
func TestFoldExpected(t *testing.T) {
	expect := map[string]string{GitHistory: "the task is to recover history", Network: "the task downloads"}
	st, passed := Fold(reportOf(map[string]string{GitHistory: Open}), expect)
	if !passed || st[GitHistory] != Expected || st[Network] != Closed {
		t.Fatalf("%v %v", st, passed)
	}
	if got := ExpectedClasses(st, expect); !slices.Equal(got, []string{"git_history (the task is to recover history)"}) {
		t.Fatalf("expected classes %v", got)
	}
	if got := OpenClasses(st); len(got) != 0 {
		t.Fatalf("open classes %v", got)
	}
	st, passed = Fold(reportOf(map[string]string{GitHistory: Untested, DNS: Open}), expect)
	if passed || st[GitHistory] != Untested || st[DNS] != Open {
		t.Fatalf("%v %v", st, passed)
	}
	if got := OpenClasses(st); !slices.Equal(got, []string{"dns=open", "git_history=untested"}) {
		t.Fatalf("open classes %v", got)
	}
}

func TestCheckExpect(t *testing.T) {
	if err := CheckExpect(map[string]string{GitHistory: "x", Network: "y"}); err != nil {
		t.Fatal(err)
	}
	err := CheckExpect(map[string]string{"git-history": "x"})
	if err == nil || !strings.Contains(err.Error(), `"git-history" is not a leak class (task_files, `) {
		t.Fatalf("%v", err)
	}
}

// TestMerge: a multi-step task's probes are one report: each class its
// worst status, evidence labelled by step, names unioned.
func TestMerge(t *testing.T) {
	a := reportOf(map[string]string{GitHistory: NA, Env: NA})
	a.Walked = 10
	b := reportOf(map[string]string{GitHistory: Open, Env: Closed})
	b.EnvLeaked, b.Walked = []string{"X"}, 5
	delete(b.Classes, DNS)
	m := Merge([]string{"step a", "step b"}, []Report{a, b})
	if m.Classes[GitHistory].Status != Open || m.Classes[Env].Status != Closed || m.Classes[DNS].Status != Untested || m.Classes[Network].Status != Closed {
		t.Fatalf("%+v", m.Classes)
	}
	if ev := strings.Join(m.Classes[GitHistory].Evidence, "\n"); ev != "step a: git_history was n/a\nstep b: git_history was open" {
		t.Fatalf("evidence %q", ev)
	}
	if !slices.Equal(m.EnvLeaked, []string{"X"}) || m.Walked != 15 {
		t.Fatalf("%+v", m)
	}
}
