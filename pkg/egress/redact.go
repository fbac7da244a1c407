package egress

import (
	"bytes"
	"regexp"
	"strings"
)

// RedactCredentials replaces the credentials of every proxy or service
// address in s with Redacted and returns the rest of s unchanged. Two
// forms are recognised:
//
//   - a URL with an authority: "scheme://user:pw@host..." (or a token as the
//     user name, "scheme://tok@host"): the whole userinfo goes,
//     "http://REDACTED@proxy:3128";
//   - a proxy address without a scheme, as http_proxy is often written and
//     as curl reads it: "user:pw@host:port" at the start of s or after a
//     blank, a quote, "=", ",", ";" or an opening bracket:
//     "REDACTED@host:port". The port is required (a proxy address has one),
//     so an e-mail address ("user@example.com"), "git@github.com:org/repo"
//     and an image reference with a tag and a digest
//     ("python:3.12@sha256:...") are left alone.
//
// It is cheap on text without "@" (no match is attempted).
func RedactCredentials(s string) string {
	if strings.IndexByte(s, '@') < 0 {
		return s
	}
	s = urlUserinfo.ReplaceAllString(s, "${1}"+Redacted+"@")
	return barePrincipal.ReplaceAllString(s, "${1}"+Redacted+"@${2}")
}

// RedactCredentialsBytes is RedactCredentials for a byte slice; it returns
// b itself when there is nothing to redact.
func RedactCredentialsBytes(b []byte) []byte {
	if bytes.IndexByte(b, '@') < 0 {
		return b
	}
	out := urlUserinfo.ReplaceAll(b, []byte("${1}"+Redacted+"@"))
	return barePrincipal.ReplaceAll(out, []byte("${1}"+Redacted+"@${2}"))
}

var (
	// urlUserinfo matches the userinfo of a URL with an authority
	// ("scheme://user:pw@"). The userinfo may not hold '/', '@', a quote or
	// white space.
	urlUserinfo = regexp.MustCompile(`(?i)([a-z][a-z0-9+.-]*://)[^/?#@\s"']+@`)
	// barePrincipal matches "user:pw@host:port" without a scheme: a
	// delimiter (or the start), the user name and password (no '/', '@',
	// ':' or delimiter in the name, no quote or blank in either), then the host (a name,
	// an IPv4 address or a bracketed IPv6 one) and a port of 1 to 5
	// digits ending at a non-word character. The host and port are kept
	// (group 2).
	barePrincipal = regexp.MustCompile(`(^|[\s"'=,;(<\[{])[^\s"'/@:=,;(<\[{]+:[^\s"'/@]+@((?:[A-Za-z0-9][A-Za-z0-9.-]*|\[[0-9A-Fa-f:.]+\]):[0-9]{1,5}\b)`)
)
