//go:build !linux

package prefault

import (
	"errors"
	"fmt"
)

// populate fails: MADV_POPULATE_WRITE is Linux's. This file lets snigate build and vet on a
// developer's machine; Heap then costs only its collection, as on a Linux before 5.14.
func populate(int64) error {
	return fmt.Errorf("madvise: %w (MADV_POPULATE_WRITE is Linux only)", errors.ErrUnsupported)
}
