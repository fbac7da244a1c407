package harness

import (
	"os"
	"strings"
)

// An arm reads what it takes from proctor's own environment (a CLI's
// path, a model provider's address and credentials, the operator's
// proxy, PROCTOR_PROVIDER_PRIVATE, ...) through the getenv it is given,
// never from the process: Env.Getenv in Prepare and Solve, the getenv
// argument of Check and IdentityInputs. The command line passes its own
// (os.Getenv when proctor runs as a program), so runs in one process can
// each have their own. A getenv returns "" for a variable that is unset;
// a nil getenv is os.Getenv.

// orProcess returns getenv, or os.Getenv when getenv is nil.
func orProcess(getenv func(string) string) func(string) string {
	if getenv == nil {
		return os.Getenv
	}
	return getenv
}

// Environ is proctor's environment as getenv gives it: every variable of
// the process and each of names, read through getenv (which may set,
// shadow or unset any of them). A variable getenv gives no value is left
// out, unless the process has it set empty and getenv did not change it
// (so with os.Getenv, Environ is the process's environment). A getenv
// cannot be listed: a variable only it knows is seen only when names
// holds it. A nil getenv is os.Getenv.
func Environ(getenv func(string) string, names ...string) map[string]string {
	getenv = orProcess(getenv)
	out := map[string]string{}
	for _, kv := range os.Environ() {
		k, pv, _ := strings.Cut(kv, "=")
		if _, ok := out[k]; ok || k == "" {
			continue
		}
		if v := getenv(k); v != "" || pv == "" {
			out[k] = v
		}
	}
	for _, k := range names {
		if _, ok := out[k]; ok || k == "" {
			continue
		}
		if v := getenv(k); v != "" {
			out[k] = v
		}
	}
	return out
}

// environList is Environ as KEY=value lines, the shape of os.Environ.
func environList(getenv func(string) string, names ...string) []string {
	m := Environ(getenv, names...)
	out := make([]string, 0, len(m))
	for k, v := range m {
		out = append(out, k+"="+v)
	}
	return out
}
