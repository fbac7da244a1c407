package task

import (
	"path"
	"strings"
)

// dockerfileWorkdir returns the working directory the final stage of a
// Dockerfile leaves the image in, when the file alone decides it: the last
// WORKDIR of the final stage (relative ones joined onto the previous), or a
// stage it is built FROM. It returns "" when the final stage sets no WORKDIR
// (the base image's applies, known only after a build) or when a WORKDIR
// uses a variable. Comments, blank lines and `\` line continuations are
// handled; parser directives (`# escape=`) are not.
func dockerfileWorkdir(data []byte) string {
	type stage struct {
		wd    string
		known bool
	}
	stages := map[string]stage{}
	var cur stage
	curName := ""
	for _, line := range dockerfileInstructions(normalizeText(data)) {
		instr, args, _ := strings.Cut(line, " ")
		args = strings.TrimSpace(args)
		switch strings.ToUpper(instr) {
		case "FROM":
			image, name := fromImageAndName(args)
			cur = stages[strings.ToLower(image)] // zero (unknown) for a base image
			curName = strings.ToLower(name)
			if curName != "" {
				stages[curName] = cur
			}
		case "WORKDIR":
			wd := strings.Trim(args, `"'`)
			switch {
			case wd == "" || strings.Contains(wd, "$"):
				cur = stage{}
			case strings.HasPrefix(wd, "/"):
				cur = stage{wd: path.Clean(wd), known: true}
			case cur.known:
				cur = stage{wd: path.Join(cur.wd, wd), known: true}
			default:
				cur = stage{}
			}
			if curName != "" {
				stages[curName] = cur
			}
		}
	}
	if !cur.known {
		return ""
	}
	return cur.wd
}

// fromImageAndName reads `FROM [--flag=...] image [AS name]`.
func fromImageAndName(args string) (image, name string) {
	fields := strings.Fields(args)
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if image == "" {
			if strings.HasPrefix(f, "--") {
				continue
			}
			image = f
			continue
		}
		if strings.EqualFold(f, "AS") && i+1 < len(fields) {
			return image, fields[i+1]
		}
	}
	return image, ""
}

// dockerfileInstructions returns the Dockerfile's instructions, one string
// each, with continuation lines joined and comments dropped.
func dockerfileInstructions(text string) []string {
	var out []string
	var b strings.Builder
	for _, raw := range strings.Split(text, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") {
			continue
		}
		if line == "" && b.Len() == 0 {
			continue
		}
		if strings.HasSuffix(line, `\`) {
			b.WriteString(strings.TrimSuffix(line, `\`))
			b.WriteString(" ")
			continue
		}
		b.WriteString(line)
		if s := strings.TrimSpace(b.String()); s != "" {
			out = append(out, s)
		}
		b.Reset()
	}
	if s := strings.TrimSpace(b.String()); s != "" {
		out = append(out, s)
	}
	return out
}
