package v1api_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"berth/httpapi"
	"berth/httplimit"
	"berth/internal/apitest"
	"berth/store"
)

// unreadBackup starts GET /v1/backup on a connection with a small receive
// buffer, waits for the answer's header and reads no further. It returns
// the connection, its reader and the status and Content-Length.
func unreadBackup(t *testing.T, addr string) (net.Conn, *bufio.Reader, int, int64) {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		return serr
	}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	fmt.Fprintf(c, "GET /v1/backup HTTP/1.1\r\nHost: berth\r\nAuthorization: Bearer %s\r\n\r\n", apitest.Key)
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	br := bufio.NewReaderSize(c, 4096)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("backup: no answer: %v", err)
	}
	return c, br, res.StatusCode, res.ContentLength
}

// TestUnreadBackupDoesNotStopWrites: while a client holds a backup it
// does not read, /run keeps answering promptly and the database file keeps
// growing (past its mapping: bbolt remaps, which a read transaction held at
// the reader's pace used to block, stopping every write and then every
// read); the backup, read at last, is a complete and valid database.
func TestUnreadBackupDoesNotStopWrites(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := apitest.NewJobEnv(t, apitest.RawConn(httplimit.Limits{}))
	ep := e.Endpoint(nil)
	addr := e.App.Addr()
	pad := strings.Repeat("p", 500<<10)
	run := func() time.Duration {
		start := time.Now()
		req, _ := http.NewRequest("POST", e.Base+"/v2/"+ep+"/run", strings.NewReader(`{"input":{"pad":"`+pad+`"}}`))
		req.Header.Set("Authorization", "Bearer "+apitest.Key)
		c := &http.Client{Timeout: 60 * time.Second}
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("/run during an unread backup: %v after %s", err, time.Since(start))
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("/run: %d", res.StatusCode)
		}
		return time.Since(start)
	}
	for range 30 { // ≈ 15 MB: more than the sockets buffer
		run()
	}
	size := func() int64 {
		fi, err := os.Stat(e.DB.Path())
		if err != nil {
			t.Fatal(err)
		}
		return fi.Size()
	}
	before := size()

	c, br, code, length := unreadBackup(t, addr)
	if code != 200 || length < before/2 {
		t.Fatalf("backup: %d, Content-Length %d (file %d)", code, length, before)
	}
	var worst time.Duration
	n := 0
	for size() < 2*before+(8<<20) { // past the next remap
		worst = max(worst, run())
		if n++; n > 400 {
			t.Fatalf("the file stays at %d bytes", size())
		}
	}
	start := time.Now()
	if r := e.Do("GET", "/v1/templates", "Bearer "+apitest.Key, nil); r.Code != 200 {
		t.Fatalf("GET /v1/templates: %d", r.Code)
	}
	if worst > 10*time.Second || time.Since(start) > 10*time.Second {
		t.Errorf("while the backup was unread: the slowest /run took %s, GET /v1/templates %s", worst, time.Since(start))
	}
	t.Logf("while a backup of %d MB was unread: %d /run of 500 KB, the slowest %s; the file grew %d → %d MB",
		length>>20, n, worst.Round(time.Millisecond), before>>20, size()>>20)

	// The backup, read now, is whole and valid.
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	out := filepath.Join(t.TempDir(), "backup.db")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.CopyN(f, br, length)
	f.Close()
	if err != nil || got != length {
		t.Fatalf("backup body: %d of %d bytes: %v", got, length, err)
	}
	if err := store.Check(out); err != nil {
		t.Fatalf("the backup is not a valid database: %v", err)
	}
	c.Close()
	// The temporary copy was never visible in the data directory.
	ents, _ := os.ReadDir(filepath.Dir(e.DB.Path()))
	for _, ent := range ents {
		if strings.Contains(ent.Name(), "snapshot") {
			t.Errorf("left in the data directory: %s", ent.Name())
		}
	}
}

// TestBackupLimits: at most two backups at once (the third is told to
// retry), and none when the copy would leave the data directory short of
// its reserve (507, with the figures).
func TestBackupLimits(t *testing.T) {
	t.Parallel() // mostly waiting on the wall clock: overlapped with the other such tests
	e := apitest.NewJobEnv(t, apitest.RawConn(httplimit.Limits{}))
	ep := e.Endpoint(nil)
	addr := e.App.Addr()
	pad := strings.Repeat("p", 500<<10)
	for range 30 { // ≈ 15 MB: more than the sockets buffer, so a backup nobody reads stays open
		e.Admin("POST", "/v2/"+ep+"/run", `{"input":{"pad":"`+pad+`"}}`, 200)
	}
	for range 2 {
		if _, _, code, _ := unreadBackup(t, addr); code != 200 {
			t.Fatalf("backup: %d", code)
		}
	}
	req, _ := http.NewRequest("GET", e.Base+"/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Key)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 429 || res.Header.Get("Retry-After") == "" || !strings.Contains(string(b), "backups are being made") {
		t.Errorf("a third backup: %d %.200q", res.StatusCode, b)
	}

	full := apitest.NewJobEnv(t, apitest.RawHTTP(func(c *httpapi.Settings) { c.BackupReserve = 1 << 60 }))
	req, _ = http.NewRequest("GET", full.Base+"/v1/backup", nil)
	req.Header.Set("Authorization", "Bearer "+apitest.Key)
	res, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusInsufficientStorage || !strings.Contains(string(b), "not enough free disk space") || !strings.Contains(string(b), "MB are") {
		t.Errorf("a backup without room: %d %.200q", res.StatusCode, b)
	}
}
