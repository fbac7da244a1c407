package sandbox

// ImageMap rewrites image references (exact names and prefixes ending in
// "/").
type ImageMap struct {
	exact    map[string]string
	prefixes []prefixRule
}

type prefixRule struct{ from, to string }

// Rewrite records one image reference rewritten by an ImageMap.
type Rewrite struct {
	// Line is the 1-based Dockerfile line (0 for a bare reference).
	Line int    `json:"line,omitempty"`
	From string `json:"from"`
	To   string `json:"to"`
}
