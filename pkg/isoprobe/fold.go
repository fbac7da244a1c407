package isoprobe

import (
	"fmt"
	"slices"
	"sort"
	"strings"
)

// Fold decides the probe row: the status of every class (a class the
// report lacks, or whose status Fold does not know, is untested), an open
// class the task expects (expect: class → reason, the task's
// metadata.probe_expect) marked expected, and whether the probe passed,
// which it does only when every class is closed, n/a or expected. An
// expectation only turns open into expected: a class the probe could not
// decide stays untested, and one it found closed stays closed.
func Fold(r Report, expect map[string]string) (statuses map[string]string, passed bool) {
	statuses = map[string]string{}
	passed = true
	for _, c := range Classes {
		st := Untested
		if f, ok := r.Classes[c]; ok {
			switch f.Status {
			case Open, Closed, NA, Untested:
				st = f.Status
			}
		}
		if _, ok := expect[c]; ok && st == Open {
			st = Expected
		}
		statuses[c] = st
		if !Passing(st) {
			passed = false
		}
	}
	return statuses, passed
}

// Passing reports whether a class's status lets the probe pass: closed,
// n/a or expected.
func Passing(status string) bool {
	return status == Closed || status == NA || status == Expected
}

// OpenClasses lists the classes of statuses that fail the probe (open or
// untested), in report order, as "class=status".
func OpenClasses(statuses map[string]string) []string {
	var out []string
	for _, c := range Classes {
		if st := statuses[c]; !Passing(st) {
			out = append(out, c+"="+st)
		}
	}
	return out
}

// ExpectedClasses lists the classes of statuses that are expected, in
// report order, each with its reason from expect: "class (reason)".
func ExpectedClasses(statuses, expect map[string]string) []string {
	var out []string
	for _, c := range Classes {
		if statuses[c] == Expected {
			out = append(out, fmt.Sprintf("%s (%s)", c, expect[c]))
		}
	}
	return out
}

// CheckExpect refuses an expectation that names no leak class; the error
// names the class and lists the known ones.
func CheckExpect(expect map[string]string) error {
	keys := make([]string, 0, len(expect))
	for k := range expect {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !slices.Contains(Classes, k) {
			return fmt.Errorf("%q is not a leak class (%s)", k, strings.Join(Classes, ", "))
		}
	}
	return nil
}

// rank orders statuses for Merge: the one that says most wins.
var rank = map[string]int{NA: 0, Closed: 1, Untested: 2, Open: 3}

// Merge is one report of several probes of the same cell (a multi-step
// task's probed steps, labels naming each): a class's status is the
// worst of its statuses (open, then untested, then closed, then n/a; a
// class missing from one report is untested), its evidence and info
// lines each prefixed with the label of the report they come from; the
// names and addresses are the union, the walked entries the sum.
func Merge(labels []string, reps []Report) Report {
	if len(reps) == 1 {
		return reps[0]
	}
	out := Report{Classes: map[string]Finding{}}
	leaked, unexpected, reached := map[string]bool{}, map[string]bool{}, map[string]bool{}
	for i, r := range reps {
		for _, c := range Classes {
			f, ok := r.Classes[c]
			if !ok || rank[f.Status] == 0 && f.Status != NA {
				f = Finding{Status: Untested, Evidence: []string{"not reported"}}
			}
			m, seen := out.Classes[c]
			if !seen || rank[f.Status] > rank[m.Status] {
				m.Status = f.Status
			}
			for _, e := range f.Evidence {
				m.add("%s: %s", labels[i], e)
			}
			for _, e := range f.Info {
				m.info("%s: %s", labels[i], e)
			}
			out.Classes[c] = m
		}
		for _, n := range r.EnvLeaked {
			leaked[n] = true
		}
		for _, n := range r.EnvUnexpected {
			unexpected[n] = true
		}
		for _, a := range r.GatewayReached {
			reached[a] = true
		}
		out.Walked += r.Walked
	}
	if len(leaked) > 0 {
		out.EnvLeaked = sorted(leaked)
	}
	if len(unexpected) > 0 {
		out.EnvUnexpected = sorted(unexpected)
	}
	if len(reached) > 0 {
		out.GatewayReached = sorted(reached)
	}
	return out
}
