package sandbox

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/distribution/reference"

	"github.com/proctor-eval/proctor/pkg/dockerfile"
)

// ImageMap rewrites image references before a build or a run, so a site
// behind a registry mirror, or an offline machine with local stand-ins, runs
// public tasks unchanged (`--image-map FILE`, `PROCTOR_IMAGE_MAP`).
//
// The map file has one rule per line, `from = to`; blank lines, lines
// starting with `#` and a `#` comment after a rule (image references never
// hold a `#`) are ignored:
//
//	# exact names
//	python:3.11-slim = proctor/python:3.11-slim
//	# repositories: every tag (and digest) of python
//	python:* = proctor/python:*
//	ubuntu:* = debian:bookworm-slim
//	# prefixes: both sides end in "/"
//	docker.io/ = mirror.example.com/docker.io/
//	ghcr.io/laude-institute/ = registry.local/tb/
//
// Three kinds of rule:
//
//   - An exact rule matches a reference exactly, as written (no
//     normalisation: `debian` and `docker.io/library/debian:latest` are
//     different names).
//   - A repository rule, `from` written `<repository>:*`, matches every
//     reference of that repository, with any tag or digest or none, however
//     the repository is spelled (`python:3.12`, `docker.io/library/python`,
//     `python@sha256:...` all match `python:*`; `python` is Docker's
//     `docker.io/library/python`). With `to` written `<repository>:*` the
//     repository is replaced and the tag or digest kept as written
//     (`python:3.12-slim` becomes `proctor/python:3.12-slim`); with any other
//     `to`, every matching reference becomes that one image.
//   - A prefix rule, `from` ending in "/", matches a reference starting with
//     it, as written, and replaces that prefix by `to` (which must end in
//     "/" too).
//
// An exact rule wins over a repository rule, which wins over a prefix rule;
// among prefix rules the longest wins. Each reference is rewritten at most
// once (rules do not chain).
//
// A rule that can never match, or whose result is not an image reference,
// is refused when the map is parsed: both sides are checked with the
// reference grammar of Docker's distribution library, so `python:` (a tag
// that is empty: write `python:*` for every tag), `Python:3` (upper case),
// a `*` anywhere but as a whole tag, or a `to` ending in ":*" for a `from`
// that is not a repository rule, are errors naming the line. So is a rule
// mapping a reference to itself, and two repository rules naming the same
// repository in different spellings.
//
// The zero value and a nil *ImageMap map nothing. An ImageMap is immutable
// after parsing and safe for concurrent use.
type ImageMap struct {
	exact    map[string]string
	repos    map[string]ImageRule // by normalised repository name
	prefixes []ImageRule          // longest From first
}

// ImageRule is one rule of an ImageMap.
type ImageRule struct {
	From string `json:"from"`
	To   string `json:"to"`
	// Prefix is true for a prefix rule (From and To end in "/").
	Prefix bool `json:"prefix,omitempty"`
	// Repository is true for a repository rule (From ends in ":*").
	Repository bool `json:"repository,omitempty"`
}

// Rewrite records one image reference rewritten by an ImageMap.
type Rewrite struct {
	// Line is the 1-based Dockerfile line of the FROM instruction; 0 for a
	// reference rewritten by RewriteRef (docker_image).
	Line int    `json:"line,omitempty"`
	From string `json:"from"`
	To   string `json:"to"`
	// Rule is the From of the rule that matched (as in the map file).
	Rule string `json:"rule"`
}

// LoadImageMap reads and parses the map file at path (see ImageMap for the
// format).
func LoadImageMap(path string) (*ImageMap, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("image map: %w", err)
	}
	defer f.Close()
	return ParseImageMap(f, path)
}

// anyTag is the tag of a repository rule: every tag.
const anyTag = ":*"

// ParseImageMap parses a map (see ImageMap for the format) read from r;
// name is used in errors ("FILE:LINE: ..."). A line without "=", an empty
// side, a reference containing whitespace, a side that is not a valid
// image reference (or prefix of one, or repository rule), a prefix rule
// whose sides do not both end in "/", a rule that maps a reference to
// itself, or the same `from` twice is an error.
func ParseImageMap(r io.Reader, name string) (*ImageMap, error) {
	m := &ImageMap{exact: map[string]string{}, repos: map[string]ImageRule{}}
	seen := map[string]int{}
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		line, _, _ := strings.Cut(sc.Text(), "#") // a comment, whole-line or after the rule
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		from, to, ok := strings.Cut(line, "=")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		if !ok {
			return nil, fmt.Errorf("%s:%d: want `from = to`, got %q", name, n, line)
		}
		if from == "" || to == "" {
			return nil, fmt.Errorf("%s:%d: empty image reference in %q", name, n, line)
		}
		if strings.ContainsAny(from, " \t") || strings.ContainsAny(to, " \t") {
			return nil, fmt.Errorf("%s:%d: image reference with whitespace in %q", name, n, line)
		}
		if from == to {
			return nil, fmt.Errorf("%s:%d: %q is mapped to itself", name, n, from)
		}
		rule, key, err := parseRule(from, to)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, n, err)
		}
		kind := "exact "
		if rule.Repository {
			kind = "repository "
		}
		if prev, dup := seen[kind+key]; dup {
			return nil, fmt.Errorf("%s:%d: %q is already mapped on line %d", name, n, from, prev)
		}
		seen[kind+key] = n
		switch {
		case rule.Prefix:
			m.prefixes = append(m.prefixes, rule)
		case rule.Repository:
			m.repos[key] = rule
		default:
			m.exact[from] = to
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	sort.SliceStable(m.prefixes, func(i, j int) bool { return len(m.prefixes[i].From) > len(m.prefixes[j].From) })
	return m, nil
}

// parseRule checks one rule against the reference grammar and returns it
// with the key that makes two rules the same: the normalised repository
// name of a repository rule, else From.
func parseRule(from, to string) (ImageRule, string, error) {
	rule := ImageRule{From: from, To: to}
	switch {
	case strings.HasSuffix(from, "/"):
		if !strings.HasSuffix(to, "/") {
			return rule, "", fmt.Errorf("prefix rule %q must map to a prefix ending in \"/\", got %q", from, to)
		}
		// A prefix can match only if some reference starts with it.
		if _, err := reference.ParseNormalizedNamed(from + "x"); err != nil {
			return rule, "", fmt.Errorf("prefix rule %q: no image reference starts with it (%v)", from, err)
		}
		if _, err := reference.ParseNormalizedNamed(to + "x"); err != nil {
			return rule, "", fmt.Errorf("prefix rule %q: %q does not start an image reference (%v)", from, to, err)
		}
		rule.Prefix = true
		return rule, from, nil
	case strings.HasSuffix(to, "/"):
		return rule, "", fmt.Errorf("exact rule %q maps to a prefix %q; end both sides in \"/\" for a prefix rule", from, to)
	case strings.HasSuffix(from, anyTag):
		repo, err := repositoryName(strings.TrimSuffix(from, anyTag))
		if err != nil {
			return rule, "", fmt.Errorf("repository rule %q: %w", from, err)
		}
		if toRepo, ok := strings.CutSuffix(to, anyTag); ok {
			if _, err := repositoryName(toRepo); err != nil {
				return rule, "", fmt.Errorf("repository rule %q: %q: %w", from, to, err)
			}
		} else if err := checkReference(to); err != nil {
			return rule, "", fmt.Errorf("repository rule %q: %w", from, err)
		}
		rule.Repository = true
		return rule, repo, nil
	case strings.HasSuffix(from, ":"):
		return rule, "", fmt.Errorf("%q is not an image reference (an empty tag matches nothing); for every tag of %s write %q", from, strings.TrimSuffix(from, ":"), strings.TrimSuffix(from, ":")+anyTag)
	}
	if err := checkReference(from); err != nil {
		return rule, "", err
	}
	if strings.HasSuffix(to, anyTag) {
		return rule, "", fmt.Errorf("%q maps to %q, but only a repository rule (%q) keeps the tag", from, to, from+"...:*")
	}
	if err := checkReference(to); err != nil {
		return rule, "", err
	}
	return rule, from, nil
}

// checkReference returns an error unless s is a valid image reference.
func checkReference(s string) error {
	if strings.Contains(s, "*") {
		return fmt.Errorf("%q: \"*\" stands only for a whole tag, in a repository rule (`repo:*`)", s)
	}
	if _, err := reference.ParseNormalizedNamed(s); err != nil {
		return fmt.Errorf("%q is not an image reference: %v", s, err)
	}
	return nil
}

// repositoryName returns the normalised name of repo, an image repository
// without tag or digest.
func repositoryName(repo string) (string, error) {
	if err := checkReference(repo); err != nil {
		return "", err
	}
	named, _ := reference.ParseNormalizedNamed(repo)
	if !reference.IsNameOnly(named) {
		return "", fmt.Errorf("%q is not a repository (it has a tag or digest)", repo)
	}
	return named.Name(), nil
}

// Rules returns the map's rules, exact rules first (sorted by From), then
// repository rules (sorted by From), then prefix rules (longest first): the
// mapping in force, for recording in a run's events.
func (m *ImageMap) Rules() []ImageRule {
	if m == nil {
		return nil
	}
	out := make([]ImageRule, 0, m.Len())
	for from, to := range m.exact {
		out = append(out, ImageRule{From: from, To: to})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].From < out[j].From })
	repos := make([]ImageRule, 0, len(m.repos))
	for _, r := range m.repos {
		repos = append(repos, r)
	}
	sort.Slice(repos, func(i, j int) bool { return repos[i].From < repos[j].From })
	out = append(out, repos...)
	return append(out, m.prefixes...)
}

// Len returns the number of rules.
func (m *ImageMap) Len() int {
	if m == nil {
		return 0
	}
	return len(m.exact) + len(m.repos) + len(m.prefixes)
}

// RewriteRef returns ref rewritten by the map, or ref unchanged when no
// rule matches.
func (m *ImageMap) RewriteRef(ref string) string {
	to, _ := m.RewriteRefRule(ref)
	return to
}

// RewriteRefRule is RewriteRef that also returns the From of the rule that
// matched (ref unchanged and "" when none did), for a Rewrite record.
func (m *ImageMap) RewriteRefRule(ref string) (string, string) {
	if m == nil {
		return ref, ""
	}
	if to, ok := m.exact[ref]; ok {
		return to, ref
	}
	if len(m.repos) > 0 {
		if named, err := reference.ParseNormalizedNamed(ref); err == nil {
			if r, ok := m.repos[named.Name()]; ok {
				toRepo, keep := strings.CutSuffix(r.To, anyTag)
				if !keep {
					return r.To, r.From
				}
				// The tag and digest as written: what follows the name.
				if asWritten, err := reference.Parse(ref); err == nil {
					if nm, ok := asWritten.(reference.Named); ok {
						return toRepo + ref[len(nm.Name()):], r.From
					}
				}
			}
		}
	}
	for _, p := range m.prefixes {
		if strings.HasPrefix(ref, p.From) {
			return p.To + ref[len(p.From):], p.From
		}
	}
	return ref, ""
}

// RewriteDockerfile rewrites the image references of the FROM instructions
// of a Dockerfile and returns the new text and the rewrites made (nil when
// none). The file is read with BuildKit's parser (pkg/dockerfile), so
// heredoc bodies, comments, continuation lines of other instructions and
// the `# escape=` directive are read as the builder reads them. Only the
// image operand of a FROM instruction is touched: its `--platform=...` (or
// other `--flag`) options and its `AS name` are kept, a FROM naming an
// earlier build stage is left alone. A reference with variables (`${BASE}`,
// `$REG/x:${TAG:-1}`) is expanded by the builder's shell rules with the
// defaults of the ARGs declared before the first FROM, as the builder reads
// it when no --build-arg is given (proctor passes none), and when it
// matches a rule the operand is replaced by the rewritten reference; one
// that does not expand to a valid reference (a variable without a value)
// is left alone. Line endings and all other bytes are kept as they are.
// A Dockerfile the parser refuses is returned unchanged.
func (m *ImageMap) RewriteDockerfile(src []byte) ([]byte, []Rewrite) {
	if m.Len() == 0 {
		return src, nil
	}
	out, rewrites, _ := m.ScanDockerfile(src)
	return out, rewrites
}

// DockerfileBases returns the base images of a Dockerfile after the map's
// rewrites (nil map: as written): the image operand of each FROM that does
// not name an earlier build stage, in order, without repeats, with
// variables expanded from the global ARG defaults (see RewriteDockerfile);
// `scratch` and references whose variables have no value are included as
// written.
func (m *ImageMap) DockerfileBases(src []byte) []string {
	_, _, bases := m.ScanDockerfile(src)
	return bases
}

// ScanDockerfile is RewriteDockerfile and DockerfileBases in one pass: the
// rewritten text, the rewrites made and the base images after them. Unlike
// RewriteDockerfile it scans even with no rules (the bases are wanted). The
// Dockerfile is read by pkg/dockerfile
// (BuildKit's parser); one it cannot parse is returned unchanged with no
// bases, and the build reports the builder's own error.
func (m *ImageMap) ScanDockerfile(src []byte) ([]byte, []Rewrite, []string) {
	return m.ScanBuild(src, nil, "")
}

// ScanBuild is ScanDockerfile for a build with build arguments (a global
// ARG takes its argument's value, as the builder expands FROM with
// `--build-arg`) and a target stage ("" for the last): the stages after
// the target are not built, so their base images are neither listed nor
// rewritten. A target no stage is named is ignored here (the builder
// reports it).
func (m *ImageMap) ScanBuild(src []byte, args map[string]string, target string) ([]byte, []Rewrite, []string) {
	f, err := dockerfile.ParseArgs(src, args)
	if err != nil {
		return src, nil, nil
	}
	stages := f.Stages
	if target != "" {
		for i, st := range f.Stages {
			if st.Name == strings.ToLower(target) {
				stages = f.Stages[:i+1]
				break
			}
		}
	}
	var bases []string
	var rewrites []Rewrite
	repl := map[int]string{}
	for i, st := range stages {
		if st.FromStage || st.Image == "" {
			continue
		}
		if st.Ref == "" {
			// A variable without a value: left alone, listed as written.
			if !slices.Contains(bases, st.Image) {
				bases = append(bases, st.Image)
			}
			continue
		}
		base := st.Ref
		if to, rule := m.RewriteRefRule(st.Ref); to != st.Ref && st.Replaceable() {
			repl[i] = to
			rewrites = append(rewrites, Rewrite{Line: st.Line, From: st.Ref, To: to, Rule: rule})
			base = to
		}
		if !slices.Contains(bases, base) {
			bases = append(bases, base)
		}
	}
	if len(rewrites) == 0 {
		return src, nil, bases
	}
	return f.ReplaceImages(repl), rewrites, bases
}
