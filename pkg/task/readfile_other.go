//go:build !unix

package task

import (
	"errors"
	"io"
	"os"
)

// hashFile streams path into h through buf; when keep is non-nil the bytes
// are also collected into it.
func hashFile(path string, h io.Writer, buf []byte, keep *[]byte) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for {
		n, err := f.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			if keep != nil {
				*keep = append(*keep, buf[:n]...)
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}
