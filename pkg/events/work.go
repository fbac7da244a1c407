package events

// Work subjects on the PROCTOR_WORK stream (DESIGN §7).
const (
	// LaunchSubject carries LaunchJob messages.
	LaunchSubject = "proctor.work.launch"
	// VerifySubjectPrefix + node carries VerifyJob messages for the node
	// that holds the cell's sandbox.
	VerifySubjectPrefix = "proctor.work.verify."
)

// VerifySubject is the verify queue of one node.
func VerifySubject(node string) string { return VerifySubjectPrefix + node }

// LaunchJob asks a launcher to run one cell's solve. Everything else the
// launcher needs is in the run's CellPlanned event and the task files.
type LaunchJob struct {
	RunID  string `json:"run_id"`
	CellID string `json:"cell_id"`
	// Epoch is the run's epoch when the job was published (0 until a
	// resume); a launcher drops a job of an older epoch.
	Epoch int `json:"epoch,omitempty"`
	// AttemptBase is the cell's last attempt before this job (0 for a
	// planned cell): the job's attempt is AttemptBase + its delivery
	// count, so a resumed or retried cell never reuses an attempt number.
	AttemptBase int `json:"attempt_base,omitempty"`
}

// VerifyJob asks the verifier on Node to score a cell whose solve ended.
type VerifyJob struct {
	RunID   string `json:"run_id"`
	CellID  string `json:"cell_id"`
	Attempt int    `json:"attempt"`
	Node    string `json:"node"`
	// Epoch is LaunchJob.Epoch of the launch that made the job.
	Epoch   int                `json:"epoch,omitempty"`
	Sandbox SandboxStartedData `json:"sandbox"`
	// Workdir is the solve's working directory in the sandbox (the work
	// tree a separate verifier carries over); "" in jobs made before it
	// was recorded.
	Workdir string `json:"workdir,omitempty"`
}
