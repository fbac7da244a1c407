package bus

import "testing"

// TestStreamSeq reads the stream sequence of the v1 reply form and refuses
// every other form (the caller then parses the client's full metadata).
func TestStreamSeq(t *testing.T) {
	for _, c := range []struct {
		reply string
		seq   uint64
		ok    bool
	}{
		{"$JS.ACK.EVENTS.cons.1.42.7.1733000000000000000.3", 42, true},
		{"$JS.ACK.EVENTS.cons.1.18446744073709551615.7.1.0", 18446744073709551615, true},
		{"$JS.ACK.domain.acchash.EVENTS.cons.1.42.7.1733000000000000000.3.rand", 0, false},
		{"$JS.ACK.EVENTS.cons.1.4x2.7.1.3", 0, false},
		{"$JS.ACK.EVENTS.cons.1..7.1.3", 0, false},
		{"_INBOX.abc", 0, false},
		{"", 0, false},
	} {
		seq, ok := streamSeq(c.reply)
		if seq != c.seq || ok != c.ok {
			t.Errorf("streamSeq(%q) = %d, %v; want %d, %v", c.reply, seq, ok, c.seq, c.ok)
		}
	}
}
