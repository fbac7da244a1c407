package harness

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// HomeStartupFiles are the files and directories under the verifier's HOME
// (relative to it) that are put back as the image had them before the
// verifier starts, when the agent's working tree holds that HOME (a /root
// task; homeSnapshot.reset).
//
// They are what a program the verifier may run reads when it starts and
// that can make it run code or change what it does: shells' start-up
// files (read by a login or interactive bash, by any zsh), git's, pip's,
// npm's, R's, Julia's, cargo's, curl's, wget's, matplotlib's and IPython's
// configuration.
var HomeStartupFiles = []string{
	".profile", ".bash_profile", ".bash_login", ".bashrc", ".bash_logout",
	".zshenv", ".zprofile", ".zshrc", ".zlogin",
	".gitconfig", ".config/git",
	".config/pip", ".pip", ".pydistutils.cfg",
	".npmrc", ".yarnrc", ".Rprofile", ".Renviron", ".julia/config",
	".cargo/config", ".cargo/config.toml", ".curlrc", ".wgetrc",
	".config/matplotlib", ".matplotlib", ".ipython", ".condarc",
}

// homeStash is where the image's start-up files and Python start-up hooks
// are kept, root's only, while the agent runs ("/" stays root's, so the
// agent can neither reach nor pre-create it).
const homeStash = "/.proctor-home"

// homeLinksScript removes a symlink standing for any directory above its
// first argument (relative to the current directory, the verifier's
// HOME), so nothing proctor writes or removes there as root goes through
// a link the agent left; each is printed as "L\0PATH\0".
const homeLinksScript = `unlink_parents() {
  p= rest=$1
  while case $rest in */*) true ;; *) false ;; esac; do
    c=${rest%%/*}; rest=${rest#*/}; p=${p:+$p/}$c
    if [ -L "$p" ]; then printf 'L\0%s\0' "$p"; rm -f -- "$p"; fi
  done
}
`

// homeSitesScript prints the verifier's user site-packages directories
// (.local/lib/python*/site-packages, what Python adds to sys.path at every
// start, running each *.pth file's import lines and usercustomize) as
// "S\0DIR\0" and each entry at their top level as "E\0PATH\0"; with $KEEP
// set it copies each start-up hook (*.pth, usercustomize*,
// sitecustomize*) into the stash.
const homeSitesScript = `for s in .local/lib/python*/site-packages; do
  [ -d "$s" ] && [ ! -L "$s" ] || continue
  printf 'S\0%s\0' "$s"
  for e in "$s"/* "$s"/.[!.]* "$s"/..?*; do
    { [ -e "$e" ] || [ -L "$e" ]; } || continue
    printf 'E\0%s\0' "$e"
    case "${e##*/}" in *.pth|usercustomize*|sitecustomize*) [ -n "$KEEP" ] && { keep "$e" || exit 1; } ;; esac
  done
done
`

// homeSnapshot is what snapshotHome found: the verifier's HOME
// and the top-level entries of each of its user site-packages
// directories, all relative to it.
type homeSnapshot struct {
	home  string
	sites map[string]map[string]bool
}

// snapshotHome runs as root before the agent starts, when the
// agent's working tree (realWorkdir, its symlinks resolved) holds the
// verifier's HOME (home: the task's verifier HOME when it sets one, else
// root's in the image; /root for a /root task): it keeps a root-only copy
// of the image's HomeStartupFiles and Python start-up hooks, and lists the
// user site-packages directories and their entries. It returns nil when
// HOME is outside the tree (the agent cannot write there). Errors are the
// exec's.
func snapshotHome(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, realWorkdir, home string) (*homeSnapshot, error) {
	script := `H=${1:-$HOME}
case "$H" in /*) ;; *) exit 0 ;; esac
H=$(cd "$H" 2>/dev/null && pwd -P) || exit 0
case "$H" in "$2"|"$2"/*) ;; *) exit 0 ;; esac
S=` + homeStash + `
rm -rf "$S" && mkdir -m 700 "$S" "$S/keep" && cd "$H" || exit 1
keep() { mkdir -p -- "$S/keep/$(dirname -- "$1")" && cp -a -- "$1" "$S/keep/$1"; }
printf 'H\0%s\0' "$H"
for f in ` + strings.Join(HomeStartupFiles, " ") + `; do
  if [ -e "$f" ] || [ -L "$f" ]; then keep "$f" || exit 1; fi
done
KEEP=1
` + homeSitesScript
	recs, err := homeExec(ctx, d, h, script, home, realWorkdir)
	if err != nil {
		return nil, fmt.Errorf("keep the verifier's HOME start-up files: %w", err)
	}
	var s *homeSnapshot
	for _, r := range recs {
		switch r[0] {
		case "H":
			s = &homeSnapshot{home: r[1], sites: map[string]map[string]bool{}}
		case "S":
			s.sites[r[1]] = map[string]bool{}
		case "E":
			s.sites[parentOf(r[1])][r[1]] = true
		}
	}
	return s, nil
}

// isHook reports whether a user site-packages entry is one Python runs at
// start: a *.pth file, usercustomize or sitecustomize (module or package).
func isHook(entry string) bool {
	b := entry[strings.LastIndex(entry, "/")+1:]
	return strings.HasSuffix(b, ".pth") || strings.HasPrefix(b, "usercustomize") || strings.HasPrefix(b, "sitecustomize")
}

// reset runs as root after the agent's processes are killed
// and before the verifier (DESIGN §4, "The agent's working directory"):
// in the verifier's HOME it removes every symlink the agent left for a
// directory above a start-up file or the user site-packages, every user
// site-packages directory the image did not have (so Python starts
// without the agent's), every top-level entry the agent added to one the
// image had (a hook, a module shadowing an installed one), and puts each
// of HomeStartupFiles and the image's own Python start-up hooks back as
// the image had them (gone when it had none). It returns what it changed,
// each as "removed PATH", "restored PATH" or "removed the link PATH", and
// removes the stash. A nil snapshot does nothing.
func (s *homeSnapshot) reset(ctx context.Context, d sandbox.Driver, h *sandbox.Handle) ([]string, error) {
	if s == nil {
		return nil, nil
	}
	prelude := `H=$1; shift; S=` + homeStash + `
[ -d "$S/keep" ] || { echo "the stash $S is gone" >&2; exit 1; }
if [ -L "$H" ] || [ ! -d "$H" ]; then printf 'L\0%s\0' "$H"; rm -f -- "$H"; exit 0; fi
cd "$H" || exit 1
` + homeLinksScript
	list := prelude + `unlink_parents .local/lib/x/y
for p in .local/lib/python*; do [ -L "$p" ] && { printf 'L\0%s\0' "$p"; rm -f -- "$p"; }; done
for p in .local/lib/python*/site-packages; do [ -L "$p" ] && { printf 'L\0%s\0' "$p"; rm -f -- "$p"; }; done
` + homeSitesScript
	recs, err := homeExec(ctx, d, h, list, s.home)
	if err != nil {
		return nil, fmt.Errorf("list the verifier's HOME: %w", err)
	}
	var changed []string
	var ops []string
	for _, r := range recs {
		switch r[0] {
		case "L":
			changed = append(changed, "removed the link "+homePath(s.home, r[1]))
		case "S":
			if s.sites[r[1]] == nil {
				ops = append(ops, "D", r[1])
			}
		case "E":
			if site := s.sites[parentOf(r[1])]; site != nil && !site[r[1]] {
				ops = append(ops, "D", r[1])
			}
		}
	}
	for _, f := range HomeStartupFiles {
		ops = append(ops, "R", f)
	}
	for _, entries := range s.sites {
		for e := range entries {
			if isHook(e) {
				ops = append(ops, "R", e)
			}
		}
	}
	act := prelude + `same() {
  if [ -L "$1" ] || [ -L "$2" ]; then [ -L "$1" ] && [ -L "$2" ] && [ "$(readlink -- "$1")" = "$(readlink -- "$2")" ]
  elif [ -f "$1" ] && [ -f "$2" ]; then cmp -s -- "$1" "$2"
  elif [ -d "$1" ] && [ -d "$2" ]; then diff -r -- "$1" "$2" >/dev/null 2>&1
  else ! [ -e "$1" ] && ! [ -e "$2" ]; fi
}
while [ $# -gt 1 ]; do
  op=$1 f=$2; shift 2
  unlink_parents "$f"
  case $op in
  D) printf 'D\0%s\0' "$f"; rm -rf -- "$f" ;;
  R) if same "$f" "$S/keep/$f"; then [ -d "$f" ] && [ ! -L "$f" ] || continue
     elif [ -e "$S/keep/$f" ] || [ -L "$S/keep/$f" ]; then printf 'R\0%s\0' "$f"
     else printf 'D\0%s\0' "$f"; fi
     rm -rf -- "$f"
     if [ -e "$S/keep/$f" ] || [ -L "$S/keep/$f" ]; then
       mkdir -p -- "$(dirname -- "$f")" && cp -a -- "$S/keep/$f" "$f" || exit 1
     fi ;;
  esac
done
rm -rf "$S"
`
	recs, err = homeExec(ctx, d, h, act, append([]string{s.home}, ops...)...)
	if err != nil {
		return nil, fmt.Errorf("reset the verifier's HOME: %w", err)
	}
	for _, r := range recs {
		switch r[0] {
		case "L":
			changed = append(changed, "removed the link "+homePath(s.home, r[1]))
		case "D":
			changed = append(changed, "removed "+homePath(s.home, r[1]))
		case "R":
			changed = append(changed, "restored "+homePath(s.home, r[1]))
		}
	}
	return changed, nil
}

// homePath is rel under home (rel itself when absolute).
func homePath(home, rel string) string {
	if strings.HasPrefix(rel, "/") {
		return rel
	}
	return strings.TrimSuffix(home, "/") + "/" + rel
}

// homeExec runs script as root (sh -c script sh args...) and parses its
// output of "TAG\0VALUE\0" records.
func homeExec(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, script string, args ...string) ([][2]string, error) {
	var out, errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: append([]string{"sh", "-c", script, "sh"}, args...), Stdout: &out, Stderr: &errOut, Timeout: 5 * time.Minute,
	})
	if err != nil || res.ExitCode != 0 {
		return nil, fmt.Errorf("exit %d: %v: %s", res.ExitCode, err, cellfs.Suffix(errOut.String(), 300))
	}
	f := strings.Split(out.String(), "\x00")
	var recs [][2]string
	for i := 0; i+1 < len(f); i += 2 {
		recs = append(recs, [2]string{f[i], f[i+1]})
	}
	return recs, nil
}

// noteHomeReset records what homeSnapshot.reset changed in the cell log
// and as isolation.verifier_home_reset (their count).
func noteHomeReset(dir cellfs.Dir, iso map[string]any, changed []string) {
	if len(changed) == 0 {
		return
	}
	iso["verifier_home_reset"] = len(changed)
	for _, c := range changed {
		dir.Logf("in the verifier's HOME before the verifier: %s", c)
	}
}
