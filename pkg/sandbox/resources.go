package sandbox

// Default limits of a Docker sandbox, applied when the task declares none
// (docker.Options.Defaults changes them). They are sized for a 2-core,
// 24 GiB machine running 2 × CPUs = 4 cells at once: 4 × 4 GiB leaves
// 8 GiB to the host, and 4 × 1024 processes stay far below the kernel's
// default pid_max of 32,768 that every container shares.
const (
	// DefaultMemoryMB is the memory limit in MiB of a sandbox whose task
	// declares no memory (4 GiB).
	DefaultMemoryMB = 4096
	// DefaultPidsLimit is the number of processes (threads included, as
	// the pids cgroup counts them) a sandbox may hold at once.
	DefaultPidsLimit = 1024
)

// Limits are the resource limits of one sandbox, as applied to its
// container. A zero or negative field means no limit.
type Limits struct {
	// CPUs is the number of CPUs (fractions allowed, CFS quota).
	CPUs float64 `json:"cpus,omitempty"`
	// MemoryMB is the memory limit in MiB; swap is limited to the same
	// amount (no swap beyond it), so a sandbox that exceeds it is
	// OOM-killed instead of swapping.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// PidsLimit is the most processes and threads at once.
	PidsLimit int64 `json:"pids_limit,omitempty"`
	// NoNewPrivileges is always true for a Docker sandbox: no process can
	// gain privileges through a setuid or setcap binary (SecurityOpt
	// no-new-privileges).
	NoNewPrivileges bool `json:"no_new_privileges"`
	// MemorySource says where MemoryMB came from: "task" (the task's
	// memory_mb / memory) or "default".
	MemorySource string `json:"memory_source,omitempty"`
	// CPUsSource is "task", "default", or "" when CPUs is unlimited.
	CPUsSource string `json:"cpus_source,omitempty"`
}

// DefaultLimits are the defaults of a Docker driver whose options leave
// them unset: no CPU limit, DefaultMemoryMB, DefaultPidsLimit.
var DefaultLimits = Limits{MemoryMB: DefaultMemoryMB, PidsLimit: DefaultPidsLimit}
