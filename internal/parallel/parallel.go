// Package parallel runs independent pieces of one job on every CPU.
package parallel

import (
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
)

// Each runs do(0) to do(n-1) on as many goroutines as there are CPUs, each
// taking the next index as it becomes free, and returns the errors they
// returned, joined. do must be safe to run concurrently for distinct i.
func Each(n int, do func(i int) error) error {
	errs := make([]error, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, runtime.GOMAXPROCS(0)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				errs[i] = do(i)
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
