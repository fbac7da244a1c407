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
}

// VerifyJob asks the verifier on Node to score a cell whose solve ended.
type VerifyJob struct {
	RunID   string             `json:"run_id"`
	CellID  string             `json:"cell_id"`
	Attempt int                `json:"attempt"`
	Node    string             `json:"node"`
	Sandbox SandboxStartedData `json:"sandbox"`
}
