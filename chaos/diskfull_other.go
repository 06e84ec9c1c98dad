//go:build !linux

package chaos

import "errors"

func mountTmpfs(string, int64) error { return errors.New("a tmpfs store needs Linux") }

func unmount(string) error { return nil }
