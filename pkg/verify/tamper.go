package verify

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/proctor-eval/proctor/pkg/cellfs"
	"github.com/proctor-eval/proctor/pkg/events"
	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// A solve can plant a file the verifier then runs instead of the code it
// means to run: /app/unittest.py that prints "OK" when the test script
// does `cd /app && python3 -m unittest`, a conftest.py, a sitecustomize.py
// or a .pth file, node_modules/.bin/jest, a python3 in a PATH directory of
// the work tree, or a root agent's python3 in /usr/local/bin. ShadowSnapshot lists, before the solve, the files of the
// work tree and of the verifier's import path whose names could do that,
// with a hash of each; after the solve the same listing says which of them
// the solve created or changed (Findings). Only candidate names are
// listed and hashed, so the scan stays cheap. A solve that may run as
// root can change what the verifier runs under any name (the python3.11
// python3 links to, unittest/main.py, a library): for it the system's
// directories are listed too, without hashes (systemScript).

// pythonModules are the module names a file on the verifier's import path
// must not shadow: Python 3.11's sys.stdlib_module_names and the modules of
// the common test runners (pytest and its plugin manager, nose).
var pythonModules = strings.Fields(`__future__ _abc _aix_support _ast _asyncio _bisect _blake2 _bootsubprocess _bz2 _codecs _codecs_cn _codecs_hk
_codecs_iso2022 _codecs_jp _codecs_kr _codecs_tw _collections _collections_abc _compat_pickle _compression
_contextvars _crypt _csv _ctypes _curses _curses_panel _datetime _dbm _decimal _elementtree _frozen_importlib
_frozen_importlib_external _functools _gdbm _hashlib _heapq _imp _io _json _locale _lsprof _lzma _markupbase _md5 _msi
_multibytecodec _multiprocessing _opcode _operator _osx_support _overlapped _pickle _posixshmem _posixsubprocess
_py_abc _pydecimal _pyio _queue _random _scproxy _sha1 _sha256 _sha3 _sha512 _signal _sitebuiltins _socket _sqlite3
_sre _ssl _stat _statistics _string _strptime _struct _symtable _thread _threading_local _tkinter _tokenize
_tracemalloc _typing _uuid _warnings _weakref _weakrefset _winapi _zoneinfo abc aifc antigravity argparse array ast
asynchat asyncio asyncore atexit audioop base64 bdb binascii bisect builtins bz2 cProfile calendar cgi cgitb chunk
cmath cmd code codecs codeop collections colorsys compileall concurrent configparser contextlib contextvars copy
copyreg crypt csv ctypes curses dataclasses datetime dbm decimal difflib dis distutils doctest email encodings
ensurepip enum errno faulthandler fcntl filecmp fileinput fnmatch fractions ftplib functools gc genericpath getopt
getpass gettext glob graphlib grp gzip hashlib heapq hmac html http idlelib imaplib imghdr imp importlib inspect io
ipaddress itertools json keyword lib2to3 linecache locale logging lzma mailbox mailcap marshal math mimetypes mmap
modulefinder msilib msvcrt multiprocessing netrc nis nntplib nt ntpath nturl2path numbers opcode operator optparse os
ossaudiodev pathlib pdb pickle pickletools pipes pkgutil platform plistlib poplib posix posixpath pprint profile
pstats pty pwd py_compile pyclbr pydoc pydoc_data pyexpat queue quopri random re readline reprlib resource rlcompleter
runpy sched secrets select selectors shelve shlex shutil signal site smtpd smtplib sndhdr socket socketserver spwd
sqlite3 sre_compile sre_constants sre_parse ssl stat statistics string stringprep struct subprocess sunau symtable sys
sysconfig syslog tabnanny tarfile telnetlib tempfile termios textwrap this threading time timeit tkinter token
tokenize tomllib trace traceback tracemalloc tty turtle turtledemo types typing unicodedata unittest urllib uu uuid
venv warnings wave weakref webbrowser winreg winsound wsgiref xdrlib xml xmlrpc zipapp zipfile zipimport zlib zoneinfo
pytest _pytest pluggy py nose nose2`)

// runnerCommands are the commands a test script runs its tests with: a
// file of one of these names in a PATH directory of the work tree, or in a
// node_modules/.bin of it, stands in for the runner.
var runnerCommands = strings.Fields(`python python3 pytest py.test pip pip3 uv uvx bash sh env
node npm npx yarn pnpm jest mocha vitest ava tap jasmine karma playwright cypress tsc ts-node tsx bun deno
go cargo rustc java javac mvn gradle ruby rspec rake bundle php phpunit perl prove Rscript julia make cmake ctest dotnet
timeout diff cmp grep cat test`)

// shadowScript lists the candidates as "F\0PATH\0KIND\0SHADOWS\0"
// records (KIND: file:HASH, link:TARGET, dir or other), run as root with
// the verifier's environment: $1 the work tree, $2 the module names, $3
// the runner commands.
//
//   - anywhere in the work tree: conftest.py, sitecustomize.* and
//     usercustomize.*, *.pth, unittest.py, pytest.py, the unittest, pytest
//     and _pytest packages, and the runner commands in a node_modules/.bin;
//   - at the top of the work tree, of each PYTHONPATH entry and of each
//     site-packages or dist-packages directory of the work tree: a module
//     (NAME.py, NAME.pyc, NAME*.so, NAME/__init__.py) named like a standard
//     module or a runner's;
//   - in each PATH directory inside the work tree: a runner command, or a
//     command that a later PATH directory also has;
//   - in the system's Python directories (/usr/lib/python3*, their and
//     /usr/local/lib/python3*'s site-packages and dist-packages):
//     sitecustomize.*, usercustomize.* and *.pth, a root agent's start-up
//     hooks;
//   - in each PATH directory outside it: a runner command, so a root agent
//     (--agent-user task) that plants or replaces the verifier's python3,
//     bash or pytest there is seen (a sealed agent cannot write there).
const shadowScript = `W=$(cd "$1" 2>/dev/null && pwd -P) || exit 0
MODS=" $2 " CMDS=" $3 "
if command -v sha256sum >/dev/null 2>&1; then digest() { sha256sum < "$1" | cut -d' ' -f1; }
elif command -v md5sum >/dev/null 2>&1; then digest() { md5sum < "$1" | cut -d' ' -f1; }
else digest() { cksum < "$1" | tr ' ' ':'; }; fi
rec() {
  if [ -L "$1" ]; then k="link:$(readlink -- "$1")"
  elif [ -f "$1" ]; then k="file:$(digest "$1")" || k=unreadable
  elif [ -d "$1" ]; then k=dir
  elif [ -e "$1" ]; then k=other
  else return 0; fi
  printf 'F\0%s\0%s\0%s\0' "$1" "$k" "$2"
}
anywhere() {
  for p; do
    b=${p##*/}
    case $p in
    */node_modules/.bin/*)
      case ${p%/*} in */node_modules/.bin) ;; *) continue ;; esac
      case $CMDS in *" $b "*) rec "$p" "runner $b" ;; esac ;;
    */__init__.py) d=${p%/__init__.py}; rec "$p" "python package ${d##*/}" ;;
    *) case $b in
       conftest.py) rec "$p" "pytest conftest" ;;
       sitecustomize.*|usercustomize.*) rec "$p" "python start-up hook ${b%%.*}" ;;
       *.pth) rec "$p" "python path hook" ;;
       *) rec "$p" "python module ${b%.py}" ;;
       esac ;;
    esac
  done
}
modules() {
  for e in "$1"/* "$1"/.[!.]*; do
    { [ -e "$e" ] || [ -L "$e" ]; } || continue
    n=${e##*/} m=${n%%.*}
    case $MODS in *" $m "*) ;; *) continue ;; esac
    if [ -d "$e" ] && [ ! -L "$e" ]; then
      for i in "$e/__init__.py" "$e/__init__.pyc"; do
        { [ -e "$i" ] || [ -L "$i" ]; } && rec "$i" "python package $m"
      done
      continue
    fi
    case $n in "$m".py|"$m".pyc|"$m".so|"$m".*.so|"$m".*.pyc) rec "$e" "python module $m" ;; esac
  done
}
FN=$(cat <<'EOF'
` + "$FUNCS" + `
EOF
)
export MODS CMDS
find "$W" -xdev \( -name conftest.py -o -name 'sitecustomize.*' -o -name 'usercustomize.*' -o -name '*.pth' \
  -o -name unittest.py -o -name pytest.py -o -path '*/unittest/__init__.py' -o -path '*/pytest/__init__.py' \
  -o -path '*/_pytest/__init__.py' -o -path '*/node_modules/.bin/*' \) -exec sh -c "$FN"'
anywhere "$@"' sh {} + || exit 1
modules "$W"
IFS=:
for d in $PYTHONPATH; do [ -d "$d" ] && modules "$d"; done
unset IFS
find "$W" -xdev -type d \( -name site-packages -o -name dist-packages \) -exec sh -c "$FN"'
for s; do modules "$s"; done' sh {} + || exit 1
for s in /usr/lib/python3* /usr/lib/python3*/site-packages /usr/lib/python3*/dist-packages \
  /usr/local/lib/python3*/site-packages /usr/local/lib/python3*/dist-packages; do
  [ -d "$s" ] || continue
  for e in "$s"/sitecustomize.* "$s"/usercustomize.* "$s"/*.pth; do
    { [ -e "$e" ] || [ -L "$e" ]; } || continue
    b=${e##*/}
    case $b in *.pth) rec "$e" "python path hook" ;; *) rec "$e" "python start-up hook ${b%%.*}" ;; esac
  done
done
IFS=:
for d in $PATH; do
  [ -d "$d" ] || continue
  inside=
  case $d in "$W"|"$W"/*) inside=1 ;; esac
  if [ -z "$inside" ]; then
    IFS=' '
    for n in $3; do
      { [ -e "$d/$n" ] || [ -L "$d/$n" ]; } && rec "$d/$n" "runner $n on PATH"
    done
    IFS=:
    continue
  fi
  for e in "$d"/*; do
    { [ -e "$e" ] || [ -L "$e" ]; } || continue
    n=${e##*/}
    hit=
    case $CMDS in *" $n "*) hit="runner $n on PATH" ;; esac
    if [ -z "$hit" ]; then
      for o in $PATH; do
        [ "$o" != "$d" ] && [ -x "$o/$n" ] && { hit="command $n on PATH (also $o/$n)"; break; }
      done
    fi
    [ -n "$hit" ] && rec "$e" "$hit"
  done
done
`

// systemScript is run before shadowScript when the solve may run as root
// (--agent-user task): it lists, as "S\0PATH\0META\0CLASS\0" records
// (META: find's type, inode, size, mtime and ctime; CLASS: path, python,
// lib or loader), every entry of the verifier's PATH directories outside
// the work tree (and, as "L" records, what each link there resolves to),
// every entry of the system's Python directories, every shared object in
// the library directories and the loader's configuration. An image whose
// find cannot print (busybox) gets one "E" record saying so.
//
// Nothing is hashed: the listing is compared, and ctime is set by the
// kernel to the time of every change (a write, a rename, a touch -d that
// sets mtime back), so a process cannot set it back without setting the
// clock, which needs CAP_SYS_TIME (not in the sandbox's capabilities).
const systemScript = `
W=$(cd "$1" 2>/dev/null && pwd -P) || W=/nonexistent/work-tree
find / -maxdepth 0 -printf '' 2>/dev/null || { printf 'E\0%s\0\0\0' "find cannot -printf (no GNU findutils)"; exit 0; }
SEEN=" "
uniq_dirs() {
  for d; do
    case $d in /*) ;; *) continue ;; esac
    r=$(cd "$d" 2>/dev/null && pwd -P) || continue
    case $r in "$W"|"$W"/*) continue ;; esac
    case $SEEN in *" $r "*) continue ;; esac
    SEEN="$SEEN$r "
    printf '%s\n' "$r"
  done
}
list() {
  c=$1; shift
  find -H "$@" -xdev -printf "S\0%p\0%y %i %s %T@ %C@\0$c\0"
}
IFS=:
set -- $PATH
unset IFS
P=$(uniq_dirs "$@")
IFS='
'
set -- $P
unset IFS
if [ $# -gt 0 ]; then
  find -H "$@" -maxdepth 1 -mindepth 1 -printf 'S\0%p\0%y %i %s %T@ %C@\0path\0'
  find -L "$@" -maxdepth 1 -mindepth 1 -xtype l ! -type d -printf 'L\0%p\0%y %i %s %T@ %C@\0path\0' 2>/dev/null
fi
P=$(uniq_dirs /lib /lib32 /lib64 /libx32 /usr/lib /usr/lib32 /usr/lib64 /usr/libx32 /usr/local/lib /usr/local/lib64)
IFS='
'
set -- $P
unset IFS
[ $# -gt 0 ] && find -H "$@" -xdev \( -path '*/python3*' -o -path '/usr/local/lib/proctor-*' \) -prune -o \
  \( -name '*.so' -o -name '*.so.*' \) ! -type d -printf 'S\0%p\0%y %i %s %T@ %C@\0lib\0'
P=$(uniq_dirs /usr/lib/python3* /usr/local/lib/python3* /etc/python3*)
IFS='
'
set -- $P
unset IFS
[ $# -gt 0 ] && list python "$@"
set -- /etc/ld.so.*
[ -e "$1" ] && find -H "$@" -maxdepth 1 -printf 'S\0%p\0%y %i %s %T@ %C@\0loader\0'
exit 0
`

// shadowFuncs are the functions of shadowScript its find -exec shells
// need (they start without them).
var shadowFuncs = func() string {
	s := shadowScript
	start := strings.Index(s, "if command -v sha256sum")
	end := strings.Index(s, "FN=$(cat")
	return s[start:end]
}()

// ShadowSnapshot is the candidate listing of one sandbox at one time:
// path -> kind (file:HASH, link:TARGET, dir, other) and what it shadows;
// with System, also the listing of the system's directories a root solve
// can change (systemScript): "S"/"L" and path -> META and CLASS.
type ShadowSnapshot struct {
	workTree string
	env      map[string]string
	system   bool
	entries  map[string][2]string
	sys      map[sysKey][2]string
	// SystemUnavailable says why the system's directories could not be
	// listed ("" when they were, or were not asked for).
	SystemUnavailable string
	// RemovedCaches are the bytecode caches (__pycache__/*.pyc) the solve
	// wrote in the system's Python directories, which Findings removed
	// rather than reported.
	RemovedCaches []string
}

// sysKey is a record of systemScript: its kind ("S" the entry itself,
// "L" what a link on PATH resolves to) and path.
type sysKey struct{ kind, path string }

// SnapshotShadows lists the candidates of workTree (the solve's working
// directory) and of the verifier's import path in h, as root with env (the
// verifier's literal env, so PATH and PYTHONPATH are the verifier's). With
// system (a solve that may run as root, --agent-user task) it also lists
// the verifier's PATH directories, the system's Python directories, the
// shared libraries and the loader's configuration (systemScript), so
// Findings names every file there the solve created or changed; a sealed
// solve cannot write there and pays for none of it. Errors are the exec's
// (a sandbox without sh or find cannot be scanned).
func SnapshotShadows(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workTree string, env map[string]string, system bool) (*ShadowSnapshot, error) {
	s := &ShadowSnapshot{workTree: workTree, env: maps.Clone(env), system: system}
	var err error
	s.entries, s.sys, s.SystemUnavailable, err = scanShadows(ctx, d, h, workTree, env, system)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// scanTimeout bounds one scan.
const scanTimeout = 2 * time.Minute

func scanShadows(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workTree string, env map[string]string, system bool) (map[string][2]string, map[sysKey][2]string, string, error) {
	if workTree == "" {
		workTree = "/"
	}
	script := strings.Replace(shadowScript, "$FUNCS", shadowFuncs, 1)
	if system {
		// In a subshell of its own, before the work tree's listing, which
		// ends at once when there is no work tree.
		script = "(\n" + systemScript + ")\n" + script
	}
	var out, errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", script, "sh", workTree, strings.Join(pythonModules, " "), strings.Join(runnerCommands, " ")},
		Env: env, Stdout: &out, Stderr: &errOut, Timeout: scanTimeout,
	})
	if err != nil {
		return nil, nil, "", fmt.Errorf("scan %s for shadowing files: %w", workTree, err)
	}
	if res.ExitCode != 0 {
		return nil, nil, "", fmt.Errorf("scan %s for shadowing files: exit %d: %s", workTree, res.ExitCode, strings.TrimSpace(cellfs.Suffix(errOut.String(), 300)))
	}
	f := strings.Split(out.String(), "\x00")
	entries := map[string][2]string{}
	var sys map[sysKey][2]string
	if system {
		sys = map[sysKey][2]string{}
	}
	why := ""
	for i := 0; i+3 < len(f); i += 4 {
		switch f[i] {
		case "F":
			entries[f[i+1]] = [2]string{f[i+2], f[i+3]}
		case "S", "L":
			sys[sysKey{f[i], f[i+1]}] = [2]string{f[i+2], f[i+3]}
		case "E":
			why = f[i+1]
		}
	}
	if why != "" {
		sys = nil
	}
	return entries, sys, why, nil
}

// maxSystemFindings bounds the findings of the system's directories one
// cell records (an apt-get upgrade changes thousands of libraries); past
// it one finding counts the rest.
const maxSystemFindings = 100

// Findings scans h again and returns, sorted by path, every candidate the
// solve created (absent from the snapshot) or changed (another kind or
// hash). With the system's directories listed, every entry there the
// solve created or changed (another type, inode, size, mtime or ctime) is
// one too: a directory it created once, counting its files; a link on
// PATH whose target changed, naming the target. The bytecode caches it
// wrote in the system's Python directories (a __pycache__/*.pyc the image
// lacked; Python writes them when it runs as root) are removed instead
// (RemovedCaches): the verifier's Python compiles its own. A file the
// solve removed is not a finding. A nil snapshot finds nothing.
func (s *ShadowSnapshot) Findings(ctx context.Context, d sandbox.Driver, h *sandbox.Handle) ([]events.TamperFinding, error) {
	if s == nil {
		return nil, nil
	}
	now, nowSys, _, err := scanShadows(ctx, d, h, s.workTree, s.env, s.system)
	if err != nil {
		return nil, err
	}
	var out []events.TamperFinding
	named := map[string]bool{}
	for _, p := range slices.Sorted(maps.Keys(now)) {
		e := now[p]
		before, had := s.entries[p]
		switch {
		case !had:
			out = append(out, events.TamperFinding{Path: p, Change: "created", Shadows: e[1]})
		case before[0] != e[0]:
			out = append(out, events.TamperFinding{Path: p, Change: "changed", Shadows: e[1]})
		default:
			continue
		}
		named[p] = true
	}
	if s.sys != nil && nowSys != nil {
		sys, caches, err := s.systemFindings(ctx, d, h, nowSys, named)
		if err != nil {
			return nil, err
		}
		if len(caches) > 0 {
			if err := removeCaches(ctx, d, h, caches); err != nil {
				return nil, err
			}
			s.RemovedCaches = caches
		}
		out = append(out, sys...)
		slices.SortStableFunc(out, func(a, b events.TamperFinding) int { return strings.Compare(a.Path, b.Path) })
	}
	return out, nil
}

// systemFindings compares the system listing now with the snapshot's:
// the findings (at most maxSystemFindings and one counting the rest) and
// the bytecode caches to remove. Paths in named are findings already.
func (s *ShadowSnapshot) systemFindings(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, now map[sysKey][2]string, named map[string]bool) ([]events.TamperFinding, []string, error) {
	typ := func(meta string) string { t, _, _ := strings.Cut(meta, " "); return t }
	// Directories the solve created: the files in them are counted under
	// the outermost one.
	newDir := map[string]bool{}
	for k, e := range now {
		if _, had := s.sys[k]; !had && k.kind == "S" && typ(e[0]) == "d" {
			newDir[k.path] = true
		}
	}
	top := func(p string) string {
		t := ""
		for d := path.Dir(p); d != "/" && d != "."; d = path.Dir(d) {
			if newDir[d] {
				t = d
			}
		}
		return t
	}
	var found []events.TamperFinding
	var caches, relinked []string
	inDir := map[string]int{}
	for _, k := range slices.SortedFunc(maps.Keys(now), func(a, b sysKey) int {
		return cmp.Or(strings.Compare(a.path, b.path), strings.Compare(a.kind, b.kind))
	}) {
		e := now[k]
		before, had := s.sys[k]
		if had && before[0] == e[0] {
			continue
		}
		t := typ(e[0])
		if t == "d" && (had || k.kind == "L") {
			continue // a directory's times change with its entries
		}
		if named[k.path] {
			continue
		}
		if k.kind == "L" {
			if _, self := s.sys[sysKey{"S", k.path}]; self && now[sysKey{"S", k.path}] == s.sys[sysKey{"S", k.path}] {
				relinked = append(relinked, k.path) // the link is the image's, its target changed
			}
			continue
		}
		if !had && t == "f" && strings.HasSuffix(k.path, ".pyc") && path.Base(path.Dir(k.path)) == "__pycache__" && e[1] == "python" {
			caches = append(caches, k.path)
			continue
		}
		if t == "d" {
			continue // counted by its files
		}
		if d := top(k.path); d != "" {
			inDir[d]++
			continue
		}
		change := "changed"
		if !had {
			change = "created"
		}
		named[k.path] = true
		found = append(found, events.TamperFinding{Path: k.path, Change: change, Shadows: systemShadows(k.path, e[1], "")})
	}
	for d, n := range inDir {
		found = append(found, events.TamperFinding{Path: d, Change: "created",
			Shadows: fmt.Sprintf("directory of %d files in %s", n, systemPlace(now[sysKey{"S", d}][1]))})
	}
	if len(relinked) > 0 {
		targets, err := resolveLinks(ctx, d, h, relinked)
		if err != nil {
			return nil, nil, err
		}
		for i, p := range relinked {
			found = append(found, events.TamperFinding{Path: p, Change: "changed", Shadows: systemShadows(p, "path", targets[i])})
		}
	}
	slices.SortFunc(found, func(a, b events.TamperFinding) int { return strings.Compare(a.Path, b.Path) })
	if len(found) > maxSystemFindings {
		rest := len(found) - maxSystemFindings
		found = append(found[:maxSystemFindings], events.TamperFinding{Path: found[maxSystemFindings].Path, Change: "changed",
			Shadows: fmt.Sprintf("and %d more files created or changed in the system's directories, from this path on", rest)})
	}
	return found, caches, nil
}

// systemPlace names the directories of a systemScript class.
func systemPlace(class string) string {
	switch class {
	case "path":
		return "a directory of the verifier's PATH"
	case "python":
		return "the system's Python"
	case "lib":
		return "the system's libraries"
	case "loader":
		return "the dynamic loader's configuration"
	}
	return "the system"
}

// systemShadows says what an entry of the system listing stands in for;
// target is where a link on PATH whose target changed resolves to.
func systemShadows(p, class, target string) string {
	switch class {
	case "path":
		if target != "" {
			return fmt.Sprintf("command %s on PATH (its target %s changed)", path.Base(p), target)
		}
		return fmt.Sprintf("command %s on PATH", path.Base(p))
	case "python":
		return "file of the system's Python"
	case "lib":
		return "shared library"
	case "loader":
		return "dynamic loader configuration"
	}
	return "system file"
}

// resolveLinks is where each of paths resolves to (readlink -f), in order.
func resolveLinks(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, paths []string) ([]string, error) {
	var out, errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd:    append([]string{"sh", "-c", `for p; do printf '%s\0' "$(readlink -f -- "$p" || echo "$p")"; done`, "sh"}, paths...),
		Stdout: &out, Stderr: &errOut, Timeout: scanTimeout,
	})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(cellfs.Suffix(errOut.String(), 300)))
	}
	if err != nil {
		return nil, fmt.Errorf("resolve the changed links on PATH: %w", err)
	}
	t := strings.Split(out.String(), "\x00")
	if len(t) < len(paths) {
		return nil, fmt.Errorf("resolve the changed links on PATH: %d answers for %d links", len(t), len(paths))
	}
	return t[:len(paths)], nil
}

// removeCaches removes the regular files of paths (bytecode caches the
// solve wrote in the system's Python directories).
func removeCaches(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, paths []string) error {
	var errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd:    append([]string{"sh", "-c", `for p; do if [ -f "$p" ] && [ ! -L "$p" ]; then rm -f -- "$p" || exit 1; fi; done`, "sh"}, paths...),
		Stderr: &errOut, Timeout: scanTimeout,
	})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, strings.TrimSpace(cellfs.Suffix(errOut.String(), 300)))
	}
	if err != nil {
		return fmt.Errorf("remove the bytecode caches the solve wrote in the system's Python: %w", err)
	}
	return nil
}
