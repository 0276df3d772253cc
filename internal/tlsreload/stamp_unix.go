//go:build unix

package tlsreload

import (
	"io/fs"
	"syscall"
)

// fileID is the device and inode of a file.
type fileID struct{ dev, ino uint64 }

// identity is the device and inode of fi.
func identity(fi fs.FileInfo) fileID {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileID{}
	}
	return fileID{dev: uint64(st.Dev), ino: st.Ino}
}
