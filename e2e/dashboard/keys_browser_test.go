package dashboard_test

import (
	"berth/internal/apptest"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestDashboardKeys (chromium): with an All key the Keys page makes a
// Restricted key, shows its secret once and lists it without; signed in
// with that key, the dashboard shows only its endpoint (no GPUs or pods it
// may not read break the page) and the Keys page says it needs an All key.
func TestDashboardKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("runs chromium")
	}
	exe := chromium(t)
	const key = "keys-test-key"
	b := startApp(t, apptest.Config(t, key))
	var tpl, granted, other struct{ ID string }
	b.call("POST", "/v1/templates", map[string]any{"name": "t", "imageName": "x:1", "isServerless": true}, &tpl)
	b.call("POST", "/v1/endpoints", map[string]any{"name": "granted", "templateId": tpl.ID, "workersMax": 0}, &granted)
	b.call("POST", "/v1/endpoints", map[string]any{"name": "other", "templateId": tpl.ID, "workersMax": 0}, &other)

	bctx := browser(t, exe)
	if err := chromedp.Do(bctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	ctx, cancel := context.WithTimeout(bctx, 5*time.Minute)
	defer cancel()
	step := func(name string, acts ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		sctx, scancel := context.WithTimeout(ctx, 90*time.Second)
		defer scancel()
		if err := chromedp.Do(sctx, acts...); err != nil {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
			t.Fatalf("%s: %v\npage text:\n%s", name, err, body)
		}
	}
	sh := shots{dir: t.TempDir()}
	card := func(id string) string { return fmt.Sprintf(`.endpoint-card[data-endpoint=%q]`, id) }
	step("sign in", chromedp.EmulateViewport(1280, 860),
		chromedp.Navigate(b.base+"/"),
		visible("#key-input"),
		chromedp.SendKeys(chromedp.CSS("#key-input"), key),
		chromedp.Click(chromedp.CSS("#key-submit")),
		visible(card(granted.ID)))
	step("create a key", chromedp.Navigate(b.base+"/#/keys"),
		visible("#key-name"),
		chromedp.SendKeys(chromedp.CSS("#key-name"), "ci-bot"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById('key-permission').value = 'RESTRICTED'`),
		chromedp.SendKeys(chromedp.CSS("#key-endpoints"), granted.ID+"=READ_WRITE"),
		chromedp.Click(chromedp.CSS("#key-create")),
		visible("#key-secret-value"),
		until(`[...document.querySelectorAll('tr[data-key]')].some((r) => r.textContent.includes('ci-bot') && r.textContent.includes('RESTRICTED'))`, time.Minute),
		sh.save("desktop-keys"),
	)
	secret, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('key-secret-value').textContent`))
	if err != nil || !strings.HasPrefix(secret, "rpa_") {
		t.Fatalf("the secret shown: %q %v", secret, err)
	}
	if list, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector('table.list').textContent`)); strings.Contains(list, secret) {
		t.Fatal("the key list shows the secret")
	}

	step("the Restricted key", chromedp.Click(chromedp.CSS("#signout")),
		chromedp.Navigate(b.base+"/#/"), // signing in opens the page of the address
		visible("#key-input"),
		chromedp.SendKeys(chromedp.CSS("#key-input"), secret),
		chromedp.Click(chromedp.CSS("#key-submit")),
		visible(card(granted.ID)),
		until(fmt.Sprintf(`document.querySelector(%q) === null`, card(other.ID)), time.Minute),
		chromedp.Navigate(b.base+"/#/keys"),
		// The page is redrawn on every poll: a node found may be replaced.
		until(`(() => { const e = document.getElementById('keys-forbidden'); return e !== null && e.textContent.includes('is Restricted'); })()`, time.Minute),
	)
}
