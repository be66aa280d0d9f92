package app_test

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"berth/app"
	"berth/gpu"
	"berth/queue"
)

// The host's own non-loopback addresses (the Docker bridge's, the LAN's)
// are refused as webhook targets like loopback, at /run already, unless
// --webhook-allow names them. No job runs here, so nothing is delivered:
// no traffic goes to those addresses.
func TestWebhookToTheHostsOwnAddressRefused(t *testing.T) {
	addrs, err := queue.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var own netip.Addr
	for _, a := range addrs {
		if !a.IsLoopback() && !a.IsLinkLocalUnicast() && !a.IsMulticast() {
			own = a
			break
		}
	}
	if !own.IsValid() {
		t.Skipf("this machine has no non-loopback address (%v)", addrs)
	}
	hook := fmt.Sprintf("http://%s/hook", netip.AddrPortFrom(own, 9))
	for _, c := range []struct {
		allow []string
		code  int
	}{
		{nil, 400},
		{[]string{own.String()}, 200},
	} {
		a := start(t, app.Config{DataDir: t.TempDir(), Addr: "127.0.0.1:0", Logger: quiet, APIKey: "k-hook", Backend: app.DockerOff,
			DiscoverGPUs: func() ([]gpu.Device, error) { return nil, nil }, WebhookAllow: c.allow})
		s := &surfaces{t: t, url: a.URL(), key: "k-hook"}
		_, tpl := s.call("POST", "/v1/templates", map[string]any{"name": "w", "imageName": "worker:1", "isServerless": true})
		_, ep := s.call("POST", "/v1/endpoints", map[string]any{"templateId": tpl["id"], "workersMax": 0})
		id, _ := ep["id"].(string)
		if id == "" {
			t.Fatalf("endpoint: %v", ep)
		}
		code, m := s.call("POST", "/v2/"+id+"/run", map[string]any{"input": map[string]any{}, "webhook": hook})
		b, _ := json.Marshal(m)
		if code != c.code || (c.code == 400 && !strings.Contains(string(b), "this host's own address")) {
			t.Errorf("--webhook-allow %v: /run with webhook %s answered %d %s, want %d", c.allow, hook, code, b, c.code)
		}
		_, health := s.call("GET", "/v2/"+id+"/health", nil)
		if q := health["jobs"].(map[string]any)["inQueue"]; (c.code == 400) != (q == 0.0) {
			t.Errorf("--webhook-allow %v: %v queued after a %d", c.allow, q, code)
		}
		stop(t, a)
	}
}
