package sandbox

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const testMap = `# local stand-ins
python:3.11-slim = proctor/python:3.11-slim
ubuntu:22.04=debian:bookworm-slim

# prefixes
ghcr.io/ = mirror.local/ghcr/
ghcr.io/laude-institute/ = registry.local/tb/
`

func mustMap(t *testing.T, src string) *ImageMap {
	t.Helper()
	m, err := ParseImageMap(strings.NewReader(src), "map.txt")
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRewriteRef(t *testing.T) {
	m := mustMap(t, testMap)
	for _, tc := range []struct{ in, want string }{
		{"python:3.11-slim", "proctor/python:3.11-slim"},
		{"ubuntu:22.04", "debian:bookworm-slim"},
		{"python:3.12-slim", "python:3.12-slim"},                                     // no rule
		{"docker.io/library/python:3.11-slim", "docker.io/library/python:3.11-slim"}, // exact means exact
		{"ghcr.io/foo/bar:1", "mirror.local/ghcr/foo/bar:1"},
		{"ghcr.io/laude-institute/t-bench/x:latest", "registry.local/tb/t-bench/x:latest"}, // longest prefix wins
		{"notghcr.io/x", "notghcr.io/x"},
	} {
		if got := m.RewriteRef(tc.in); got != tc.want {
			t.Errorf("RewriteRef(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	var nilMap *ImageMap
	if nilMap.RewriteRef("x") != "x" || nilMap.Len() != 0 {
		t.Error("nil map rewrites")
	}
	want := []ImageRule{
		{From: "python:3.11-slim", To: "proctor/python:3.11-slim"},
		{From: "ubuntu:22.04", To: "debian:bookworm-slim"},
		{From: "ghcr.io/laude-institute/", To: "registry.local/tb/", Prefix: true},
		{From: "ghcr.io/", To: "mirror.local/ghcr/", Prefix: true},
	}
	if got := m.Rules(); !reflect.DeepEqual(got, want) {
		t.Errorf("Rules() = %+v", got)
	}
}

func TestParseImageMapErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"python:3.11", "map.txt:1: want `from = to`"},
		{"\n= x", "map.txt:2: empty image reference"},
		{"a =", "map.txt:1: empty image reference"},
		{"a b = c", "map.txt:1: image reference with whitespace"},
		{"a = b\na = c", `map.txt:2: "a" is already mapped on line 1`},
		{"ghcr.io/ = mirror", `map.txt:1: prefix rule "ghcr.io/" must map to a prefix`},
		{"a = b/", `map.txt:1: exact rule "a" maps to a prefix`},
	} {
		_, err := ParseImageMap(strings.NewReader(tc.src), "map.txt")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
	p := filepath.Join(t.TempDir(), "images.map")
	if err := os.WriteFile(p, []byte(testMap), 0o644); err != nil {
		t.Fatal(err)
	}
	if m, err := LoadImageMap(p); err != nil || m.Len() != 4 {
		t.Fatalf("LoadImageMap: %v", err)
	}
	if _, err := LoadImageMap(p + ".missing"); err == nil || !strings.Contains(err.Error(), "images.map.missing") {
		t.Fatalf("missing file: %v", err)
	}
}

func TestRewriteDockerfile(t *testing.T) {
	m := mustMap(t, testMap)
	for _, tc := range []struct {
		name     string
		in, want string
		rewrites []Rewrite
	}{
		{
			name:     "plain",
			in:       "FROM python:3.11-slim\nRUN echo hi\n",
			want:     "FROM proctor/python:3.11-slim\nRUN echo hi\n",
			rewrites: []Rewrite{{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"}},
		},
		{
			name:     "lowercase from, platform flag, AS name, CRLF",
			in:       "# comment\r\nfrom --platform=linux/amd64 ubuntu:22.04 AS build\r\nRUN make\r\n",
			want:     "# comment\r\nfrom --platform=linux/amd64 debian:bookworm-slim AS build\r\nRUN make\r\n",
			rewrites: []Rewrite{{Line: 2, From: "ubuntu:22.04", To: "debian:bookworm-slim", Rule: "ubuntu:22.04"}},
		},
		{
			name: "multi-stage: stage names are not images",
			in: "FROM ghcr.io/laude-institute/base:1 AS base\n" +
				"FROM base AS test\n" +
				"FROM python:3.11-slim\n" +
				"COPY --from=base /x /x\n",
			want: "FROM registry.local/tb/base:1 AS base\n" +
				"FROM base AS test\n" +
				"FROM proctor/python:3.11-slim\n" +
				"COPY --from=base /x /x\n",
			rewrites: []Rewrite{
				{Line: 1, From: "ghcr.io/laude-institute/base:1", To: "registry.local/tb/base:1", Rule: "ghcr.io/laude-institute/"},
				{Line: 3, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"},
			},
		},
		{
			name: "heredoc bodies are never rewritten",
			in: "FROM python:3.11-slim\n" +
				"RUN <<EOF\n" +
				"FROM python:3.11-slim\n" +
				"echo done\n" +
				"EOF\n" +
				"COPY <<-\"END\" /etc/x <<'TWO' /etc/y\n" +
				"\tFROM ubuntu:22.04\n" +
				"\tEND\n" +
				"FROM ubuntu:22.04\n" +
				"TWO\n" +
				"FROM ubuntu:22.04\n",
			want: "FROM proctor/python:3.11-slim\n" +
				"RUN <<EOF\n" +
				"FROM python:3.11-slim\n" +
				"echo done\n" +
				"EOF\n" +
				"COPY <<-\"END\" /etc/x <<'TWO' /etc/y\n" +
				"\tFROM ubuntu:22.04\n" +
				"\tEND\n" +
				"FROM ubuntu:22.04\n" +
				"TWO\n" +
				"FROM debian:bookworm-slim\n",
			rewrites: []Rewrite{
				{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"},
				{Line: 11, From: "ubuntu:22.04", To: "debian:bookworm-slim", Rule: "ubuntu:22.04"},
			},
		},
		{
			name: "continuation lines are never rewritten",
			in: "FROM python:3.11-slim\n" +
				"RUN echo a \\\n" +
				"  FROM python:3.11-slim \\\n" +
				"# a comment inside the continuation\n" +
				"\n" +
				"  && echo b\n" +
				"FROM ubuntu:22.04\n",
			want: "FROM proctor/python:3.11-slim\n" +
				"RUN echo a \\\n" +
				"  FROM python:3.11-slim \\\n" +
				"# a comment inside the continuation\n" +
				"\n" +
				"  && echo b\n" +
				"FROM debian:bookworm-slim\n",
			rewrites: []Rewrite{
				{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"},
				{Line: 7, From: "ubuntu:22.04", To: "debian:bookworm-slim", Rule: "ubuntu:22.04"},
			},
		},
		{
			name: "escape directive",
			in: "# escape=`\n" +
				"FROM python:3.11-slim\n" +
				"RUN echo a `\n" +
				"FROM ubuntu:22.04\n" +
				"RUN echo c:\\ \n" +
				"FROM ubuntu:22.04\n",
			want: "# escape=`\n" +
				"FROM proctor/python:3.11-slim\n" +
				"RUN echo a `\n" +
				"FROM ubuntu:22.04\n" +
				"RUN echo c:\\ \n" +
				"FROM debian:bookworm-slim\n",
			rewrites: []Rewrite{
				{Line: 2, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"},
				{Line: 6, From: "ubuntu:22.04", To: "debian:bookworm-slim", Rule: "ubuntu:22.04"},
			},
		},
		{
			name: "comments and shifts are left alone",
			in: "# FROM python:3.11-slim\n" +
				"FROM alpine:3\n" +
				"RUN echo $((1<<3))\n" +
				"FROM ubuntu:22.04\n",
			want: "# FROM python:3.11-slim\n" +
				"FROM alpine:3\n" +
				"RUN echo $((1<<3))\n" +
				"FROM debian:bookworm-slim\n",
			rewrites: []Rewrite{{Line: 4, From: "ubuntu:22.04", To: "debian:bookworm-slim", Rule: "ubuntu:22.04"}},
		},
		{
			// As the builder does without --build-arg: a FROM with
			// variables is read with the global ARGs' defaults; a variable
			// without a value, or an ARG after the first FROM, leaves it
			// alone.
			name: "variables take their global ARG defaults",
			in: "ARG REG=\"ubuntu\" TAG=22.04\n" +
				"ARG BASE=python:3.11-slim\n" +
				"ARG UNSET\n" +
				"FROM ${BASE} AS one\n" +
				"FROM $REG:${TAG}\n" +
				"FROM ${UNSET}\n" +
				"FROM ${UNSET:-python:3.11-slim}\n" +
				"ARG LATE=python:3.11-slim\n" +
				"FROM ${LATE}\n" +
				"FROM ${BASE/python/x}\n",
			want: "ARG REG=\"ubuntu\" TAG=22.04\n" +
				"ARG BASE=python:3.11-slim\n" +
				"ARG UNSET\n" +
				"FROM proctor/python:3.11-slim AS one\n" +
				"FROM debian:bookworm-slim\n" +
				"FROM ${UNSET}\n" +
				"FROM proctor/python:3.11-slim\n" +
				"ARG LATE=python:3.11-slim\n" +
				"FROM ${LATE}\n" +
				"FROM ${BASE/python/x}\n",
			rewrites: []Rewrite{
				{Line: 4, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"},
				{Line: 5, From: "ubuntu:22.04", To: "debian:bookworm-slim", Rule: "ubuntu:22.04"},
				{Line: 7, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"},
			},
		},
		{
			// BuildKit's parser joins the continuation lines of a FROM;
			// the operand is spliced where it stands.
			name: "FROM split over continuation lines",
			in: "FROM \\\n" +
				"  --platform=linux/amd64 \\\n" +
				"# a comment\n" +
				"  python:3.11-slim \\\n" +
				"  AS build\n",
			want: "FROM \\\n" +
				"  --platform=linux/amd64 \\\n" +
				"# a comment\n" +
				"  proctor/python:3.11-slim \\\n" +
				"  AS build\n",
			rewrites: []Rewrite{{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"}},
		},
		{
			name: "unparseable Dockerfile is left alone",
			in:   "FROM python:3.11-slim\nRUN <<EOF\nnever closed\n",
			want: "FROM python:3.11-slim\nRUN <<EOF\nnever closed\n",
		},
		{
			name: "nothing to rewrite",
			in:   "FROM alpine:3\nRUN true",
			want: "FROM alpine:3\nRUN true",
		},
		{
			name:     "no final newline",
			in:       "FROM python:3.11-slim",
			want:     "FROM proctor/python:3.11-slim",
			rewrites: []Rewrite{{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim", Rule: "python:3.11-slim"}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, rw := m.RewriteDockerfile([]byte(tc.in))
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
			if !reflect.DeepEqual(rw, tc.rewrites) {
				t.Errorf("rewrites %+v, want %+v", rw, tc.rewrites)
			}
		})
	}
	var nilMap *ImageMap
	if got, rw := nilMap.RewriteDockerfile([]byte("FROM x\n")); string(got) != "FROM x\n" || rw != nil {
		t.Error("nil map rewrote")
	}
}

// TestRepositoryRules: `repo:*` maps every tag and digest of a repository,
// however it is spelled; `to:*` keeps the tag, any other `to` is one image.
func TestRepositoryRules(t *testing.T) {
	m := mustMap(t, `python:* = proctor/python:*
docker.io/library/python = python-latest:local
ubuntu:* = debian:bookworm-slim
ubuntu:20.04 = ubuntu-focal:local
localhost:5000/tools/x:* = registry.local/x:*
ghcr.io/ = mirror.local/ghcr/
`)
	digest := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct{ in, want, rule string }{
		{"python:3.11-slim", "proctor/python:3.11-slim", "python:*"},
		{"python:3.12", "proctor/python:3.12", "python:*"},
		{"python", "proctor/python", "python:*"},
		{"docker.io/library/python", "python-latest:local", "docker.io/library/python"}, // exact wins
		{"docker.io/library/python:3.13-slim", "proctor/python:3.13-slim", "python:*"},
		{"library/python:3", "proctor/python:3", "python:*"},
		{"python@" + digest, "proctor/python@" + digest, "python:*"},
		{"python:3@" + digest, "proctor/python:3@" + digest, "python:*"},
		{"pythonista:1", "pythonista:1", ""},         // another repository
		{"someone/python:3", "someone/python:3", ""}, // another repository
		{"ubuntu:22.04", "debian:bookworm-slim", "ubuntu:*"},
		{"ubuntu:20.04", "ubuntu-focal:local", "ubuntu:20.04"}, // exact wins
		{"localhost:5000/tools/x:1.2", "registry.local/x:1.2", "localhost:5000/tools/x:*"},
		{"localhost:5000/tools/x", "registry.local/x", "localhost:5000/tools/x:*"},
		{"ghcr.io/a/b:1", "mirror.local/ghcr/a/b:1", "ghcr.io/"},
		{"Not A Reference", "Not A Reference", ""},
	} {
		got, rule := m.RewriteRefRule(tc.in)
		if got != tc.want || rule != tc.rule || m.RewriteRef(tc.in) != tc.want {
			t.Errorf("rewrite(%q) = %q by %q, want %q by %q", tc.in, got, rule, tc.want, tc.rule)
		}
	}
	want := []ImageRule{
		{From: "docker.io/library/python", To: "python-latest:local"},
		{From: "ubuntu:20.04", To: "ubuntu-focal:local"},
		{From: "localhost:5000/tools/x:*", To: "registry.local/x:*", Repository: true},
		{From: "python:*", To: "proctor/python:*", Repository: true},
		{From: "ubuntu:*", To: "debian:bookworm-slim", Repository: true},
		{From: "ghcr.io/", To: "mirror.local/ghcr/", Prefix: true},
	}
	if got := m.Rules(); !reflect.DeepEqual(got, want) || m.Len() != 6 {
		t.Errorf("Rules() = %+v", got)
	}
	out, rw := m.RewriteDockerfile([]byte("FROM python:3.12-slim AS a\nFROM docker.io/library/ubuntu:24.04\n"))
	if string(out) != "FROM proctor/python:3.12-slim AS a\nFROM debian:bookworm-slim\n" || len(rw) != 2 || rw[0].Rule != "python:*" || rw[1].Rule != "ubuntu:*" {
		t.Errorf("Dockerfile: %q %+v", out, rw)
	}
}

// TestImageMapRefusesRulesThatCannotMatch: every rule is checked with the
// reference grammar; a rule no reference can match, or whose result is not
// a reference, names its line.
func TestImageMapRefusesRulesThatCannotMatch(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"python: = proctor/python:3", `map.txt:1: "python:" is not an image reference (an empty tag matches nothing); for every tag of python write "python:*"`},
		{"# c\n\ndocker.io/library/python: = x", `map.txt:3: "docker.io/library/python:" is not an image reference`},
		{"Python:3 = python:3", `map.txt:1: "Python:3" is not an image reference`},
		{"python:3 = Proctor/Python", `"Proctor/Python" is not an image reference`},
		{"python:3.* = x", `"python:3.*": "*" stands only for a whole tag`},
		{"py*:3 = x", `"*" stands only for a whole tag`},
		{"python:3 = proctor/python:*", `only a repository rule ("python:3...:*") keeps the tag`},
		{"python:3:* = x", `repository rule "python:3:*": "python:3" is not a repository (it has a tag or digest)`},
		{"python:* = x:3:*", `repository rule "python:*": "x:3:*"`},
		{"python:* = bad ref", "image reference with whitespace"},
		{"python:* = UPPER", `repository rule "python:*": "UPPER" is not an image reference`},
		{"python:*=", "empty image reference"},
		{"= python", "empty image reference"},
		{"python:3 = python:3", `"python:3" is mapped to itself`},
		{"python:* = a:*\ndocker.io/library/python:* = b:*", `map.txt:2: "docker.io/library/python:*" is already mapped on line 1`},
		{"ghcr.io//= x/", `prefix rule "ghcr.io//": no image reference starts with it`},
		{"ghcr.io/-x/ = x/", `prefix rule "ghcr.io/-x/": no image reference starts with it`},
		{"ghcr.io/ = mirror/A/", `prefix rule "ghcr.io/": "mirror/A/" does not start an image reference`},
		{"a:1 = b:2:3", `"b:2:3" is not an image reference`},
	} {
		_, err := ParseImageMap(strings.NewReader(tc.src), "map.txt")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.src, err, tc.want)
		}
	}
}

func TestDockerfileBases(t *testing.T) {
	m := mustMap(t, "python:* = proctor/python:*\n")
	// ${V/1/3.12} expands as the builder's shell expands it.
	src := "ARG V=1\nFROM python:3.11-slim AS build\nFROM build AS test\nFROM debian:bookworm-slim\nFROM ${BASE}\nFROM scratch\nFROM python:3.11-slim\nRUN <<EOF\nFROM not-an-image\nEOF\nFROM python:${V/1/3.12}\n"
	want := []string{"proctor/python:3.11-slim", "debian:bookworm-slim", "${BASE}", "scratch", "proctor/python:3.12"}
	if got := m.DockerfileBases([]byte(src)); !reflect.DeepEqual(got, want) {
		t.Errorf("bases %q, want %q", got, want)
	}
	var nilMap *ImageMap
	if got := nilMap.DockerfileBases([]byte(src)); len(got) != 5 || got[0] != "python:3.11-slim" {
		t.Errorf("nil map bases %q", got)
	}
}

// TestImageMapTrailingComments: docs/sandboxes.md's example map, comments after
// the rules included, parses as its four rules.
func TestImageMapTrailingComments(t *testing.T) {
	m := mustMap(t, `python:3.11-slim = proctor/python:3.11-slim     # exact, as written
python:* = proctor/python:*                     # every tag of a repository, tag kept
ubuntu:* = debian:bookworm-slim                 # every tag of a repository, one image
docker.io/ = mirror.example.com/docker.io/      # prefix (both sides end in /)
`)
	if m.Len() != 4 {
		t.Fatalf("%d rules, want 4: %+v", m.Len(), m.Rules())
	}
	for from, want := range map[string]string{
		"python:3.11-slim":      "proctor/python:3.11-slim",
		"python:3.12":           "proctor/python:3.12",
		"ubuntu:22.04":          "debian:bookworm-slim",
		"docker.io/library/foo": "mirror.example.com/docker.io/library/foo",
	} {
		if got := m.RewriteRef(from); got != want {
			t.Errorf("RewriteRef(%q) = %q, want %q", from, got, want)
		}
	}
}
