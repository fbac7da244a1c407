package proxylogger

import (
	"bufio"
	"crypto/aes"
	"crypto/cipher"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/proctor-eval/proctor/pkg/providers"
	"github.com/proctor-eval/proctor/pkg/tlsca"
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

// Sizes of BenchmarkGatewayStream.
const (
	streamSize   = 64 << 20 // bytes of text deltas in the long stream
	streamEvent  = 1 << 10  // bytes of text per delta of the long stream
	streamPairs  = 4        // long streams each way per iteration
	callPairs    = 200      // short calls each way per iteration
	streamEvents = 20000    // deltas of the event stream, each flushed by the upstream
)

// BenchmarkGatewayStream measures streamed Messages API responses through
// the model gateway (TLS intercepted, the placeholder replaced, the usage
// parsed, the call recorded) against the same responses through a plain
// CONNECT tunnel of the same proxy (the floor, measured in the same run,
// TLS end to end with the upstream):
//
//   - added_ms_per_call: short streamed calls (message_start, 8 deltas,
//     message_delta, message_stop; ~2 KB) on kept-alive connections, one
//     of each way in turn; median(gateway) - median(tunnel) (target ≤ 2).
//   - ratio_vs_tunnel: long streams (64 MiB of 1 KiB text deltas), which
//     way goes first alternating; tunnel time / gateway time, the
//     gateway's streamed throughput as a fraction of the tunnel's (target
//     ≥ 0.9).
//   - events_ratio_vs_tunnel: a stream of 20,000 small deltas, each
//     flushed by the upstream on its own as a model's are; the same ratio.
//   - connect_added_ms: the first call's added time (the gateway's second
//     TLS handshake and its leaf, minted once per host).
//   - cpu_ratio_vs_tunnel: the load-independent figure beside
//     ratio_vs_tunnel: the CPU time (user + system, getrusage) the whole
//     process spends per MiB of the long streams through the tunnel over
//     the same through the gateway. Upstream and client do the same work
//     either way, so tunnel_cpu_ms/MiB and gateway_cpu_ms/MiB differ by
//     what the gateway adds (its second TLS: a decryption and an
//     encryption of every byte); other processes' load does not count.
//   - added_cpu_ms/MiB: that difference, beside aes_floor_ms/MiB, the
//     floor of what the gateway must add: the CPU time of sealing and
//     opening the long streams' bytes in 16 KiB records with the AEAD of
//     the cipher suite the client negotiated (crypto/cipher's AES-GCM,
//     nothing else), measured in each iteration after the streams;
//     added_over_aes_floor is their ratio (1: the gateway adds nothing
//     but its two passes).
func BenchmarkGatewayStream(b *testing.B) {
	upCA, _ := tlsca.New("bench upstream")
	certPEM, keyPEM, _ := tlsca.ServerCert(upCA, "api.anthropic.com")
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		b.Fatal(err)
	}
	event := func(text string) string {
		return `event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"` + text + `"}}` + "\n\n"
	}
	shortDelta, longDelta := event("Hello, world."), event(strings.Repeat("x", streamEvent))
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if k := r.Header.Get("X-Api-Key"); k != "sk-real" && k != "sk-direct" {
			http.Error(w, "bad key", http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		bw := bufio.NewWriterSize(w, 32<<10)
		io.WriteString(bw, "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"model\":\"claude-sonnet-4-5\",\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n")
		q := r.URL.Query()
		switch {
		case q.Has("long"):
			for range streamSize / streamEvent {
				io.WriteString(bw, longDelta)
				if bw.Buffered() > 16<<10 {
					bw.Flush()
					fl.Flush()
				}
			}
		case q.Has("events"):
			for range streamEvents {
				io.WriteString(bw, shortDelta)
				bw.Flush()
				fl.Flush()
			}
		default:
			for range 8 {
				io.WriteString(bw, shortDelta)
			}
		}
		io.WriteString(bw, "event: message_delta\ndata: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\nevent: message_stop\ndata: {\"type\":\"message_stop\"}\n\n")
		bw.Flush()
	})
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}})
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: handler}
	go srv.Serve(ln)
	defer srv.Close()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	host := "api.anthropic.com:" + port
	runCA, _ := tlsca.New("bench run")
	upRoots, _ := upCA.Pool()
	runRoots, _ := runCA.Pool()
	res := mapResolver{"api.anthropic.com": loopback}
	tunnel := startProxy(b, Config{Policy: policy(b, host), Resolver: res, AllowLoopbackUpstreams: true, Sink: NewJSONL(io.Discard).Record})
	gateway := startProxy(b, Config{Policy: policy(b, host), Resolver: res, AllowLoopbackUpstreams: true, Sink: NewJSONL(io.Discard).Record,
		UpstreamRoots: upRoots, ModelSink: NewCallJSONL(io.Discard).Record,
		Gateway: &Gateway{CA: runCA, Routes: []providers.Route{{Provider: "anthropic", Hosts: []string{host}, AuthHeaders: []string{"x-api-key"},
			Credentials: []providers.Credential{{Env: "ANTHROPIC_API_KEY", Placeholder: "ph-bench", Value: "sk-real"}}}}}})
	client := func(proxy string, roots *x509.CertPool) *http.Client {
		return &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(&url.URL{Scheme: "http", Host: proxy}),
			TLSClientConfig: &tls.Config{RootCAs: roots}}}
	}
	body := `{"model":"claude-sonnet-4-5","stream":true,"max_tokens":1024,"messages":[{"role":"user","content":"hi"}]}`
	var tCPU, gCPU, fCPU time.Duration
	var suite uint16
	call := func(c *http.Client, key, query string, want int64) time.Duration {
		cpu0 := processCPU(b)
		start := time.Now()
		req, _ := http.NewRequest(http.MethodPost, "https://"+host+"/v1/messages"+query, strings.NewReader(body))
		req.Header.Set("x-api-key", key)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || n < want {
			b.Fatalf("status %d, %d bytes, %v", resp.StatusCode, n, err)
		}
		d := time.Since(start)
		if query == "?long" {
			if key == "ph-bench" {
				gCPU += processCPU(b) - cpu0
				suite = resp.TLS.CipherSuite
			} else {
				tCPU += processCPU(b) - cpu0
			}
		}
		return d
	}
	// pair runs one call each way, which first alternating, adding their
	// times.
	pair := func(i int, tc, gc *http.Client, query string, want int64, t, g *time.Duration) {
		if i%2 == 0 {
			*t += call(tc, "sk-direct", query, want)
			*g += call(gc, "ph-bench", query, want)
		} else {
			*g += call(gc, "ph-bench", query, want)
			*t += call(tc, "sk-direct", query, want)
		}
	}
	median := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var tt, gt, te, ge, tFirst, gFirst time.Duration
	var tCalls, gCalls []time.Duration
	b.SetBytes(streamSize * streamPairs)
	for b.Loop() {
		// Fresh clients: the first call of each includes its connection.
		tc, gc := client(tunnel, upRoots), client(gateway, runRoots)
		tFirst += call(tc, "sk-direct", "", 0)
		gFirst += call(gc, "ph-bench", "", 0)
		for i := range callPairs {
			var t, g time.Duration
			pair(i, tc, gc, "", 0, &t, &g)
			tCalls, gCalls = append(tCalls, t), append(gCalls, g)
		}
		for i := range streamPairs {
			pair(i, tc, gc, "?long", streamSize, &tt, &gt)
			pair(i, tc, gc, "?events", streamEvents*int64(len(shortDelta)), &te, &ge)
		}
		tc.CloseIdleConnections()
		gc.CloseIdleConnections()
		fCPU += aesFloor(b, suite, streamSize*streamPairs)
	}
	mib := float64(streamSize) / (1 << 20) * float64(b.N*streamPairs)
	b.ReportMetric(ms(median(gCalls)-median(tCalls)), "added_ms_per_call")
	b.ReportMetric(ms(median(tCalls)), "tunnel_ms_per_call")
	b.ReportMetric(tt.Seconds()/gt.Seconds(), "ratio_vs_tunnel")
	b.ReportMetric(mib/tt.Seconds(), "tunnel_MiB/s")
	b.ReportMetric(mib/gt.Seconds(), "gateway_MiB/s")
	b.ReportMetric(te.Seconds()/ge.Seconds(), "events_ratio_vs_tunnel")
	b.ReportMetric(ms(gFirst-tFirst)/float64(b.N), "connect_added_ms")
	b.ReportMetric(tCPU.Seconds()/gCPU.Seconds(), "cpu_ratio_vs_tunnel")
	b.ReportMetric(ms(tCPU)/mib, "tunnel_cpu_ms/MiB")
	b.ReportMetric(ms(gCPU)/mib, "gateway_cpu_ms/MiB")
	if fCPU > 0 {
		b.ReportMetric(ms(gCPU-tCPU)/mib, "added_cpu_ms/MiB")
		b.ReportMetric(ms(fCPU)/mib, "aes_floor_ms/MiB")
		b.ReportMetric((gCPU-tCPU).Seconds()/fCPU.Seconds(), "added_over_aes_floor")
	}
}

// aesFloor returns the CPU time of sealing and then opening n bytes in
// TLS records of 16 KiB with the AEAD of suite (an AES-GCM suite of TLS
// 1.3 or 1.2), the two passes every byte through the gateway takes beyond
// the tunnel; 0 for another suite (no floor is reported).
func aesFloor(b *testing.B, suite uint16, n int) time.Duration {
	var keyLen int
	switch suite {
	case tls.TLS_AES_128_GCM_SHA256, tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256:
		keyLen = 16
	case tls.TLS_AES_256_GCM_SHA384, tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384, tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384:
		keyLen = 32
	default:
		b.Logf("no AES-GCM floor: the gateway negotiated %s", tls.CipherSuiteName(suite))
		return 0
	}
	block, err := aes.NewCipher(make([]byte, keyLen))
	if err != nil {
		b.Fatal(err)
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		b.Fatal(err)
	}
	const record = 16 << 10
	nonce, ad := make([]byte, aead.NonceSize()), make([]byte, 5)
	plain := make([]byte, record)
	sealed := make([]byte, 0, record+aead.Overhead())
	opened := make([]byte, 0, record)
	cpu0 := processCPU(b)
	for i := 0; i < n; i += record {
		binary.BigEndian.PutUint64(nonce[len(nonce)-8:], uint64(i))
		sealed = aead.Seal(sealed[:0], nonce, plain, ad)
		if opened, err = aead.Open(opened[:0], nonce, sealed, ad); err != nil {
			b.Fatal(err)
		}
	}
	return processCPU(b) - cpu0
}

// processCPU is the CPU time (user + system) the process has used.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
