package dockerfile

import (
	"reflect"
	"strings"
	"testing"
)

func mustParse(t *testing.T, src string) *File {
	t.Helper()
	f, err := Parse([]byte(src))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return f
}

// images returns each stage as "Line Image Ref Name Platform stage?".
func images(f *File) []string {
	var out []string
	for _, s := range f.Stages {
		kind := "image"
		if s.FromStage {
			kind = "stage"
		}
		out = append(out, strings.Join([]string{itoa(s.Line), s.Image, s.Ref, s.Name, s.Platform, kind}, "|"))
	}
	return out
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + itoa(n%10)
}

func TestStages(t *testing.T) {
	for _, tc := range []struct {
		name string
		src  string
		want []string
	}{
		{
			name: "platform flag and AS name; a stage name is not an image",
			src: "FROM --platform=linux/amd64 python:3.11-slim AS Build\n" +
				"FROM build AS test\n" +
				"FROM BUILD\n" +
				"FROM scratch\n",
			want: []string{
				"1|python:3.11-slim|python:3.11-slim|build|linux/amd64|image",
				"2|build|build|test||stage",
				"3|BUILD|BUILD|||stage",
				"4|scratch|scratch|||image",
			},
		},
		{
			name: "a stage name used before its declaration is an image",
			src:  "FROM base\nFROM debian AS base\n",
			want: []string{"1|base|base|||image", "2|debian|debian|base||image"},
		},
		{
			name: "global ARG defaults: quotes, earlier ARGs, no default, late ARG",
			src: "ARG REG=\"ubuntu\" TAG=22.04\n" +
				"ARG IMG=${REG}:${TAG}\n" +
				"ARG UNSET\n" +
				"FROM ${IMG} AS one\n" +
				"FROM $REG:${TAG:-1}\n" +
				"FROM ${UNSET}\n" +
				"FROM python:${UNSET}\n" +
				"FROM ${UNSET:-python:3.11-slim}\n" +
				"ARG LATE=python:3.11-slim\n" +
				"FROM ${LATE}\n",
			want: []string{
				"4|${IMG}|ubuntu:22.04|one||image",
				"5|$REG:${TAG:-1}|ubuntu:22.04|||image",
				"6|${UNSET}||||image",
				"7|python:${UNSET}||||image",
				"8|${UNSET:-python:3.11-slim}|python:3.11-slim|||image",
				"10|${LATE}||||image",
			},
		},
		{
			name: "heredoc bodies hold no instructions",
			src: "FROM alpine:3\n" +
				"RUN <<EOF\nFROM not-an-image\nEOF\n" +
				"COPY <<-\"END\" /etc/x <<'TWO' /etc/y\n\tFROM nor-this\n\tEND\nFROM nor-that\nTWO\n" +
				"FROM debian:bookworm-slim\n",
			want: []string{"1|alpine:3|alpine:3|||image", "10|debian:bookworm-slim|debian:bookworm-slim|||image"},
		},
		{
			name: "line continuations, comments inside them",
			src: "FROM alpine:3\n" +
				"RUN echo a \\\n  FROM not-an-image \\\n# comment\n\n  && echo b\n" +
				"FROM \\\n  --platform=linux/arm64 \\\n  debian:bookworm-slim \\\n  AS final\n",
			want: []string{"1|alpine:3|alpine:3|||image", "7|debian:bookworm-slim|debian:bookworm-slim|final|linux/arm64|image"},
		},
		{
			name: "escape directive",
			src: "# escape=`\n" +
				"FROM alpine:3\n" +
				"RUN echo a `\nFROM not-an-image\n" +
				"RUN echo c:\\ \n" +
				"FROM debian:bookworm-slim\n",
			want: []string{"2|alpine:3|alpine:3|||image", "6|debian:bookworm-slim|debian:bookworm-slim|||image"},
		},
		{
			name: "byte order mark, CRLF, lower-case keyword",
			src:  "\ufeff# c\r\nfrom alpine:3 as a\r\n",
			want: []string{"2|alpine:3|alpine:3|a||image"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := images(mustParse(t, tc.src)); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("stages\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestGlobalArgs(t *testing.T) {
	f := mustParse(t, "ARG A=1 B='two words' C\nARG D=${A}x\nARG A\nFROM x\nARG E=5\n")
	want := map[string]string{"B": "two words", "D": "1x"}
	if !reflect.DeepEqual(f.Args, want) {
		t.Errorf("args %v, want %v", f.Args, want)
	}
}

// TestBuildArgs: a build argument overrides the default of a global ARG
// the file declares (with or without a default), so FROM expands as it is
// built; one the file does not declare changes nothing.
func TestBuildArgs(t *testing.T) {
	f, err := ParseArgs([]byte("ARG BASE=debian:bookworm-slim\nARG TAG\nFROM ${BASE} AS one\nFROM python:${TAG}\nFROM ${OTHER:-alpine:3}\n"),
		map[string]string{"BASE": "python:3.11-slim", "TAG": "3.12", "OTHER": "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	var refs []string
	for _, st := range f.Stages {
		refs = append(refs, st.Ref)
	}
	if want := []string{"python:3.11-slim", "python:3.12", "alpine:3"}; !reflect.DeepEqual(refs, want) {
		t.Errorf("refs %q, want %q", refs, want)
	}
}

func TestReplaceImagesKeepsOtherBytes(t *testing.T) {
	src := "# escape=`\r\n" +
		"FROM --platform=$BUILDPLATFORM  python:3.11-slim   AS build # not a comment\r\n" +
		"RUN <<EOF\r\nFROM python:3.11-slim\r\nEOF\r\n" +
		"FROM `\r\n  # a comment\r\n  ubuntu:22.04`\r\n  AS final\r\n" +
		"FROM build\r\n"
	f := mustParse(t, src)
	if len(f.Stages) != 3 || !f.Stages[0].Replaceable() || !f.Stages[1].Replaceable() {
		t.Fatalf("stages %+v", f.Stages)
	}
	got := string(f.ReplaceImages(map[int]string{0: "proctor/python:3.11-slim", 1: "debian:bookworm-slim"}))
	want := "# escape=`\r\n" +
		"FROM --platform=$BUILDPLATFORM  proctor/python:3.11-slim   AS build # not a comment\r\n" +
		"RUN <<EOF\r\nFROM python:3.11-slim\r\nEOF\r\n" +
		"FROM `\r\n  # a comment\r\n  debian:bookworm-slim`\r\n  AS final\r\n" +
		"FROM build\r\n"
	if got != want {
		t.Errorf("got\n%q\nwant\n%q", got, want)
	}
	if out := f.ReplaceImages(nil); string(out) != src {
		t.Error("no replacement changed the source")
	}
	// An operand split by a continuation cannot be spliced; it is skipped.
	g := mustParse(t, "FROM pyth\\\non:3\n")
	if g.Stages[0].Image != "python:3" || g.Stages[0].Replaceable() {
		t.Errorf("split operand %+v", g.Stages[0])
	}
	if out := g.ReplaceImages(map[int]string{0: "x"}); string(out) != "FROM pyth\\\non:3\n" {
		t.Errorf("split operand rewritten: %q", out)
	}
}

func TestFinalWorkdir(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"FROM debian\nWORKDIR /app\n", "/app"},
		{"FROM debian\nWORKDIR /app\nWORKDIR src/../lib\n", "/app/lib"},
		{"FROM debian\nWORKDIR rel\n", ""},
		{"FROM debian\nWORKDIR $HOME\n", ""},
		{"FROM debian\nWORKDIR \"/quoted dir\"\n", "/quoted dir"},
		{"FROM debian AS base\nWORKDIR /srv\nFROM base\nWORKDIR app\n", "/srv/app"},
		{"FROM debian AS base\nWORKDIR /srv\nFROM python\n", ""},
		{"FROM debian\nWORKDIR \\\n  /cont\n", "/cont"},
		{"# escape=`\nFROM debian\nWORKDIR c:\\x `\n  \\y\n", ""},
		{"FROM debian\nRUN <<EOF\nWORKDIR /nope\nEOF\nWORKDIR /yes\n", "/yes"},
		{"FROM debian\n", ""},
		{"FROM debian\r\nWORKDIR /app \r\n", "/app"},
	} {
		if got := mustParse(t, tc.src).FinalWorkdir(); got != tc.want {
			t.Errorf("FinalWorkdir(%q) = %q, want %q", tc.src, got, tc.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, src := range []string{
		"",
		"# only a comment\n",
		"FROM x\nRUN <<EOF\nnever closed\n",
		"# escape=x\nFROM x\n",
	} {
		if _, err := Parse([]byte(src)); err == nil {
			t.Errorf("Parse(%q): no error", src)
		}
	}
}
