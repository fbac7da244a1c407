package verify

import (
	"bytes"
	"context"
	"fmt"
	"maps"
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
// listed and hashed, so the scan stays cheap.

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

// shadowFuncs are the functions of shadowScript its find -exec shells
// need (they start without them).
var shadowFuncs = func() string {
	s := shadowScript
	start := strings.Index(s, "if command -v sha256sum")
	end := strings.Index(s, "FN=$(cat")
	return s[start:end]
}()

// ShadowSnapshot is the candidate listing of one sandbox at one time:
// path -> kind (file:HASH, link:TARGET, dir, other) and what it shadows.
type ShadowSnapshot struct {
	workTree string
	env      map[string]string
	entries  map[string][2]string
}

// SnapshotShadows lists the candidates of workTree (the solve's working
// directory) and of the verifier's import path in h, as root with env (the
// verifier's literal env, so PATH and PYTHONPATH are the verifier's).
// Errors are the exec's (a sandbox without sh or find cannot be scanned).
func SnapshotShadows(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workTree string, env map[string]string) (*ShadowSnapshot, error) {
	s := &ShadowSnapshot{workTree: workTree, env: maps.Clone(env)}
	var err error
	s.entries, err = scanShadows(ctx, d, h, workTree, env)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// scanTimeout bounds one scan.
const scanTimeout = 2 * time.Minute

func scanShadows(ctx context.Context, d sandbox.Driver, h *sandbox.Handle, workTree string, env map[string]string) (map[string][2]string, error) {
	if workTree == "" {
		workTree = "/"
	}
	script := strings.Replace(shadowScript, "$FUNCS", shadowFuncs, 1)
	var out, errOut bytes.Buffer
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd: []string{"sh", "-c", script, "sh", workTree, strings.Join(pythonModules, " "), strings.Join(runnerCommands, " ")},
		Env: env, Stdout: &out, Stderr: &errOut, Timeout: scanTimeout,
	})
	if err != nil {
		return nil, fmt.Errorf("scan %s for shadowing files: %w", workTree, err)
	}
	if res.ExitCode != 0 {
		return nil, fmt.Errorf("scan %s for shadowing files: exit %d: %s", workTree, res.ExitCode, strings.TrimSpace(cellfs.Suffix(errOut.String(), 300)))
	}
	f := strings.Split(out.String(), "\x00")
	entries := map[string][2]string{}
	for i := 0; i+3 < len(f); i += 4 {
		if f[i] == "F" {
			entries[f[i+1]] = [2]string{f[i+2], f[i+3]}
		}
	}
	return entries, nil
}

// Findings scans h again and returns, sorted by path, every candidate the
// solve created (absent from the snapshot) or changed (another kind or
// hash). A file the solve removed is not a finding. A nil snapshot finds
// nothing.
func (s *ShadowSnapshot) Findings(ctx context.Context, d sandbox.Driver, h *sandbox.Handle) ([]events.TamperFinding, error) {
	if s == nil {
		return nil, nil
	}
	now, err := scanShadows(ctx, d, h, s.workTree, s.env)
	if err != nil {
		return nil, err
	}
	var out []events.TamperFinding
	for _, p := range slices.Sorted(maps.Keys(now)) {
		e := now[p]
		before, had := s.entries[p]
		switch {
		case !had:
			out = append(out, events.TamperFinding{Path: p, Change: "created", Shadows: e[1]})
		case before[0] != e[0]:
			out = append(out, events.TamperFinding{Path: p, Change: "changed", Shadows: e[1]})
		}
	}
	return out, nil
}
