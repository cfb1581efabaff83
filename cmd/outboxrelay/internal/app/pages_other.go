//go:build !linux

package app

import "errors"

// releaseBinaryPages does nothing outside Linux.
func releaseBinaryPages() (int64, error) { return 0, errors.ErrUnsupported }
