// Package atomicfile writes files so a reader sees the old file or the
// whole new one, never a part: a temporary file beside the target, filled,
// made 0644, synced, then renamed over it.
package atomicfile

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write creates path's directory if needed and lets write fill a buffered
// temporary file that then replaces path. On an error path is untouched
// and the temporary file removed; the error names path.
//
// A path that exists and is not a regular file or a directory (a device
// such as /dev/null or /dev/stdout, a fifo) is written in place, never
// replaced: renaming over /dev/null as root would turn it into a regular
// file for every process of the machine.
func Write(path string, write func(io.Writer) error) (err error) {
	if fi, err := os.Stat(path); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
		return writeInPlace(path, write)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
			err = fmt.Errorf("write %s: %w", path, err)
		}
	}()
	bw := bufio.NewWriterSize(tmp, 256<<10)
	if err = write(bw); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// writeInPlace writes to the existing special file path through a buffer.
func writeInPlace(path string, write func(io.Writer) error) error {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	bw := bufio.NewWriterSize(f, 256<<10)
	err = write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteBytes is Write for data already in memory.
func WriteBytes(path string, data []byte) error {
	return Write(path, func(w io.Writer) error { _, err := w.Write(data); return err })
}
