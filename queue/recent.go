package queue

// An endpoint's recently finished jobs are remembered after their results
// expire (a /runsync result after a minute, a /run one after 30 minutes,
// as on RunPod), so the dashboard's job list does not empty a minute
// after a job ran: their id, status, times and worker only — never their
// input, output or error — in a ring of Config.RecentJobs per endpoint,
// in memory (a restart forgets what already expired).

// DefaultRecentJobs is Config.RecentJobs' default.
const DefaultRecentJobs = 100

// recentRing holds an endpoint's last finished jobs, oldest overwritten.
type recentRing struct {
	buf  []JobView
	next int
}

func (r *recentRing) add(v JobView, max int) {
	if len(r.buf) < max {
		r.buf = append(r.buf, v)
		return
	}
	r.buf[r.next] = v
	r.next = (r.next + 1) % len(r.buf)
}

// recordRecentLocked remembers j, just finished, in its endpoint's ring.
func (s *Service) recordRecentLocked(ep *endpointQ, j *job) {
	if s.cfg.RecentJobs < 0 {
		return
	}
	v := jobView(j, s.clock.Now())
	v.Input, v.Output, v.Error, v.Stream = nil, nil, nil, nil
	v.ResultExpired = true // as it is shown once the job itself is gone
	ep.recent.add(v, s.cfg.RecentJobs)
}

// expiredRecentLocked is ep's remembered jobs that are no longer retained
// (their results expired, or they were removed), newest last; the latest
// record of a job retried and finished again wins.
func (s *Service) expiredRecentLocked(ep *endpointQ) []JobView {
	var out []JobView
	seen := map[string]bool{}
	n := len(ep.recent.buf)
	for i := n - 1; i >= 0; i-- {
		v := ep.recent.buf[(ep.recent.next+i)%n]
		if seen[v.ID] || s.jobs[v.ID] != nil || ep.done[v.ID] != nil {
			continue
		}
		seen[v.ID] = true
		out = append(out, v)
	}
	return out
}
