package dockertest

import (
	"net/http"
	"testing"
)

func TestRegistry(t *testing.T) {
	host, user, pass := Registry(t)
	get := func(user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+host+"/v2/", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if c := get("", ""); c != http.StatusUnauthorized {
		t.Fatalf("anonymous: %d", c)
	}
	if c := get(user, pass+"x"); c != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", c)
	}
	if c := get(user, pass); c != http.StatusOK {
		t.Fatalf("login: %d", c)
	}
}
