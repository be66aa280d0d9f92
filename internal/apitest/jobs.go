package apitest

import "time"

// Run submits input (JSON) to endpoint ep's /run and returns the job's id.
func (e *Env) Run(ep string, input string) string {
	e.T.Helper()
	m := e.Admin("POST", "/v2/"+ep+"/run", `{"input":`+input+`}`, 200)
	if m["status"] != "IN_QUEUE" {
		e.T.Fatalf("run: %v", m)
	}
	return m["id"].(string)
}

// WorkerEnv registers a new worker of ep (GET worker-env) and returns its
// environment: its id, key and the protocol's URLs.
func (e *Env) WorkerEnv(ep string) map[string]string {
	e.T.Helper()
	m := e.Admin("GET", "/v1/endpoints/"+ep+"/worker-env", nil, 200)
	out := map[string]string{}
	for k, v := range m {
		out[k] = v.(string)
	}
	return out
}

// WaitStatus waits for the job to reach want, reading /status after each
// change the queue signals; a job that ends otherwise fails the test.
func (e *Env) WaitStatus(ep, id, want string) map[string]any {
	e.T.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		ch, _ := e.Q.Watch(ep, id)
		m := e.Admin("GET", "/v2/"+ep+"/status/"+id, nil, 200)
		if m["status"] == want {
			return m
		}
		if s, _ := m["status"].(string); s != "IN_QUEUE" && s != "IN_PROGRESS" {
			e.T.Fatalf("job %s is %v, want %s: %v", id, s, want, m)
		}
		select {
		case <-ch:
		case <-time.After(time.Second):
		}
	}
	e.T.Fatalf("job %s never reached %s", id, want)
	return nil
}

// Watch returns a function that blocks until the job has changed since
// Watch was called (or 30 s pass): call Watch before looking at the job, so
// a change in between is not missed.
func (e *Env) Watch(ep, id string) func() {
	ch, err := e.Q.Watch(ep, id)
	return func() {
		if err != nil {
			return
		}
		select {
		case <-ch:
		case <-time.After(30 * time.Second):
		}
	}
}
