// Package bench measures the kubernetes runtime against a real API server
// (internal/kubetest): a job's way through a worker Pod from zero, and
// scaling 100 endpoints × 10 workers up and down with the requests Berth
// sends, counted by the API server's audit log. It has no code outside its
// benchmarks, which run only with -bench:
//
//	go test -run '^$' -bench . -benchtime 20x ./runtime/kube/bench/
package bench
