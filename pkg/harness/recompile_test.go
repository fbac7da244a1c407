package harness_test

import (
	"reflect"
	"testing"

	"github.com/proctor-eval/proctor/pkg/harness"
)

// TestBuildCommands: the compiler command lines of an instruction are
// those in code (fenced, indented, inline) whose first word is gcc, g++,
// clang or clang++ and that build a program from a C or C++ source;
// prose, compile-only lines, lines with shell operators and repeats are
// not.
func TestBuildCommands(t *testing.T) {
	for name, c := range map[string]struct {
		in   string
		want []harness.BuildCommand
	}{
		"fenced": {"Build it:\n\n```sh\n$ g++ -O2 -o /app/answer /app/answer.cpp\n```\n",
			[]harness.BuildCommand{{"g++ -O2 -o /app/answer /app/answer.cpp", "/app/answer"}}},
		"inline and repeated": {"Compile with `gcc -Wall -o prog main.c util.c -lm`; we run `gcc -Wall -o prog main.c util.c -lm` too.",
			[]harness.BuildCommand{{"gcc -Wall -o prog main.c util.c -lm", "prog"}}},
		"indented, path, version, -oFILE, default a.out": {"    /usr/bin/clang++-17 -std=c++20 -obin/x x.cc\n\n    clang main.c\n",
			[]harness.BuildCommand{{"/usr/bin/clang++-17 -std=c++20 -obin/x x.cc", "bin/x"}, {"clang main.c", "a.out"}}},
		"quoted output": {"`g++ -o \"my prog\" a.cpp`", []harness.BuildCommand{{`g++ -o "my prog" a.cpp`, "my prog"}}},
		"prose":         {"Use g++ -o x x.cpp to build it.", nil},
		"compile only":  {"`g++ -c x.cpp -o x.o`\n`gcc -E x.c`\n`gcc --version`", nil},
		"no source":     {"`gcc -o prog main.o`", nil},
		"operators":     {"```\ncd /app && g++ -o x x.cpp\ng++ -o x x.cpp; ./x\ng++ -o x $(ls *.cpp)\ng++ -o x x.cpp > log\n```", nil},
		"other tools":   {"```\nmake\ncc -o x x.c\ng++-wrapper -o x x.cpp\n```", nil},
		"unterminated":  {"`g++ -o 'x x.cpp`", nil},
	} {
		if got := harness.BuildCommands(c.in); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %q, want %q", name, got, c.want)
		}
	}
}
