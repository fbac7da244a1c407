package bus

import (
	"errors"
	"fmt"
	"os"

	"github.com/nats-io/nats.go"
)

// Auth holds the credentials proctor presents to an external NATS cluster
// (docs/decisions/2026-12-01-embedded-server-and-credentials.md). At most one way is used: a creds file (a user
// JWT and its nkey seed, as `nsc` writes it), an nkey seed file, or a user
// and password. The zero value presents nothing.
type Auth struct {
	// User and Password are a user of the server's authorization block.
	User, Password string
	// CredsFile is a decentralised-auth credentials file (JWT + seed).
	CredsFile string
	// NkeySeedFile holds a user nkey seed ("SU..."): the client signs the
	// server's nonce with it.
	NkeySeedFile string
}

// Empty reports whether a holds no credentials.
func (a Auth) Empty() bool { return a == Auth{} }

// Options returns the nats.go options that present a's credentials, or an
// error naming what is inconsistent or unreadable: more than one way, a
// password without a user, a missing file.
func (a Auth) Options() ([]nats.Option, error) {
	ways := 0
	for _, set := range []bool{a.User != "" || a.Password != "", a.CredsFile != "", a.NkeySeedFile != ""} {
		if set {
			ways++
		}
	}
	switch {
	case ways > 1:
		return nil, errors.New("bus: give one of a user and password, a creds file or an nkey seed file")
	case a.Password != "" && a.User == "":
		return nil, errors.New("bus: a NATS password needs a user")
	case a.User != "":
		return []nats.Option{nats.UserInfo(a.User, a.Password)}, nil
	case a.CredsFile != "":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("bus: creds file: %w", err)
		}
		return []nats.Option{nats.UserCredentials(a.CredsFile)}, nil
	case a.NkeySeedFile != "":
		opt, err := nats.NkeyOptionFromSeed(a.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("bus: nkey seed file %s: %w", a.NkeySeedFile, err)
		}
		return []nats.Option{opt}, nil
	}
	return nil, nil
}
