package trees_test

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/proctor-eval/proctor/pkg/trees"
)

// BenchmarkPutOutput stores a cell output of 32 MB (64 files of 512 KiB:
// half incompressible, half repetitive log lines) with trees.PutOutput
// against its floor in the same run on the same server: the plainest
// upload of the same files through the same API, an uncompressed tar of
// the directory streamed into ObjectStore.Put with each file's SHA-256
// taken on the way (the digest the design requires, so a fetch can check
// what it extracted), without zstd and without the manifest. Reported: MB/s of each and ratio (PutOutput's time over the
// floor's; target ≤ 1.5), each the best of 3 rounds alternating which
// side goes first.
func BenchmarkPutOutput(b *testing.B) {
	dir := b.TempDir()
	r := rand.New(rand.NewPCG(1, 2))
	var total int64
	for i := range 64 {
		buf := make([]byte, 512<<10)
		if i%2 == 0 {
			for j := range buf {
				buf[j] = byte(r.Uint32())
			}
		} else {
			line := []byte(fmt.Sprintf("2026-12-02T10:00:00Z step %d: ran the tests, 12 passed\n", i))
			for j := range buf {
				buf[j] = line[j%len(line)]
			}
		}
		p := filepath.Join(dir, fmt.Sprintf("d%d", i%4), fmt.Sprintf("f%02d", i))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			b.Fatal(err)
		}
		total += int64(len(buf))
	}
	ctx := context.Background()
	var best [2]time.Duration
	for i := 0; i < b.N; i++ {
		s, _ := store(b)
		for round := range 3 {
			for k := range 2 {
				side := (k + round) % 2
				name := fmt.Sprintf("r%d-%d-%d", i, round, side)
				start := time.Now()
				var err error
				if side == 0 {
					_, err = trees.PutOutput(ctx, s, name, dir)
				} else {
					err = floorPut(ctx, s, name, dir)
				}
				if err != nil {
					b.Fatal(err)
				}
				if d := time.Since(start); best[side] == 0 || d < best[side] {
					best[side] = d
				}
				_ = s.Delete(ctx, name)
			}
		}
	}
	mb := float64(total) / 1e6
	b.ReportMetric(mb/best[0].Seconds(), "proctor-MB/s")
	b.ReportMetric(mb/best[1].Seconds(), "floor-MB/s")
	b.ReportMetric(best[0].Seconds()/best[1].Seconds(), "ratio")
}

// floorPut streams an uncompressed tar of dir's regular files into name.
func floorPut(ctx context.Context, s jetstream.ObjectStore, name, dir string) error {
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.Type().IsRegular() {
				return err
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(dir, p)
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: fi.Size()}); err != nil {
				return err
			}
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			h := sha256.New()
			_, err = io.Copy(io.MultiWriter(tw, h), f)
			h.Sum(nil)
			return err
		})
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	_, err := s.Put(ctx, jetstream.ObjectMeta{Name: name}, pr)
	pr.Close()
	return err
}
