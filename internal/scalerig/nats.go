package scalerig

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// natsNode is one nats-server of the rig: its conf, ports and process.
type natsNode struct {
	name                     string
	client, route, mon, prof int
	conf                     string
	p                        *proc
}

func (n *natsNode) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.client) }

// writeNATS writes the conf of n nodes under dir (a cluster when n > 1:
// every node routes to every other, JetStream on each) and returns the
// nodes, not started.
func writeNATS(dir string, n int) ([]*natsNode, error) {
	var nodes []*natsNode
	for i := range n {
		nd := &natsNode{name: fmt.Sprintf("n%d", i+1)}
		for _, p := range []*int{&nd.client, &nd.route, &nd.mon, &nd.prof} {
			port, err := freePort()
			if err != nil {
				return nil, err
			}
			*p = port
		}
		nodes = append(nodes, nd)
	}
	for _, nd := range nodes {
		store := filepath.Join(dir, nd.name, "js")
		if err := os.MkdirAll(store, 0o755); err != nil {
			return nil, err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "server_name: %s\nlisten: 127.0.0.1:%d\nhttp: 127.0.0.1:%d\nprof_port: %d\n", nd.name, nd.client, nd.mon, nd.prof)
		fmt.Fprintf(&b, "jetstream {\n  store_dir: %q\n}\n", store)
		if n > 1 {
			var routes []string
			for _, o := range nodes {
				if o != nd {
					routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.route))
				}
			}
			fmt.Fprintf(&b, "cluster {\n  name: scale\n  listen: 127.0.0.1:%d\n  routes: [%s]\n}\n", nd.route, strings.Join(routes, ", "))
		}
		nd.conf = filepath.Join(dir, nd.name, "nats.conf")
		if err := os.WriteFile(nd.conf, []byte(b.String()), 0o644); err != nil {
			return nil, err
		}
	}
	return nodes, nil
}

// natsURLs is the comma-separated client URL list of nodes.
func natsURLs(nodes []*natsNode) string {
	var u []string
	for _, n := range nodes {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// healthy polls the node's /healthz until it answers 200 (JetStream up
// and, in a cluster, current with its peers) or ctx ends.
func (n *natsNode) healthy(ctx context.Context) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/healthz", n.mon)
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = strings.TrimSpace(string(body))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("nats %s not healthy: %s", n.name, last)
		case <-time.After(100 * time.Millisecond): // polling the server's health endpoint
		}
	}
}

// profile fetches a CPU profile of d from the node's profiling port into
// path.
func (n *natsNode) profile(ctx context.Context, d time.Duration, path string) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/profile?seconds=%d", n.prof, max(1, int(d.Seconds())))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("nats %s profile: %s", n.name, resp.Status)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}
