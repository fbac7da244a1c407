package process_test

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/proctor-eval/proctor/pkg/sandbox"
	"github.com/proctor-eval/proctor/pkg/sandbox/process"
)

// A solve phase through the process driver, its output captured three
// ways at once: a bounded tail for the report, line by line for event
// parsing, and (in the launcher) the full run.log.
func Example() {
	var d sandbox.Driver = &process.Driver{BaseDir: os.TempDir()}
	ctx := context.Background()
	h, err := d.Start(ctx, sandbox.Spec{RunID: "r1", CellID: "hello/oracle/-/0", Workdir: "/app"})
	if err != nil {
		panic(err)
	}
	defer d.Destroy(ctx, h)

	tail := sandbox.NewTail(0) // last 64 KiB, as valid UTF-8
	lines := sandbox.NewLines(func(line string, truncated bool) {
		fmt.Printf("line: %+q\n", line)
	}, 0)
	res, err := d.Exec(ctx, h, sandbox.ExecSpec{
		Cmd:    []string{"sh", "-c", "echo hello; printf 'bad \\377 byte'"},
		Stdout: io.MultiWriter(tail, lines),
		Grace:  sandbox.DefaultGrace,
	})
	lines.Close()
	if err != nil {
		panic(err)
	}
	fmt.Println("exit", res.ExitCode, "timed out", res.TimedOut)
	fmt.Printf("tail %+q, %d bytes\n", tail.String(), tail.Total())
	// Output:
	// line: "hello"
	// line: "bad \ufffd byte"
	// exit 0 timed out false
	// tail "hello\nbad \ufffd byte", 16 bytes
}
