package cli

import (
	"crypto/tls"
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
	var script, listen, requests, tlsCert, tlsKey string
	cmd := &cobra.Command{
		Use:   "fake-model --script FILE --listen ADDR [--requests FILE] [--tls-cert FILE --tls-key FILE]",
		Short: "Serve a scripted model endpoint: Anthropic, OpenAI and Gemini shapes (the offline model of the agent tests and demo)",
		Long: `Serve on ADDR, answered from the script FILE (YAML or JSON, the format of
package pkg/llmtest: replies by turn, each a text, tool_use blocks of any
tool, an HTTP error such as 429 or 529, or a reply that never ends, with
usage figures), the Anthropic Messages API (POST /v1/messages), OpenAI's
Chat Completions (/v1/chat/completions) and Responses (/v1/responses) and
Gemini's generateContent and streamGenerateContent
(/v1beta/models/MODEL:...), each streamed as its API streams when the
request asks for a stream. Point a client at it with
ANTHROPIC_BASE_URL=http://ADDR (or OPENAI_BASE_URL, GOOGLE_GEMINI_BASE_URL).
With --tls-cert and --tls-key (PEM) it serves HTTPS. Every request is
appended to --requests as one JSON line. It prints "listening on ADDR" once
it accepts connections and serves until SIGINT or SIGTERM.`,
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
			if (tlsCert == "") != (tlsKey == "") {
				return usageError{errors.New("--tls-cert and --tls-key go together")}
			}
			if tlsCert != "" {
				cert, err := tls.LoadX509KeyPair(tlsCert, tlsKey)
				if err != nil {
					return usageError{fmt.Errorf("--tls-cert/--tls-key: %w", err)}
				}
				ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"http/1.1"}})
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
	f.StringVar(&tlsCert, "tls-cert", "", "serve HTTPS with this PEM certificate (chain)")
	f.StringVar(&tlsKey, "tls-key", "", "the PEM key of --tls-cert")
	return cmd
}
