package egress

import "testing"

// TestRedactCredentials: the userinfo of a URL and a proxy address written
// without a scheme (user:pw@host:port, as http_proxy often is) are
// redacted wherever they stand in a line; e-mail addresses, git remotes
// and image digests are not credentials and stay.
func TestRedactCredentials(t *testing.T) {
	cases := []struct{ in, want string }{
		{"http://user:pw@proxy:3128", "http://REDACTED@proxy:3128"},
		{"dial HTTPS://tok@gw.test/x failed", "dial HTTPS://REDACTED@gw.test/x failed"},
		{"user:pw@proxy.corp:3128", "REDACTED@proxy.corp:3128"},
		{"HTTPS_PROXY=alice:s3cr%40t@10.0.0.7:8080 next", "HTTPS_PROXY=REDACTED@10.0.0.7:8080 next"},
		{`{"env":"bob:hunter2@proxy:3128"}`, `{"env":"REDACTED@proxy:3128"}`},
		{"proxy (u:p@[fd00::1]:3128) refused", "proxy (REDACTED@[fd00::1]:3128) refused"},
		{"export http_proxy='u:p@h:80'", "export http_proxy='REDACTED@h:80'"},
		{"user@example.com", "user@example.com"},
		{"git@github.com:org/repo.git", "git@github.com:org/repo.git"},
		{"python:3.12@sha256:0123abcd", "python:3.12@sha256:0123abcd"},
		{"at 12:30@home", "at 12:30@home"},
		{"http://proxy:3128/path@x", "http://proxy:3128/path@x"},
		{"no credentials here", "no credentials here"},
		{"", ""},
	}
	for _, c := range cases {
		if got := RedactCredentials(c.in); got != c.want {
			t.Errorf("RedactCredentials(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := string(RedactCredentialsBytes([]byte(c.in))); got != c.want {
			t.Errorf("RedactCredentialsBytes(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
