package task

import "github.com/proctor-eval/proctor/pkg/dockerfile"

// dockerfileWorkdir returns the working directory the final stage of a
// Dockerfile leaves the image in, when the file alone decides it (see
// dockerfile.File.FinalWorkdir: BuildKit's parser reads heredocs, the
// `# escape=` directive and line continuations). It returns "" when the
// final stage sets no WORKDIR, a WORKDIR uses a variable, or the builder's
// parser refuses the file (the build then reports why).
func dockerfileWorkdir(data []byte) string {
	f, err := dockerfile.Parse(data)
	if err != nil {
		return ""
	}
	return f.FinalWorkdir()
}
