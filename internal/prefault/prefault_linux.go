package prefault

import "golang.org/x/sys/unix"

// populate allocates n bytes and backs them. The block is unreachable once it returns, so
// the collection after it frees the block.
//
//go:noinline
func populate(n int64) error {
	return unix.Madvise(make([]byte, n), unix.MADV_POPULATE_WRITE)
}
