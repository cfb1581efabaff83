//go:build !unix

package cdc

import "errors"

func setsockoptRcvLowat(uintptr, int) error {
	return errors.New("SO_RCVLOWAT is set on Unix systems only")
}
