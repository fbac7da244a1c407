package proxylogger

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"testing"
	"time"
)

const (
	downloadSize  = 64 << 20 // bytes
	downloadPairs = 8        // direct and proxied downloads per iteration
)

// BenchmarkProxyDownload downloads 64 MiB from an httptest server through
// the proxy and, as the floor, the same 64 MiB direct from the same server
// with the same client settings (no keep-alive, so both include the
// connection set-up). It reports ratio_vs_floor = direct time / proxied time
// (1 = the proxy costs nothing; target ≥ 0.8) and both rates in MiB/s.
// "connect" is an https download through a CONNECT tunnel (TLS end to end),
// "http" a plain-HTTP download forwarded by the proxy. Each iteration makes
// downloadPairs downloads each way, alternating which goes first, so one
// burst of load from elsewhere (a virtual machine's stolen time) does not
// decide a run taken with -benchtime 1x.
func BenchmarkProxyDownload(b *testing.B) {
	chunk := make([]byte, 1<<20)
	handler := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(downloadSize))
		for range downloadSize / len(chunk) {
			if _, err := w.Write(chunk); err != nil {
				return
			}
		}
	})
	for _, mode := range []string{"connect", "http"} {
		b.Run(mode, func(b *testing.B) {
			var srv *httptest.Server
			if mode == "connect" {
				srv = httptest.NewTLSServer(handler)
			} else {
				srv = httptest.NewServer(handler)
			}
			defer srv.Close()
			u, _ := url.Parse(srv.URL)
			proxy := startProxy(b, Config{Policy: policy(b, u.Host), AllowLoopbackUpstreams: true, Sink: NewJSONL(io.Discard).Record})
			direct := srv.Client().Transport.(*http.Transport).Clone()
			direct.DisableKeepAlives = true
			via := direct.Clone()
			via.Proxy = http.ProxyURL(&url.URL{Scheme: "http", Host: proxy})
			get := func(tr *http.Transport) time.Duration {
				start := time.Now()
				resp, err := (&http.Client{Transport: tr}).Get(srv.URL)
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if err != nil || n != downloadSize {
					b.Fatalf("downloaded %d bytes, %v", n, err)
				}
				return time.Since(start)
			}
			var dt, pt time.Duration
			b.SetBytes(downloadSize * downloadPairs)
			for b.Loop() {
				for i := range downloadPairs {
					if i%2 == 0 {
						dt += get(direct)
						pt += get(via)
					} else {
						pt += get(via)
						dt += get(direct)
					}
				}
			}
			mib := float64(downloadSize) / (1 << 20) * float64(b.N*downloadPairs)
			b.ReportMetric(dt.Seconds()/pt.Seconds(), "ratio_vs_floor")
			b.ReportMetric(mib/dt.Seconds(), "direct_MiB/s")
			b.ReportMetric(mib/pt.Seconds(), "proxy_MiB/s")
		})
	}
}

// BenchmarkProxyConnectLatency measures, per iteration, a direct TCP connect
// to a loopback listener (the floor) and a connect to the proxy plus
// `CONNECT` to the same listener up to the proxy's 200. It reports
// added_p99_ms = p99(proxied) - p99(direct) in milliseconds (target ≤ 2)
// and the added p50.
func BenchmarkProxyConnectLatency(b *testing.B) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	target := ln.Addr().String()
	proxy := startProxy(b, Config{Policy: policy(b, target), AllowLoopbackUpstreams: true, Sink: NewJSONL(io.Discard).Record})
	req := fmt.Sprintf("CONNECT %s HTTP/1.1\r\nHost: %[1]s\r\n\r\n", target)
	var direct, via []time.Duration
	for b.Loop() {
		start := time.Now()
		c, err := net.Dial("tcp", target)
		if err != nil {
			b.Fatal(err)
		}
		direct = append(direct, time.Since(start))
		c.Close()

		start = time.Now()
		c, err = net.Dial("tcp", proxy)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.WriteString(c, req); err != nil {
			b.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
		if err != nil || resp.StatusCode != http.StatusOK {
			b.Fatalf("CONNECT: %v %v", resp, err)
		}
		via = append(via, time.Since(start))
		c.Close()
	}
	pct := func(d []time.Duration, q float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[min(len(s)-1, int(q*float64(len(s))))]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(pct(via, 0.99)-pct(direct, 0.99)), "added_p99_ms")
	b.ReportMetric(ms(pct(via, 0.50)-pct(direct, 0.50)), "added_p50_ms")
	b.ReportMetric(ms(pct(direct, 0.99)), "direct_p99_ms")
}
