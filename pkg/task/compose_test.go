package task

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

func writeCompose(t *testing.T, compose string, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	files["docker-compose.yaml"] = compose
	files["Dockerfile"] = "FROM debian:bookworm-slim\n"
	for rel, body := range files {
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadComposeRefusals: every key that could open a way out or share
// something with the host is refused naming the service and the key,
// whatever else the file says.
func TestLoadComposeRefusals(t *testing.T) {
	svc := "services:\n  main:\n    build: .\n  s:\n    image: debian:bookworm-slim\n"
	for _, c := range []struct{ extra, want string }{
		{"    network_mode: host\n", `service s: network_mode "host" is refused`},
		{"    network_mode: bridge\n", `network_mode "bridge" is refused`},
		{"    privileged: true\n", "privileged is refused"},
		{"    cap_add: [NET_ADMIN]\n", "cap_add is refused"},
		{"    pid: host\n", "pid, ipc"},
		{"    volumes: [\"/:/host\"]\n", "volumes and volumes_from are not supported"},
		{"    devices: [\"/dev/kvm:/dev/kvm\"]\n", "devices"},
		{"    env_file: [x.env]\n", "env_file is not supported"},
		{"    depends_on:\n      nope: {condition: service_started}\n", `undefined service "nope"`},
		{"    depends_on:\n      main: {condition: service_started}\n", "depends_on main"},
	} {
		dir := writeCompose(t, svc+c.extra, map[string]string{"x.env": "A=1\n"})
		_, err := LoadCompose(filepath.Join(dir, "docker-compose.yaml"), dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "docker-compose.yaml") {
			t.Errorf("%q: err %v, want %q naming the file", c.extra, err, c.want)
		}
	}
	for _, c := range []struct{ compose, want string }{
		{"services:\n  main:\n    build: .\n    depends_on:\n      s: {condition: service_healthy}\n  s:\n    image: x\n", "s has no healthcheck"},
		{"services:\n  main:\n    build: .\n  s:\n    build: ../..\n", "leaves the environment directory"},
		{"services:\n  main:\n    build: .\n  s:\n    build: {context: ., dockerfile: Other}\n", `build.dockerfile Other does not exist`},
		{"services:\n  main:\n    build: .\n  s:\n    build: {context: ./sub, dockerfile: ../Dockerfile}\n", "outside the build context"},
		{"services:\n  main:\n    build: .\n  s:\n    build: {context: ., target: nope}\n", `build.target "nope": Dockerfile has no stage of that name`},
		{"services:\n  main:\n    build: .\n  s:\n    build: {context: ., dockerfile_inline: \"FROM x\"}\n", "dockerfile_inline is not supported"},
		{"services:\n  main:\n    build: .\n  a:\n    image: x\n    depends_on: [b]\n  b:\n    image: x\n    depends_on: [a]\n", "cycle"},
	} {
		dir := writeCompose(t, c.compose, map[string]string{"sub/Dockerfile": "FROM x\n"})
		_, err := LoadCompose(filepath.Join(dir, "docker-compose.yaml"), dir)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: err %v, want %q", c.compose, err, c.want)
		}
	}
}

// TestLoadComposeRewrites: ports, networks and names are dropped and
// listed; the sidecar keeps its build context, healthcheck, environment
// (interpolated from the environment's .env only) and dependencies.
func TestLoadComposeRewrites(t *testing.T) {
	t.Setenv("PROCTOR_TEST_SECRET", "from-the-host")
	dir := writeCompose(t, `services:
  main:
    build: .
    environment: {PEER: "web:${PORT}"}
    depends_on: {web: {condition: service_healthy}}
  web:
    build: ./web
    container_name: fixed
    ports: ["8000:8000"]
    networks: [front]
    environment: {SECRET: "${PROCTOR_TEST_SECRET:-unset}"}
    healthcheck: {test: ["CMD", "true"], interval: 1s, retries: 5}
networks:
  front: {}
`, map[string]string{".env": "PORT=8000\n", "web/Dockerfile": "FROM python:3.11-slim\n"})
	c, err := LoadCompose(filepath.Join(dir, "docker-compose.yaml"), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Services) != 1 || c.Services[0].Name != "web" || c.Services[0].BuildContext != filepath.Join(dir, "web") {
		t.Fatalf("services %+v", c.Services)
	}
	w := c.Services[0]
	if w.Healthcheck == nil || w.Healthcheck.Retries != 5 || w.Healthcheck.Interval.Seconds() != 1 || w.Env["SECRET"] != "unset" {
		t.Errorf("web %+v (healthcheck %+v)", w, w.Healthcheck)
	}
	if c.MainEnv["PEER"] != "web:8000" || c.MainDependsOn["web"] != "service_healthy" {
		t.Errorf("main env %v depends_on %v", c.MainEnv, c.MainDependsOn)
	}
	got := strings.Join(c.Rewrites, "\n")
	for _, want := range []string{"ports dropped", "networks dropped", "container_name/hostname dropped"} {
		if !strings.Contains(got, want) {
			t.Errorf("rewrites %q lack %q", got, want)
		}
	}
}

// stderrOf runs f with this process's stderr (fd 2) read into the
// returned string.
func stderrOf(t *testing.T, f func()) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved, err := syscall.Dup(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Dup2(int(w.Fd()), 2); err != nil {
		t.Fatal(err)
	}
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	f()
	_ = syscall.Dup2(saved, 2)
	_ = syscall.Close(saved)
	w.Close()
	return <-done
}

// TestLoadComposeUnsetVariables: a variable the file uses bare and .env
// does not set is blank, and the task's warnings say so, naming it and
// where compose variables come from; nothing reaches stderr (the
// library's raw "The "HOME" variable is not set" line named no task, and
// HOME is set in proctor's own environment). Set, defaulted and escaped
// variables are not listed.
func TestLoadComposeUnsetVariables(t *testing.T) {
	dir := writeCompose(t, `services:
  main:
    build: .
    environment:
      A: "${HOME}/x"
      B: "$MISSING_TOO"
      C: "${SET}"
      D: "${DEFAULTED:-d}"
      E: "$$ESCAPED"
`, map[string]string{".env": "SET=1\n"})
	var c *Compose
	var err error
	out := stderrOf(t, func() { c, err = LoadCompose(filepath.Join(dir, "docker-compose.yaml"), dir) })
	if err != nil {
		t.Fatal(err)
	}
	if out != "" {
		t.Errorf("stderr during the load: %q", out)
	}
	if len(c.Unset) != 2 || !strings.Contains(c.Unset[0], "${HOME} is blank: environment/.env does not set it") || !strings.Contains(c.Unset[1], "${MISSING_TOO}") ||
		!strings.Contains(c.Unset[0], "never from proctor's environment") {
		t.Errorf("unset %q", c.Unset)
	}
	if c.MainEnv["A"] != "/x" || c.MainEnv["C"] != "1" || c.MainEnv["D"] != "d" || c.MainEnv["E"] != "$ESCAPED" {
		t.Errorf("main env %v", c.MainEnv)
	}
}

// TestLoadComposeBuild: a sidecar built as compose builds it keeps its
// build.dockerfile (relative to its context, with forward slashes),
// build.args (interpolated from .env) and build.target; an argument
// without a value is left to the Dockerfile's default, never filled from
// proctor's own environment.
func TestLoadComposeBuild(t *testing.T) {
	t.Setenv("FROM_THE_HOST", "leaked")
	dir := writeCompose(t, `services:
  main:
    build: .
  api:
    build:
      context: ./api
      dockerfile: docker/Dockerfile.api
      target: Runtime
      args:
        VERSION: "${VERSION}"
        FROM_THE_HOST:
`, map[string]string{".env": "VERSION=2.1\n",
		"api/docker/Dockerfile.api": "ARG VERSION=0\nFROM python:${VERSION} AS build\nFROM build AS runtime\nFROM nope AS after\n"})
	c, err := LoadCompose(filepath.Join(dir, "docker-compose.yaml"), dir)
	if err != nil {
		t.Fatal(err)
	}
	a := c.Services[0]
	if a.BuildContext != filepath.Join(dir, "api") || a.Dockerfile != "docker/Dockerfile.api" || a.BuildTarget != "Runtime" ||
		len(a.BuildArgs) != 1 || a.BuildArgs["VERSION"] != "2.1" {
		t.Errorf("api %+v", a)
	}
}
