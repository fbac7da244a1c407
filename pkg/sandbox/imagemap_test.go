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
			rewrites: []Rewrite{{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim"}},
		},
		{
			name:     "lowercase from, platform flag, AS name, CRLF",
			in:       "# comment\r\nfrom --platform=linux/amd64 ubuntu:22.04 AS build\r\nRUN make\r\n",
			want:     "# comment\r\nfrom --platform=linux/amd64 debian:bookworm-slim AS build\r\nRUN make\r\n",
			rewrites: []Rewrite{{Line: 2, From: "ubuntu:22.04", To: "debian:bookworm-slim"}},
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
				{Line: 1, From: "ghcr.io/laude-institute/base:1", To: "registry.local/tb/base:1"},
				{Line: 3, From: "python:3.11-slim", To: "proctor/python:3.11-slim"},
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
				{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim"},
				{Line: 11, From: "ubuntu:22.04", To: "debian:bookworm-slim"},
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
				{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim"},
				{Line: 7, From: "ubuntu:22.04", To: "debian:bookworm-slim"},
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
				{Line: 2, From: "python:3.11-slim", To: "proctor/python:3.11-slim"},
				{Line: 6, From: "ubuntu:22.04", To: "debian:bookworm-slim"},
			},
		},
		{
			name: "variables, comments and shifts are left alone",
			in: "ARG BASE=python:3.11-slim\n" +
				"# FROM python:3.11-slim\n" +
				"FROM ${BASE}\n" +
				"RUN echo $((1<<3))\n" +
				"FROM ubuntu:22.04\n",
			want: "ARG BASE=python:3.11-slim\n" +
				"# FROM python:3.11-slim\n" +
				"FROM ${BASE}\n" +
				"RUN echo $((1<<3))\n" +
				"FROM debian:bookworm-slim\n",
			rewrites: []Rewrite{{Line: 5, From: "ubuntu:22.04", To: "debian:bookworm-slim"}},
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
			rewrites: []Rewrite{{Line: 1, From: "python:3.11-slim", To: "proctor/python:3.11-slim"}},
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
