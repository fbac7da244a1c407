// Package projection folds a run's event log into its state: the
// task_runs.v1 artifact and Markdown report, the rows and states of its
// cells, per-harness progress and the run index record the log implies.
// It is the one reading of the log: the aggregator service closes runs
// and writes results with it, and the CLI (tasks run's progress, replay,
// watch, runs, events, dataset) and the web view read runs with it.
//
// A Projector depends on nothing but the events, in log order: the same
// log always projects to the same bytes. A cell is done when its current
// attempt has its terminal event (Terminal); the last attempt wins. Event
// data that does not decode is counted (Projector.DecodeErrors, the
// artifact's run.decode_errors), never dropped silently. Follow follows a
// run's events until the run ends, past the end of each earlier epoch of
// a resumed run.
package projection
