#!/usr/bin/env bash
# Prepares a machine to build and test proctor: a Docker engine that answers,
# and the base images the tasks and tests use (debian:bookworm-slim,
# python:3.11-slim). With --node it also installs the Node.js readers that
# dataset tests use into .cache/node, and curl and jq (the gateway's tests
# copy node, curl and jq into a task image for their Node and bash agents). With --browser it installs Debian's
# chromium, which the viewer's tests drive headless (the viewer itself
# needs nothing but the proctor binary). With --claude it installs the
# pinned Claude Code CLI (@anthropic-ai/claude-code@2.1.332, a glibc
# linux-x64 ELF from its optional package) into .cache/claude, which the
# docker-claude arms add to task images and their tests run. With --codex
# it installs the pinned OpenAI Codex CLI (@openai/codex@0.171.0, a static
# musl linux-x64 ELF from its optional package) into .cache/codex, which
# the docker-codex arms add to task images. With --compose
# it installs Debian's docker-compose (1.29), which deploy/cluster-test.sh
# drives.
#
# Idempotent: every step first checks whether the machine already has what it
# makes, so a second run takes about a second. Works as root on a fresh
# Debian 12 machine with only the docker client (it installs docker.io and
# debootstrap, starts dockerd, and builds the images from the Debian mirror
# when Docker Hub cannot be reached), and on a laptop whose Docker already
# runs and pulls.
#
# Usage: scripts/setup.sh [--node] [--browser] [--claude] [--codex] [--compose]
#
# Environment:
#   DOCKERD_LOG        where a dockerd started here logs (default /var/log/dockerd.log)
#   DOCKERD_FLAGS      extra flags for a dockerd started here (default none)
#   DOCKERD_WAIT_SEC   how long to wait for that dockerd to answer (default 60)
#   PULL_TIMEOUT_SEC   how long one `docker pull` may take before building locally (default 20)
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

want_node=0
want_browser=0
want_claude=0
want_codex=0
want_compose=0
for arg in "$@"; do
  case "$arg" in
    --node) want_node=1 ;;
    --browser) want_browser=1 ;;
    --claude) want_claude=1 ;;
    --codex) want_codex=1 ;;
    --compose) want_compose=1 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "setup: unknown argument: $arg (usage: scripts/setup.sh [--node] [--browser] [--claude] [--codex] [--compose])" >&2; exit 2 ;;
  esac
done

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 1; }

# work is a scratch directory for rootfs trees and build logs, never inside
# the repository; it is removed on exit.
work=""
cleanup() { if [[ -n "$work" ]]; then rm -rf "$work"; fi; }
trap cleanup EXIT
workdir() {
  if [[ -z "$work" ]]; then work=$(mktemp -d "${TMPDIR:-/tmp}/proctor-setup.XXXXXX"); fi
}

need_root() {
  [[ $(id -u) -eq 0 ]] || die "$1 needs root; run this script as root (or do it by hand)"
}

# /dev/null must be the null device: a tool that renamed a file over it as
# root leaves a regular file that every process then reads and writes
# (the tests that close stdin read it). Put the device back when root.
if [[ ! -c /dev/null ]]; then
  need_root "restoring /dev/null (it is not a character device)"
  rm -f /dev/null && mknod -m 666 /dev/null c 1 3
  say "/dev/null: restored as the null device"
fi

apt_updated=0
apt_install() {
  need_root "installing $*"
  if [[ $apt_updated -eq 0 ]]; then
    apt-get update -qq >/dev/null
    apt_updated=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# apt_mirror prints the first URI apt uses for the main Debian archive (or,
# with "security", the security archive), from sources.list and deb822
# .sources files alike.
apt_mirror() {
  local kind=${1:-main} uris
  uris=$( {
    cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^[[:space:]]*URIs:/ { print $2 }'
    cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
      awk '/^[[:space:]]*deb[[:space:]]/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z+]+:\/\//) { print $i; break } }'
  } || true)
  if [[ $kind == security ]]; then
    grep -m1 -E '/debian-security/?$' <<<"$uris" || echo "http://deb.debian.org/debian-security"
  else
    grep -m1 -E '/debian/?$' <<<"$uris" || echo "http://deb.debian.org/debian"
  fi
}

engine_answers() { docker info >/dev/null 2>&1; }

# clear_stale_pidfiles removes the pid files of a dockerd or containerd that
# was killed without cleaning up (a machine whose processes were all ended),
# unless the pid in them is alive and is that program.
clear_stale_pidfiles() {
  local f pid
  for f in /var/run/docker.pid /var/run/docker/containerd/containerd.pid; do
    [[ -f $f ]] || continue
    pid=$(cat "$f" 2>/dev/null || true)
    # Alive means: the process exists, is not a zombie, and is that program.
    if [[ -n $pid ]] && grep -qE 'dockerd|containerd' "/proc/$pid/comm" 2>/dev/null &&
      ! grep -qE '^State:[[:space:]]+Z' "/proc/$pid/status" 2>/dev/null; then
      continue
    fi
    say "docker engine: removing stale $f"
    rm -f "$f"
  done
}

ensure_engine() {
  if engine_answers; then
    say "docker engine: running ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
    return
  fi
  if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
    say "docker engine: installing docker.io"
    apt_install docker.io
  fi
  need_root "starting dockerd"
  clear_stale_pidfiles
  local log=${DOCKERD_LOG:-/var/log/dockerd.log}
  touch "$log" 2>/dev/null || log=/tmp/dockerd.log
  say "docker engine: starting dockerd (log: $log)"
  # setsid + nohup: dockerd outlives this script and its terminal. If another
  # dockerd is already starting (a package's init script, say), this one
  # exits on its pid file and the wait below sees the other answer.
  # shellcheck disable=SC2086 # DOCKERD_FLAGS is a list of flags
  setsid nohup dockerd ${DOCKERD_FLAGS:-} >>"$log" 2>&1 </dev/null &
  local wait_sec=${DOCKERD_WAIT_SEC:-60}
  local deadline=$((SECONDS + wait_sec))
  until engine_answers; do
    ((SECONDS < deadline)) || die "docker engine did not answer within ${wait_sec}s (see $log)"
    sleep 0.5
  done
  say "docker engine: running ($(docker info --format '{{.ServerVersion}}' 2>/dev/null))"
}

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

try_pull() {
  local ref=$1
  if timeout "${PULL_TIMEOUT_SEC:-20}" docker pull -q "$ref" >/dev/null 2>&1; then
    say "image $ref: pulled"
    return 0
  fi
  return 1
}

# build_debian makes debian:bookworm-slim from the Debian mirror apt uses:
# a minbase debootstrap imported as an image whose apt sources point at the
# same mirror, so apt-get works in containers built from it.
build_debian() {
  local ref=debian:bookworm-slim
  need_root "building $ref with debootstrap"
  command -v debootstrap >/dev/null || apt_install debootstrap
  workdir
  local mirror security rootfs=$work/rootfs
  mirror=$(apt_mirror main)
  security=$(apt_mirror security)
  say "image $ref: building with debootstrap from $mirror (about a minute)"
  if ! debootstrap --variant=minbase bookworm "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1; then
    tail -n 20 "$work/debootstrap.log" >&2
    die "debootstrap failed (full log above)"
  fi
  rm -f "$rootfs/etc/apt/sources.list"
  cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
  # As the official slim image does: no package caches or lists in the image.
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  tar -C "$rootfs" -c . | docker import \
    -c 'CMD ["bash"]' \
    -c 'LABEL org.opencontainers.image.description="local stand-in for debian:bookworm-slim, built by scripts/setup.sh"' \
    - "$ref" >/dev/null
  rm -rf "$rootfs"
  say "image $ref: built"
}

build_python() {
  local ref=python:3.11-slim
  workdir
  say "image $ref: building from scripts/images/python-3.11-slim"
  # Host networking: the build's apt-get reaches the mirror even where the
  # engine has no working bridge network (iptables unavailable, say).
  if ! docker build -q --network host -t "$ref" "$repo/scripts/images/python-3.11-slim" >"$work/python-build.log" 2>&1; then
    tail -n 20 "$work/python-build.log" >&2
    die "docker build of $ref failed (log above)"
  fi
  say "image $ref: built"
}

ensure_image() {
  local ref=$1 build=$2
  if have_image "$ref"; then
    say "image $ref: present"
    return
  fi
  try_pull "$ref" && return
  say "image $ref: pull failed; building locally"
  "$build"
}

# ensure_node installs the pinned Node.js readers from scripts/node into
# .cache/node (gitignored). Skipped when the installed set matches the pins.
ensure_node() {
  if ! command -v node >/dev/null; then
    say "node: installing nodejs and npm"
    apt_install nodejs npm
  elif ! command -v npm >/dev/null; then
    say "node: installing npm"
    apt_install npm
  fi
  if ! command -v curl >/dev/null || ! command -v jq >/dev/null; then
    say "node: installing curl and jq (the agent tools image of the gateway's tests)"
    apt_install curl jq
  fi
  local dir=$repo/.cache/node
  if cmp -s "$repo/scripts/node/package.json" "$dir/package.json" &&
    [[ -f $dir/node_modules/@duckdb/node-api/package.json && -f $dir/node_modules/apache-arrow/package.json ]]; then
    say "node: readers present in .cache/node (node $(node --version))"
    return
  fi
  say "node: installing @duckdb/node-api and apache-arrow into .cache/node"
  mkdir -p "$dir"
  cp "$repo/scripts/node/package.json" "$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --no-package-lock --loglevel=error >/dev/null) ||
    die "npm install in $dir failed"
  say "node: readers installed (node $(node --version))"
}

# ensure_browser installs Debian's chromium for the viewer's headless
# browser tests. Skipped when a Chromium or Chrome binary is on PATH.
ensure_browser() {
  local b
  for b in chromium chromium-browser google-chrome google-chrome-stable; do
    if command -v "$b" >/dev/null; then
      say "browser: $b present ($("$b" --version 2>/dev/null | head -n1))"
      return
    fi
  done
  say "browser: installing chromium"
  apt_install chromium
  say "browser: $(chromium --version 2>/dev/null | head -n1) installed"
}

# claude_version is the Claude Code CLI the docker-claude arms are built
# and tested against; its binary is the ELF of the linux-x64 optional
# package (the package's own bin is a Node launcher that finds it).
claude_version=2.1.332
claude_bin=node_modules/@anthropic-ai/claude-code-linux-x64/claude

# ensure_claude installs the pinned CLI into .cache/claude (gitignored) and
# checks the binary answers with the pinned version. Skipped when it does.
ensure_claude() {
  local dir=$repo/.cache/claude want="$claude_version (Claude Code)" got
  if [[ -x $dir/$claude_bin ]] && got=$("$dir/$claude_bin" --version 2>/dev/null) && [[ $got == "$want" ]]; then
    say "claude: $got present in .cache/claude"
    return
  fi
  if ! command -v npm >/dev/null; then
    say "claude: installing nodejs and npm"
    apt_install nodejs npm
  fi
  [[ $(uname -m) == x86_64 ]] || die "claude: only linux-x64 is supported (this machine is $(uname -m))"
  say "claude: installing @anthropic-ai/claude-code@$claude_version into .cache/claude"
  mkdir -p "$dir"
  printf '{"private":true,"dependencies":{"@anthropic-ai/claude-code":"%s"}}\n' "$claude_version" >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --no-package-lock --loglevel=error \
    --os=linux --cpu=x64 --libc=glibc >/dev/null) || die "npm install in $dir failed"
  [[ -f $dir/$claude_bin ]] || die "claude: $claude_bin missing after install (the optional linux-x64 package was not installed)"
  chmod 0755 "$dir/$claude_bin"
  got=$("$dir/$claude_bin" --version 2>&1) || die "claude: $claude_bin --version failed: $got"
  [[ $got == "$want" ]] || die "claude: $claude_bin --version printed '$got', want '$want'"
  say "claude: $got installed in .cache/claude"
}

# codex_version is the OpenAI Codex CLI the docker-codex arms are built and
# tested against; its binary is the static musl ELF of the linux-x64
# optional package (an npm alias of @openai/codex@<version>-linux-x64; the
# package's own bin is a Node launcher that finds it).
codex_version=0.171.0
codex_bin=node_modules/@openai/codex-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex

# ensure_codex installs the pinned CLI into .cache/codex (gitignored) and
# checks the binary answers with the pinned version. Skipped when it does.
ensure_codex() {
  local dir=$repo/.cache/codex want="codex-cli $codex_version" got
  if [[ -x $dir/$codex_bin ]] && got=$("$dir/$codex_bin" --version 2>/dev/null) && [[ $got == "$want" ]]; then
    say "codex: $got present in .cache/codex"
    return
  fi
  if ! command -v npm >/dev/null; then
    say "codex: installing nodejs and npm"
    apt_install nodejs npm
  fi
  [[ $(uname -m) == x86_64 ]] || die "codex: only linux-x64 is supported (this machine is $(uname -m))"
  say "codex: installing @openai/codex@$codex_version into .cache/codex"
  mkdir -p "$dir"
  printf '{"private":true,"dependencies":{"@openai/codex":"%s"}}\n' "$codex_version" >"$dir/package.json"
  (cd "$dir" && npm install --no-audit --no-fund --no-package-lock --loglevel=error \
    --os=linux --cpu=x64 >/dev/null) || die "npm install in $dir failed"
  [[ -f $dir/$codex_bin ]] || die "codex: $codex_bin missing after install (the optional linux-x64 package was not installed)"
  chmod 0755 "$dir/$codex_bin"
  got=$(HOME=$dir "$dir/$codex_bin" --version 2>&1) || die "codex: $codex_bin --version failed: $got"
  [[ $got == "$want" ]] || die "codex: $codex_bin --version printed '$got', want '$want'"
  say "codex: $got installed in .cache/codex"
}

# ensure_compose installs Debian's docker-compose (1.29) for deploy/.
# Skipped when a docker-compose command answers.
ensure_compose() {
  if command -v docker-compose >/dev/null && docker-compose version >/dev/null 2>&1; then
    say "compose: $(docker-compose version --short 2>/dev/null || echo present) present"
    return
  fi
  say "compose: installing docker-compose"
  apt_install docker-compose
  say "compose: $(docker-compose version --short 2>/dev/null) installed"
}

ensure_engine
ensure_image debian:bookworm-slim build_debian
ensure_image python:3.11-slim build_python
if [[ $want_node -eq 1 ]]; then ensure_node; fi
if [[ $want_browser -eq 1 ]]; then ensure_browser; fi
if [[ $want_claude -eq 1 ]]; then ensure_claude; fi
if [[ $want_codex -eq 1 ]]; then ensure_codex; fi
if [[ $want_compose -eq 1 ]]; then ensure_compose; fi
