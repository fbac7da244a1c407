package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/proctor-eval/proctor/pkg/llmtest"
)

func newServeFakeModel(g *globals) *cobra.Command {
	var script, listen, requests string
	cmd := &cobra.Command{
		Use:   "fake-model --script FILE --listen ADDR [--requests FILE]",
		Short: "Serve a scripted Anthropic Messages endpoint (the offline model of the docker-claude tests and demo)",
		Long: `Serve POST /v1/messages on ADDR, answered from the script FILE (YAML or JSON,
the format of package pkg/llmtest: replies by turn, each a text, tool_use
blocks of any tool, an HTTP error such as 429 or 529, or a reply that never
ends, with usage figures), streamed as the Messages API's Server-Sent Events
when the request asks for a stream. Point a client at it with
ANTHROPIC_BASE_URL=http://ADDR. Every request is appended to --requests as
one JSON line. It prints "listening on ADDR" once it accepts connections and
serves until SIGINT or SIGTERM.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if script == "" || listen == "" {
				return usageError{errors.New("fake-model needs --script FILE and --listen ADDR")}
			}
			s, err := llmtest.LoadScript(script)
			if err != nil {
				return usageError{fmt.Errorf("--script: %w", err)}
			}
			srv := llmtest.New(s)
			if requests != "" {
				f, err := os.OpenFile(requests, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
				if err != nil {
					return fmt.Errorf("--requests: %w", err)
				}
				defer f.Close()
				var mu sync.Mutex
				srv.OnRequest = func(r llmtest.Request) {
					b, _ := json.Marshal(r)
					mu.Lock()
					defer mu.Unlock()
					_, _ = f.Write(append(b, '\n'))
				}
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("--listen: %w", err)
			}
			hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
			fmt.Fprintln(g.stdout, "listening on", ln.Addr())
			go func() {
				<-cmd.Context().Done()
				srv.Close()
				_ = hs.Close()
			}()
			if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&script, "script", "", "the script file (YAML or JSON)")
	f.StringVar(&listen, "listen", "", "address to listen on, e.g. 0.0.0.0:8080")
	f.StringVar(&requests, "requests", "", "append every request received to this JSON-lines file")
	return cmd
}
