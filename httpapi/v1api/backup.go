package v1api

import (
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"berth/store"
)

// maxBackups bounds the backups made at once: each holds a copy of the
// database on disk while its client reads it.
const maxBackups = 2

// backup serves a consistent copy of the database: `berth backup FILE`
// saves it. The copy is first written at disk speed to an unnamed
// temporary file in the data directory (store.Snapshot: the read
// transaction lasts that long and no longer), then streamed at the
// client's pace, so a client that reads slowly, or not at all, holds a file
// descriptor, never the database: writers and the file's growth go on.
// Content-Length is the copy's size, so a cut-off transfer is detected.
func (a *API) backup(w http.ResponseWriter, r *http.Request) {
	select {
	case a.backups <- struct{}{}:
		defer func() { <-a.backups }()
	default:
		w.Header().Set("Retry-After", "10")
		writeErr(w, http.StatusTooManyRequests, "backup: "+strconv.Itoa(maxBackups)+" backups are being made already; try again when one ends")
		return
	}
	f, size, err := a.cfg.Store.Snapshot(filepath.Dir(a.cfg.Store.Path()), a.cfg.BackupReserve)
	var nse *store.NoSpaceError
	switch {
	case errors.As(err, &nse):
		writeErr(w, http.StatusInsufficientStorage, "backup: "+err.Error())
		return
	case err != nil:
		a.cfg.Logger.Error("backup", "err", err)
		writeErr(w, http.StatusInternalServerError, "backup: "+err.Error())
		return
	}
	defer f.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	w.Header().Set("Content-Disposition", `attachment; filename="berth-`+time.Now().UTC().Format("20060102T150405Z")+`.db"`)
	if _, err := io.Copy(w, f); err != nil && r.Context().Err() == nil {
		// The headers are sent: the client sees a body shorter than
		// Content-Length.
		a.cfg.Logger.Warn("backup: the copy was not delivered", "err", err)
	}
}
