package task

import (
	"fmt"
	"path"
	"strings"
)

// Artifact is one entry of a task's or a step's artifacts list, as
// Harbor's ArtifactConfig defines it (a bare string is its source): a path
// in the sandbox copied into the cell's artifacts/ directory after the
// verifier (a step's into steps/<name>/artifacts/).
type Artifact struct {
	// Source is the path in the sandbox (absolute; a relative one is
	// taken in the working directory).
	Source string `json:"source"`
	// Destination is where it lands under artifacts/: a relative
	// slash-separated path; "" mirrors Source without its leading "/"
	// (/var/log/x -> var/log/x), as Harbor places it.
	Destination string `json:"destination,omitempty"`
	// Exclude are patterns (path.Match, tar --exclude style) of entries of
	// a directory artifact that are not kept, matched against each
	// entry's base name and its path under the artifact.
	Exclude []string `json:"exclude,omitempty"`
	// Service is the compose service it is collected from ("" or main:
	// the task container).
	Service string `json:"service,omitempty"`
}

// ManifestFile is reserved under artifacts/: the record of what was
// collected.
const ManifestFile = "manifest.json"

// Target is where a collected artifact lands under artifacts/ (a
// slash-separated relative path).
func (a Artifact) Target() string {
	if a.Destination != "" {
		return path.Clean(a.Destination)
	}
	var parts []string
	for _, p := range strings.Split(a.Source, "/") {
		if p != "" && p != "." && p != ".." {
			parts = append(parts, p)
		}
	}
	return strings.Join(parts, "/")
}

// artifacts reads an artifacts list (a list of paths or tables of source,
// destination, exclude, service) with Harbor's checks: a source without
// ".." components; a destination relative, with forward slashes, without
// "..", not manifest.json; a sidecar's source absolute. A null list reads
// as none.
func (r *configReader) artifacts(v any, key string) ([]Artifact, error) {
	if v == nil {
		return nil, nil
	}
	l, ok := v.([]any)
	if !ok {
		return nil, r.errf(key, "must be a list of paths or tables, not %s", kindOf(v))
	}
	var out []Artifact
	for i, e := range l {
		k := fmt.Sprintf("%s[%d]", key, i)
		var a Artifact
		switch x := e.(type) {
		case string:
			a.Source = x
		case map[string]any:
			if err := readTable(r, &a, k, x, artifactFields); err != nil {
				return nil, err
			}
		default:
			return nil, r.errf(k, "must be a path or a table with source, not %s", kindOf(e))
		}
		if strings.TrimSpace(a.Source) == "" {
			return nil, r.errf(k, "source is required")
		}
		for _, p := range strings.Split(a.Source, "/") {
			if p == ".." {
				return nil, r.errf(k, "source %q must not contain '..'", a.Source)
			}
		}
		if d := a.Destination; d != "" {
			switch {
			case strings.Contains(d, `\`):
				return nil, r.errf(k, "destination %q must use forward slashes", d)
			case strings.HasPrefix(d, "/"):
				return nil, r.errf(k, "destination %q must be a relative path (under the cell's artifacts/)", d)
			case strings.TrimRight(d, "/") == ManifestFile:
				return nil, r.errf(k, "destination %s is reserved for the collection manifest", ManifestFile)
			}
			for _, p := range strings.Split(d, "/") {
				if p == ".." {
					return nil, r.errf(k, "destination %q must not contain '..'", d)
				}
			}
		}
		if a.Service != "" && a.Service != MainService && !strings.HasPrefix(a.Source, "/") {
			return nil, r.errf(k, "source %q collected from service %s must be an absolute path", a.Source, a.Service)
		}
		out = append(out, a)
	}
	return out, nil
}

var artifactFields = map[string]field[Artifact]{
	"source": func(r *configReader, a *Artifact, e entry) (err error) {
		a.Source, err = r.str(e.v, e.path)
		return err
	},
	"destination": func(r *configReader, a *Artifact, e entry) (err error) {
		a.Destination, err = r.str(e.v, e.path)
		return err
	},
	"exclude": func(r *configReader, a *Artifact, e entry) (err error) {
		a.Exclude, err = r.strList(e.v, e.path)
		for _, p := range a.Exclude {
			if _, merr := path.Match(p, ""); merr != nil && err == nil {
				err = r.errf(e.path, "exclude pattern %q: %v", p, merr)
			}
		}
		return err
	},
	"service": func(r *configReader, a *Artifact, e entry) (err error) {
		a.Service, err = r.str(e.v, e.path)
		return err
	},
}
