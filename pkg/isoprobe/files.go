package isoprobe

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
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
// treatment: a readable file with the contents of a task file; a readable
// SKILL.md outside the allowed skill; a readable entry in a taskDirs
// directory. /proc, /sys and /dev and cfg.Skip are not entered; symlinks
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
		if sigs := bySize[sizeOf(de)]; len(sigs) > 0 {
			if sum, ok := hashFile(p); ok {
				for _, s := range sigs {
					if s.SHA256 == sum {
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
	if tr.Status == "" {
		tr.Status = Closed
		if cfg.Skill != "" {
			tr.add("only the arm's skill %s is visible", cfg.Skill)
		}
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
// XDG_CONFIG_HOME or CODEX_HOME. Open when one is readable (a directory:
// listable and not empty).
func operatorConfig(cfg Config, env map[string]string) Finding {
	f := Finding{Status: Closed}
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
	var cands []string
	for _, h := range sorted(homes) {
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
		if what, ok := visible(cfg.host(c)); ok {
			f.Status = Open
			f.add("%s is readable (%s)", c, what)
		}
	}
	return f
}

// visible reports whether p is a readable file or a listable, non-empty
// directory.
func visible(p string) (string, bool) {
	fi, err := os.Stat(p)
	if err != nil {
		return "", false
	}
	if fi.IsDir() {
		des, err := os.ReadDir(p)
		if err != nil || len(des) == 0 {
			return "", false
		}
		return "a directory", true
	}
	if readable(p) {
		return "a file", true
	}
	return "", false
}

// checkoutWalk walks up from the work tree to the root: a .git, a task
// definition (task.toml, task.md) or a task suite (a directory beside
// holding one) in any directory above it opens the class.
func checkoutWalk(cfg Config) Finding {
	f := Finding{Status: Closed}
	wd := path.Clean("/" + cfg.Workdir)
	for d := path.Dir(wd); ; d = path.Dir(d) {
		for _, n := range []string{".git", "task.toml", "task.md"} {
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
