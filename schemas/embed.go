// Package schemas embeds the JSON Schemas (draft 2020-12) of proctor's
// documents: task_runs.v1 (the results artifact, DESIGN §8), events.v1
// (the event envelope, DESIGN §7) and agent-lines.v1 (an event line of an
// agent's stdout, DESIGN §5.1).
package schemas

import "embed"

// FS holds every *.json file of this directory at its root, e.g.
// "task_runs.v1.schema.json".
//
//go:embed *.json
var FS embed.FS
