package v1api

import (
	"io"
	"net/http"
	"strconv"
	"time"
)

// backup streams a consistent copy of the database (one bbolt read
// transaction; writers are not blocked): `berth backup FILE` saves it.
// Content-Length is the copy's size, so a cut-off transfer is detected.
func (a *API) backup(w http.ResponseWriter, r *http.Request) {
	_, err := a.cfg.Store.BackupSized(func(size int64) io.Writer {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
		w.Header().Set("Content-Disposition", `attachment; filename="berth-`+time.Now().UTC().Format("20060102T150405Z")+`.db"`)
		return w
	})
	if err != nil {
		// The headers are sent: the client sees a body shorter than
		// Content-Length.
		a.cfg.Logger.Error("backup", "err", err)
	}
}
