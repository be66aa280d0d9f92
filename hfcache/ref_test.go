package hfcache

import (
	"strings"
	"testing"
	"time"
)

func TestParseRef(t *testing.T) {
	long := strings.Repeat("a", 97)
	for _, tc := range []struct {
		in      string
		want    Ref
		wantErr string
	}{
		{in: "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct", want: Ref{"Qwen", "Qwen2.5-0.5B-Instruct", "main"}},
		{in: "https://huggingface.co/Qwen/Qwen2.5-0.5B-Instruct:main", want: Ref{"Qwen", "Qwen2.5-0.5B-Instruct", "main"}},
		{in: "https://huggingface.co/org_1/m.v2:v1.0", want: Ref{"org_1", "m.v2", "v1.0"}},
		{in: "https://huggingface.co/o/n:refs/pr/1", want: Ref{"o", "n", "refs/pr/1"}},
		{in: "https://huggingface.co/o/n:0123456789abcdef0123456789abcdef01234567", want: Ref{"o", "n", "0123456789abcdef0123456789abcdef01234567"}},
		{in: "http://huggingface.co/o/n", wantErr: "not a Hugging Face model reference"},
		{in: "huggingface.co/o/n", wantErr: "not a Hugging Face model reference"},
		{in: "https://example.com/o/n", wantErr: "not a Hugging Face model reference"},
		{in: "Qwen/Qwen2.5", wantErr: "not a Hugging Face model reference"},
		{in: "", wantErr: "not a Hugging Face model reference"},
		{in: "https://huggingface.co/o", wantErr: "exactly one /"},
		{in: "https://huggingface.co/o/n/x", wantErr: "exactly one /"},
		{in: "https://huggingface.co/o/", wantErr: "model name"},
		{in: "https://huggingface.co//n", wantErr: "organisation"},
		{in: "https://huggingface.co/o--x/n", wantErr: "organisation"},
		{in: "https://huggingface.co/o/n--x", wantErr: "model name"},
		{in: "https://huggingface.co/o/..", wantErr: "model name"},
		{in: "https://huggingface.co/o/-n", wantErr: "model name"},
		{in: "https://huggingface.co/o/n.", wantErr: "model name"},
		{in: "https://huggingface.co/o/n x", wantErr: "model name"},
		{in: "https://huggingface.co/o/" + long, wantErr: "model name"},
		{in: "https://huggingface.co/o/n:", wantErr: "revision"},
		{in: "https://huggingface.co/o/n:../../etc", wantErr: "revision"},
		{in: "https://huggingface.co/o/n:/abs", wantErr: "revision"},
		{in: "https://huggingface.co/o/n:a/../b", wantErr: "revision"},
		{in: "https://huggingface.co/o/n:a/.hidden", wantErr: "revision"},
		{in: "https://huggingface.co/o/n:x:y", wantErr: "revision"},
		{in: "https://huggingface.co/o/n:br anch", wantErr: "revision"},
		{in: "https://huggingface.co/o/n:main\n", wantErr: "control characters"},
		{in: "https://huggingface.co/o/n\x00", wantErr: "control characters"},
		{in: "https://huggingface.co/o/" + strings.Repeat("n", 600), wantErr: "at most 512"},
	} {
		got, err := ParseRef(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseRef(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("ParseRef(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			continue
		}
		// The canonical form reads back the same.
		if again, err := ParseRef(got.String()); err != nil || again != got {
			t.Errorf("ParseRef(%q) = %+v, %v", got.String(), again, err)
		}
	}
}

func TestProgressString(t *testing.T) {
	ref := Ref{"Qwen", "Qwen2.5-0.5B-Instruct", "main"}
	for _, tc := range []struct {
		p    Progress
		want string
	}{
		{Progress{Ref: ref, State: Downloading, Done: 312_400_000, Total: 988_100_000}, "downloading Qwen/Qwen2.5-0.5B-Instruct: 312 MB of 988 MB"},
		{Progress{Ref: ref, State: Downloading, Done: 1_500_000_000, Total: 15_200_000_000}, "downloading Qwen/Qwen2.5-0.5B-Instruct: 1.5 GB of 15.2 GB"},
		{Progress{Ref: Ref{"o", "n", "v1"}, State: Downloading, Done: 2_000, Total: 500_000}, "downloading o/n:v1: 2 kB of 500 kB"},
		{Progress{Ref: ref, State: Pending}, "waiting to download Qwen/Qwen2.5-0.5B-Instruct"},
		{Progress{Ref: ref, State: Ready}, "Qwen/Qwen2.5-0.5B-Instruct is ready"},
	} {
		if got := tc.p.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.p, got, tc.want)
		}
	}
}

// TestProgressLine: a download program's progress line reads back as the
// progress it wrote; lines about another model or of other output are
// skipped.
func TestProgressLine(t *testing.T) {
	r, _ := ParseRef("https://huggingface.co/acme/tiny")
	other, _ := ParseRef("https://huggingface.co/acme/other")
	p := Progress{Ref: r, State: Failed, Done: 5, Total: 9, Error: "HTTP 401", Attempts: 2, RetryAt: time.Date(2026, 11, 28, 8, 0, 0, 0, time.UTC)}
	log := "starting\n" + string(Progress{Ref: r, State: Pending}.Line()) + string(p.Line()) + string(Progress{Ref: other, State: Ready}.Line()) + "noise\n"
	got, ok := LastLine(strings.NewReader(log), r)
	if !ok || got != p {
		t.Fatalf("got %+v %v, want %+v", got, ok, p)
	}
	if _, ok := LastLine(strings.NewReader("nothing\n"), r); ok {
		t.Error("a log without a line read as one")
	}
}
