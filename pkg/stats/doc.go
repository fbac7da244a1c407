// Package stats holds the pure statistics behind task_runs.v1 summaries
// (DESIGN §8): the Wilson score interval for a pass rate, the exact
// McNemar test on paired cells, Newcombe's hybrid score interval for the
// paired difference, the Holm–Bonferroni correction across harnesses,
// Hake's normalized gain, Marx & Cummings' normalized change, and a seeded
// paired bootstrap over tasks.
//
// Every function is deterministic and free of side effects; the package
// depends on the standard library only. Rates and probabilities are
// fractions in [0,1], never percentages.
package stats
