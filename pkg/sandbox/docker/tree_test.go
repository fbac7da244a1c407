package docker

import (
	"context"
	"fmt"
	"testing"

	"github.com/proctor-eval/proctor/pkg/sandbox"
)

// TestCopyOutTreeHostMatchesCopyAPI: CopyOutTree through the container's
// root directory and through the engine's copy API copy the same entries
// and leave out the same ones (a file over the byte budget, the second
// name of a hard link whose first was left out, every entry past the
// entry cap), and record the same cut.
func TestCopyOutTreeHostMatchesCopyAPI(t *testing.T) {
	t.Parallel()
	host, api, hh, ha := hostAndAPI(t)
	ctx := context.Background()
	prepare := `set -e
mkdir -p /w/app/src /w/app/zz
echo 'int main(){}' > /w/app/src/main.c
head -c 5000 /dev/zero > /w/app/big
ln /w/app/big /w/app/big2
head -c 300 /dev/zero > /w/app/mid
ln /w/app/mid /w/app/mid2
ln -s /etc /w/app/etc
ln -s /tests /w/app/tests
mkfifo /w/app/fifo
for i in 1 2 3 4 5 6; do echo $i > /w/app/zz/f$i; done`
	execOK(t, host, hh, prepare)
	execOK(t, api, ha, prepare)
	for _, lim := range []sandbox.TreeLimits{{MaxBytes: 1000, MaxEntries: 100}, {MaxBytes: 1 << 20, MaxEntries: 8}} {
		var got [2]string
		for i, p := range []struct {
			d *Driver
			h *sandbox.Handle
		}{{host, hh}, {api, ha}} {
			before := p.d.hostOps.Load()
			dst := t.TempDir()
			tc, err := p.d.CopyOutTree(ctx, p.h, "/w/app", dst, lim)
			if err != nil {
				t.Fatal(err)
			}
			got[i] = fmt.Sprintf("%+v\n%s", tc, hostTree(t, dst))
			if i == 0 {
				requireHostPath(t, p.d, before)
			}
			if tc.Bytes > lim.MaxBytes || tc.Files+tc.Dirs+tc.Links > lim.MaxEntries {
				t.Errorf("%+v: over the limits %+v", tc, lim)
			}
			if !tc.Truncated {
				t.Errorf("%+v: nothing left out", tc)
			}
		}
		if got[0] != got[1] {
			t.Errorf("limits %+v: the host path and the copy API differ:\nhost:\n%s\napi:\n%s", lim, got[0], got[1])
		}
	}
}
