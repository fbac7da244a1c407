package isoprobe

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// minSigSize: task files smaller than this are not looked for by contents
// (an empty __init__.py or "1\n" is in every image).
const minSigSize = 16

// defaultMaxEntries bounds the walk of the whole file system.
const defaultMaxEntries = 2_000_000

// taskDirs are where a task's answer or grader is put by Harbor-style
// harnesses (and what an image that bakes them in holds): any readable
// entry in one opens task_files.
var taskDirs = []string{"/tests", "/solution", "/oracle", "/verifier", "/grader", "/logs/verifier"}

// host joins a sandbox path to cfg.Root.
func (c Config) host(p string) string {
	return filepath.Join(c.Root, filepath.FromSlash(path.Clean("/"+p)))
}

// walkFiles walks the file system once, as the agent, for task_files and
// treatment: a readable file with the contents of a task file (an info
// line when the task ships that content as input too); a readable
// SKILL.md outside the allowed skill; a readable entry in a taskDirs
// directory. treatment is n/a when there is no skill to protect and none
// is visible. /proc, /sys and /dev and cfg.Skip are not entered; symlinks
// are not followed. Unreadable directories are what isolation looks like
// and are skipped.
func walkFiles(cfg Config, tf, tr *Finding) int {
	bySize := map[int64][]FileSig{}
	for _, s := range cfg.TaskFiles {
		if s.Size >= minSigSize {
			bySize[s.Size] = append(bySize[s.Size], s)
		}
	}
	skip := map[string]bool{}
	for _, p := range []string{"/proc", "/sys", "/dev"} {
		skip[cfg.host(p)] = true
	}
	for _, p := range cfg.Skip {
		skip[cfg.host(p)] = true
	}
	skill := ""
	if cfg.Skill != "" {
		skill = cfg.host(cfg.Skill)
	}
	forbidden := map[int64][]FileSig{}
	if cfg.Forbid != nil {
		for _, s := range cfg.Forbid.Files {
			if s.Size >= minSigSize {
				forbidden[s.Size] = append(forbidden[s.Size], s)
			}
		}
	}
	max := cfg.MaxEntries
	if max <= 0 {
		max = defaultMaxEntries
	}
	for _, d := range taskDirs {
		if des, err := os.ReadDir(cfg.host(d)); err == nil && len(des) > 0 {
			tf.Status = Open
			tf.add("%s is readable (%d entries)", d, len(des))
		}
	}
	n := 0
	skillSeen := false
	cut := errors.New("walk bound")
	root := filepath.Clean(cfg.Root)
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if de != nil && de.IsDir() && p != root {
				return fs.SkipDir // unreadable: closed to the agent
			}
			return nil
		}
		n++
		if n > max {
			return cut
		}
		if de.IsDir() {
			if skip[p] {
				return fs.SkipDir
			}
			return nil
		}
		if !de.Type().IsRegular() {
			return nil
		}
		rel := "/" + filepath.ToSlash(strings.TrimPrefix(strings.TrimPrefix(p, root), "/"))
		if strings.EqualFold(de.Name(), "SKILL.md") {
			if skill != "" && filepath.Dir(p) == skill {
				skillSeen = readable(p)
			} else if readable(p) {
				tr.Status = Open
				tr.add("skill %s is readable", path.Dir(rel))
			}
		}
		size := sizeOf(de)
		if sigs := forbidden[size]; len(sigs) > 0 {
			if sum, ok := hashFile(p); ok {
				for _, s := range sigs {
					if s.SHA256 == sum {
						tr.Status = Open
						tr.add("%s holds the forbidden skill %s's %s", rel, cfg.Forbid.Name, s.Name)
					}
				}
			}
		}
		if sigs := bySize[size]; len(sigs) > 0 {
			if sum, ok := hashFile(p); ok {
				for _, s := range sigs {
					switch {
					case s.SHA256 != sum:
					case s.Input != "":
						tf.info("%s holds the task's %s, which the task ships as input too (%s): input, not a leak", rel, s.Name, s.Input)
					default:
						tf.Status = Open
						tf.add("%s holds the task's %s", rel, s.Name)
					}
				}
			}
		}
		return nil
	})
	if errors.Is(err, cut) {
		for _, f := range []*Finding{tf, tr} {
			if f.Status != Open {
				f.Status = Untested
				f.add("the walk stopped after %d entries", max)
			}
		}
		return n
	}
	if tf.Status == "" {
		tf.Status = Closed
	}
	if cfg.Skill != "" && !skillSeen && tr.Status != Open {
		tr.Status = Untested
		tr.add("the arm's skill is not visible at %s", cfg.Skill)
	}
	switch {
	case tr.Status != "":
	case cfg.Skill != "":
		tr.Status = Closed
		tr.add("only the arm's skill %s is visible", cfg.Skill)
	case cfg.Forbid != nil:
		tr.Status = Closed
		tr.add("no skill is visible and no file holds the forbidden skill %s's contents", cfg.Forbid.Name)
	case len(cfg.Protect) > 0:
		tr.Status = Closed
		tr.add("no skill is visible (the run's skills: %s)", strings.Join(cfg.Protect, ", "))
	default:
		tr.Status = NA
		tr.add("no skill to protect: the task has none, the run's arms install none, and none is visible")
	}
	return n
}

func sizeOf(de fs.DirEntry) int64 {
	fi, err := de.Info()
	if err != nil {
		return -1
	}
	return fi.Size()
}

func readable(p string) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	f.Close()
	return true
}

func hashFile(p string) (string, bool) {
	f, err := os.Open(p)
	if err != nil {
		return "", false
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", false
	}
	return hex.EncodeToString(h.Sum(nil)), true
}

// operatorNames are the operator's configuration and credentials, relative
// to a home directory: Claude Code's and other agents' settings and
// sessions, cloud and registry credentials, keys.
var operatorNames = []string{
	".claude", ".claude.json", ".config/claude", ".config/anthropic", ".anthropic", ".codex",
	".config/gh", ".config/gcloud", ".aws", ".azure", ".kube/config", ".docker/config.json",
	".netrc", ".git-credentials", ".ssh", ".npmrc", ".pypirc",
}

// operatorConfig looks for the operator's configuration in every home
// directory the agent can name: its own HOME, /root, /home/*, the homes of
// /etc/passwd, and directories named by CLAUDE_CONFIG_DIR,
// XDG_CONFIG_HOME or CODEX_HOME. What a candidate holds decides, not that
// it exists: open when it is a readable file that is not empty, or a
// listable directory holding such a file (or a link) outside its skills/
// (or skill/) directory. A directory of empty directories (the skill
// paths an image makes for every agent) is an info line; a skill under
// skills/ is treatment's (the walk finds its SKILL.md).
func operatorConfig(cfg Config, env map[string]string) Finding {
	f := Finding{Status: Closed}
	homes := agentHomes(cfg, env)
	var cands []string
	for _, h := range homes {
		for _, n := range operatorNames {
			cands = append(cands, path.Join(h, n))
		}
	}
	for _, k := range []string{"CLAUDE_CONFIG_DIR", "XDG_CONFIG_HOME", "CODEX_HOME"} {
		if v := env[k]; strings.HasPrefix(v, "/") {
			cands = append(cands, path.Clean(v))
		}
	}
	seen := map[string]bool{}
	for _, c := range cands {
		if seen[c] {
			continue
		}
		seen[c] = true
		h := holdings(cfg.host(c))
		switch {
		case h.n > 0:
			f.Status = Open
			f.add("%s is readable and holds %s", c, h.describe())
		case h.exists && len(h.skills) > 0:
			f.info("%s holds only files under skills/ (%s): a skill is treatment's class, not the operator's configuration", c, strings.Join(h.skills, ", "))
		case h.exists:
			f.info("%s exists and holds no file: nothing of the operator's", c)
		}
	}
	return f
}

// maxHoldings bounds the walk of one operator directory.
const maxHoldings = 10_000

// held is what an operator candidate holds, as the agent reads it.
type held struct {
	// exists: a readable file or a listable directory.
	exists bool
	// files are the first few readable, non-empty files and links outside
	// skills/ (relative paths; "." for the candidate itself), n their
	// count.
	files []string
	n     int
	// skills are the first few files under a top-level skills/ or skill/.
	skills []string
}

func (h held) describe() string {
	if len(h.files) == 1 && h.files[0] == "." {
		return "a file"
	}
	s := fmt.Sprintf("%d files: %s", h.n, strings.Join(h.files, ", "))
	if h.n > len(h.files) {
		s += ", …"
	}
	return s
}

// holdings walks p (links below it not followed; bounded by maxHoldings
// entries) for operatorConfig.
func holdings(p string) held {
	var h held
	fi, err := os.Stat(p)
	if err != nil {
		return h
	}
	if !fi.IsDir() {
		if readable(p) {
			h.exists = true
			if fi.Size() > 0 || !fi.Mode().IsRegular() {
				h.files, h.n = []string{"."}, 1
			}
		}
		return h
	}
	if _, err := os.ReadDir(p); err != nil {
		return h
	}
	h.exists = true
	n := 0
	_ = filepath.WalkDir(p, func(q string, de fs.DirEntry, err error) error {
		if err != nil {
			if de != nil && de.IsDir() && q != p {
				return fs.SkipDir // unreadable: closed to the agent
			}
			return nil
		}
		if n++; n > maxHoldings {
			return fs.SkipAll
		}
		if de.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(p, q)
		rel = filepath.ToSlash(rel)
		if top, _, _ := strings.Cut(rel, "/"); top == "skills" || top == "skill" {
			if len(h.skills) < 5 {
				h.skills = append(h.skills, rel)
			}
			return nil
		}
		if de.Type().IsRegular() && (sizeOf(de) == 0 || !readable(q)) {
			return nil
		}
		h.n++
		if len(h.files) < 5 {
			h.files = append(h.files, rel)
		}
		return nil
	})
	return h
}

// checkoutWalk walks up from the work tree to the root: a .git, an
// agent's instructions (CLAUDE.md, CLAUDE.local.md: Claude Code reads
// them from every directory above its own), a task definition (task.toml,
// task.md) or a task suite (a directory beside holding one) in any
// directory above it opens the class.
func checkoutWalk(cfg Config) Finding {
	f := Finding{Status: Closed}
	wd := path.Clean("/" + cfg.Workdir)
	for d := path.Dir(wd); ; d = path.Dir(d) {
		for _, n := range []string{".git", "CLAUDE.md", "CLAUDE.local.md", "task.toml", "task.md"} {
			if _, err := os.Lstat(cfg.host(path.Join(d, n))); err == nil {
				f.Status = Open
				f.add("%s is visible above the work tree", path.Join(d, n))
			}
		}
		if des, err := os.ReadDir(cfg.host(d)); err == nil {
			for _, de := range des {
				if !de.IsDir() || isAncestorOrSelf(path.Join(d, de.Name()), wd) {
					continue
				}
				for _, n := range []string{"task.toml", "task.md"} {
					p := path.Join(d, de.Name(), n)
					if _, err := os.Lstat(cfg.host(p)); err == nil {
						f.Status = Open
						f.add("task definition %s is visible above the work tree", p)
					}
				}
			}
		}
		if d == "/" {
			break
		}
	}
	return f
}

// isAncestorOrSelf reports whether dir is wd or a directory above it.
func isAncestorOrSelf(dir, wd string) bool {
	return dir == wd || strings.HasPrefix(wd, strings.TrimSuffix(dir, "/")+"/")
}

// agentHomes are the home directories the agent can name, sorted: its own
// HOME, /root, /home/*, and the homes of /etc/passwd.
func agentHomes(cfg Config, env map[string]string) []string {
	homes := map[string]bool{"/root": true}
	for _, h := range []string{cfg.Home, env["HOME"]} {
		if h != "" {
			homes[h] = true
		}
	}
	if des, err := os.ReadDir(cfg.host("/home")); err == nil {
		for _, de := range des {
			homes["/home/"+de.Name()] = true
		}
	}
	if pw, err := os.Open(cfg.host("/etc/passwd")); err == nil {
		sc := bufio.NewScanner(pw)
		for sc.Scan() {
			if fs := strings.Split(sc.Text(), ":"); len(fs) >= 6 && strings.HasPrefix(fs[5], "/") && fs[5] != "/" {
				homes[fs[5]] = true
			}
		}
		pw.Close()
	}
	return sorted(homes)
}
