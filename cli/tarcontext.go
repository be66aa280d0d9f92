package cli

import (
	"io"

	"berth/builder/srctar"
)

// writeContext writes dir as berth deploy's build context (srctar.WriteDir).
func writeContext(w io.Writer, dir, keep string) (files int, err error) {
	return srctar.WriteDir(w, dir, keep)
}
