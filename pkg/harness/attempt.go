package harness

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/egress"
	"github.com/proctor-eval/proctor/pkg/events"
)

// NoAttemptError is the one rule for a solve that made no attempt, the
// same for a single-step cell and for each step of a multi-step one: it
// returns an error of class solver_error ("the solver made no attempt:
// <reason>") when fin says the solver made no attempt (Finished.NoAttempt:
// no output and no event of the agent, its install failed, or the Claude
// CLI ended without an assistant turn of output or a tool call), and nil
// otherwise. The launcher ends such a cell errored with the error, after
// recording fin, and its verifier never runs: missing data, never a 0 (a
// step's no-attempt ends the whole multi-step cell, not only the step). An
// arm that knows the cause is the provider's (a 429 before any turn)
// returns its own error of class infra instead, which `--retries` runs
// again; for an agent:<dir> arm the launcher asks NoAttemptErrorIn.
func NoAttemptError(fin events.FinishedData) error {
	if !fin.NoAttempt {
		return nil
	}
	return events.Classf(events.ClassSolverError, "the solver made no attempt: %s", fin.Reason)
}

// NoAttemptErrorIn is NoAttemptError for a solve whose egress proxy's
// records are in dir (egress.jsonl and model_calls.jsonl, written by
// RecordEgress) and whose placement p is an agent:<dir> arm's that
// declares providers. When the agent made no attempt, tried its declared
// model hosts, and every such try failed on the provider's side (the
// connection refused or reset, the host not resolved, TLS with the
// upstream failed: any exchange without an answer; or an HTTP 408, 429
// or 5xx from the upstream, as the Claude arm's rule) with no other answer, the error is of class infra
// and names the host and the failure ("the model at HOST could not be
// reached: connection refused (3 tries)"), which `--retries` runs again.
// Only the proxy's records count, never what the agent printed. An agent
// that never tried its model, or got any 2xx or other 4xx answer, stays
// solver_error; a 401 or 403 is named as the credential's (the run's
// configuration, which a retry would not change). An unreadable record
// file is an error naming it.
func NoAttemptErrorIn(dir cellfs.Dir, p Placement, fin events.FinishedData) error {
	err := NoAttemptError(fin)
	if err == nil {
		return nil
	}
	st, _ := p.State.(agentState)
	if st.calls == nil || len(st.calls.hosts) == 0 {
		return err
	}
	tries, rerr := modelTries(dir, st.calls.hosts)
	if rerr != nil {
		return rerr
	}
	var failed []modelTry
	for _, t := range tries {
		switch {
		case t.providers():
			failed = append(failed, t)
		case t.status == 401 || t.status == 403:
			return events.Classf(events.ClassSolverError, "the solver made no attempt: %s; the model at %s answered HTTP %d: the provider refused the credential (the run's configuration: check the key)", fin.Reason, t.host, t.status)
		default:
			return err
		}
	}
	if len(failed) == 0 {
		return err
	}
	last := failed[len(failed)-1]
	n := "1 try"
	if len(failed) > 1 {
		n = strconv.Itoa(len(failed)) + " tries"
	}
	return events.Classf(events.ClassInfra, "the model at %s could not be reached: %s (%s): the provider's failure, not the solver's; --retries runs the cell again", last.host, last.why, n)
}

// modelTry is one try of a model host as the proxy recorded it: an
// exchange (status 0: no answer) or a connect that failed.
type modelTry struct {
	host   string
	status int
	why    string
	conn   bool // no answer, for a failure of the upstream's connection
}

// providers reports whether the try failed on the provider's side: an
// answer of HTTP 408, 429 or 5xx, or no answer for a failure of the
// upstream's connection (an exchange the client itself broke off, its
// request body cut short, is not the provider's).
func (t modelTry) providers() bool {
	if t.status == 0 {
		return t.conn
	}
	return t.status == 408 || t.status == 429 || t.status >= 500
}

// modelTries reads the tries of hosts (allowlist entries) from dir's
// egress.jsonl (connects that failed: their host not resolved, the
// connection refused) and model_calls.jsonl (every exchange), in that
// order. A missing file has no tries.
func modelTries(dir cellfs.Dir, hosts []string) ([]modelTry, error) {
	model := map[string]bool{}
	for _, h := range hosts {
		if e, err := egress.ParseEntry(h); err == nil {
			model[net.JoinHostPort(e.Host, strconv.Itoa(e.Port))] = true
		}
	}
	var tries []modelTry
	_, err := readRecords(dir.Path(egressFile), func(d events.EgressDecisionData) {
		hp := net.JoinHostPort(d.Host, strconv.Itoa(d.Port))
		if !model[hp] || d.Decision != "error" {
			return
		}
		if why, ok := strings.CutPrefix(d.Reason, "connect: "); ok {
			why, _ = failure(why)
			tries = append(tries, modelTry{host: hp, why: why, conn: true})
		} else if why, ok := strings.CutPrefix(d.Reason, "resolve: "); ok {
			tries = append(tries, modelTry{host: hp, why: "the host did not resolve: " + why, conn: true})
		}
	})
	if err != nil {
		return nil, err
	}
	_, err = readRecords(dir.Path(callsFile), func(c events.ModelCallData) {
		hp := net.JoinHostPort(c.Host, strconv.Itoa(c.Port))
		t := modelTry{host: hp, status: c.Status, why: "HTTP " + strconv.Itoa(c.Status)}
		if c.Status == 0 {
			t.why, t.conn = failure(strings.TrimPrefix(c.Error, "upstream: "))
		}
		tries = append(tries, t)
	})
	return tries, err
}

// failure is the short name of a connection's failure (the error text's
// last part: "connection refused") and true, or the text itself and false
// when it names no failure of a connection.
func failure(why string) (string, bool) {
	for _, s := range []string{"connection refused", "connection reset by peer", "no such host", "i/o timeout", "no route to host"} {
		if strings.Contains(why, s) {
			return s, true
		}
	}
	if strings.Contains(why, "tls: ") || strings.Contains(why, "x509: ") {
		return "TLS with the upstream failed: " + why, true
	}
	return why, false
}

// readRecords calls fn with each JSON line of file decoded as T; a
// missing file has none. A line that does not decode is an error naming
// the file and the line.
func readRecords[T any](file string, fn func(T)) (int, error) {
	b, err := os.ReadFile(file)
	if os.IsNotExist(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(bytes.TrimSpace(b)) == 0 {
		return 0, nil
	}
	return eachRecord(b, file, func(d T, _ time.Time) error { fn(d); return nil })
}
