package cleaner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"

	"berth/cleaner"
)

type run struct {
	task string
	n    int
	err  error
}

// Each task runs on the service's clock every Every, a failing or
// panicking task keeps its schedule, and Stop ends the loops.
func TestTasksRunOnTheirClock(t *testing.T) {
	clock := clockwork.NewFakeClock()
	runs := make(chan run, 16)
	calls := 0
	s := cleaner.New(cleaner.Config{
		Clock: clock,
		Tasks: []cleaner.Task{
			{Name: "minute", Every: time.Minute, Run: func(context.Context) (int, error) { calls++; return calls, nil }},
			{Name: "fails", Every: time.Hour, Run: func(context.Context) (int, error) { return 0, errors.New("boom") }},
			{Name: "panics", Every: time.Hour, Run: func(context.Context) (int, error) { panic("oops") }},
		},
		OnRun: func(task string, n int, _ time.Duration, err error) { runs <- run{task, n, err} },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := clock.BlockUntilContext(ctx, 1); err != nil { // one ticker for all
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	if r := <-runs; r.task != "minute" || r.n != 1 {
		t.Fatalf("%+v", r)
	}
	got := map[string]int{}
	for i := 1; i < 60; i++ {
		clock.Advance(time.Minute)
		r := <-runs
		got[r.task]++
		if r.task == "minute" && r.n != i+1 {
			t.Fatalf("run %d: %+v", i+1, r)
		}
	}
	for len(got) < 3 || got["fails"]+got["panics"] < 2 {
		r := <-runs // the hour's runs may come after the 60th minute's
		got[r.task]++
		if r.task == "fails" && r.err == nil {
			t.Fatal("error lost")
		}
	}
	s.Stop()
	if err := clock.BlockUntilContext(ctx, 0); err != nil {
		t.Fatal(err)
	}
}
