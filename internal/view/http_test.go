package view_test

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/proctor-eval/proctor/internal/view"
)

// TestViewReadOnlyAndToken: the viewer answers GET only; with a token it
// refuses requests without it and accepts ?token= (setting a cookie the
// pages' own requests carry) and a bearer header.
func TestViewReadOnlyAndToken(t *testing.T) {
	t.Parallel()
	_, b := startNATS(t)
	srv := startView(t, b, view.Config{Version: "test", Token: "s3cret"})
	resp, err := http.Post(srv.URL+"/runs.json?token=s3cret", "application/json", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	for _, c := range []struct {
		path, bearer string
		want         int
	}{
		{"/runs.json", "", http.StatusUnauthorized},
		{"/runs.json?token=wrong", "", http.StatusUnauthorized},
		{"/runs.json", "wrong", http.StatusUnauthorized},
		{"/runs.json?token=s3cret", "", http.StatusOK},
		{"/runs.json", "s3cret", http.StatusOK},
		{"/assets/app.js", "", http.StatusUnauthorized},
	} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL+c.path, nil)
		if c.bearer != "" {
			req.Header.Set("Authorization", "Bearer "+c.bearer)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("GET %s (bearer %q): %d, want %d", c.path, c.bearer, resp.StatusCode, c.want)
		}
		if c.path == "/runs.json?token=s3cret" && !strings.Contains(resp.Header.Get("Set-Cookie"), "HttpOnly") {
			t.Errorf("no HttpOnly cookie set: %q", resp.Header.Get("Set-Cookie"))
		}
	}
}

// TestViewFileStaysInCellDir: a cell's file is served as plain text from
// inside its output directory only; a link an agent left pointing out of
// it, and a path climbing out, are refused.
func TestViewFileStaysInCellDir(t *testing.T) {
	t.Parallel()
	_, b := startNATS(t)
	out := filepath.Join(t.TempDir(), "out")
	runID, cells := publishRun(t, b, 1, 1, out, false)
	dir := filepath.Join(out, "task-00000", "0")
	secret := filepath.Join(t.TempDir(), "secret.txt")
	for path, body := range map[string]string{
		filepath.Join(dir, "solve.log"): "<script>alert(1)</script>\n",
		secret:                          "host secret\n",
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(secret, filepath.Join(dir, "leak.txt")); err != nil {
		t.Fatal(err)
	}
	srv := startView(t, b, view.Config{Version: "test"})
	var cp view.CellPage
	getJSON(t, srv.URL+cellPath(runID, cells[0])+".json", &cp)
	if len(cp.Files) != 1 || cp.Files[0].Name != "solve.log" || !strings.Contains(cp.Files[0].Tail, "<script>") {
		t.Fatalf("files listed: %+v", cp.Files)
	}
	get := func(name string) (*http.Response, string) {
		resp, err := http.Get(srv.URL + "/runs/" + runID + "/file?cell=" + urlQuery(cells[0]) + "&name=" + urlQuery(name))
		if err != nil {
			t.Fatal(err)
		}
		return resp, readAll(t, resp)
	}
	resp, body := get("solve.log")
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") ||
		!strings.Contains(resp.Header.Get("Content-Security-Policy"), "sandbox") || !strings.Contains(body, "<script>") {
		t.Errorf("solve.log: %d %v %q", resp.StatusCode, resp.Header, body)
	}
	for _, name := range []string{"leak.txt", "../../../" + filepath.Base(secret), secret} {
		if resp, body := get(name); resp.StatusCode != http.StatusNotFound || strings.Contains(body, "host secret") {
			t.Errorf("%s: %d %q", name, resp.StatusCode, body)
		}
	}
}
